// Fused attention backward on CUDA (NOTE [Flash attention on CUDA] in attention_common.cuh):
// Delta = rowsum(dO * O), then dK and dV by key tiles, then dQ by query tiles; no atomics, so
// the gradients are the same from run to run.
#include <type_traits>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_mma.h"
#if !defined(TRIDENT_SIMT)  // the host side: not compiled by the CPU emulator (tests/simt/simt.h)
#include "ops/cuda/common.cuh"
#endif

namespace trident::cuda {

namespace attn {
namespace {

// delta[b * Tq + r] = dO[b, r] . O[b, r], a warp per row.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    delta_kernel(Operand<T> dout, Operand<T> out, float* __restrict__ delta, int64_t BH, int64_t Tq, int Dv) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32; row < BH * Tq; row += warps) {
    const int64_t b = row / Tq, r = row % Tq;
    const T* a = dout.head(b) + r * dout.sr;
    const T* o = out.head(b) + r * out.sr;
    float s = 0.f;
    for (int c = lane; c < Dv; c += 32) s = fmaf(static_cast<float>(a[c]), static_cast<float>(o[c]), s);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) delta[row] = s;
  }
}

// One block per (head b, 64 keys): walks the query tiles that see any of its keys. smem:
// K [64][ld_rows(D)], V [64][ld_rows(Dv)] (read by rows), Q [64][ld_cols(D)], dO [64][ld_cols(Dv)]
// (read by columns in the products, by rows in the accumulations).
template <typename T, int kMaxD>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(Operand<T> q, Operand<T> k, Operand<T> v, Operand<T> dout, MaskDesc mask, Params p,
                const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dk, T* __restrict__ dv) {
  TRIDENT_DYNAMIC_SHARED(float4, smem4);
  __shared__ uint16_t bits[kTile * 4];
  __shared__ float sL[kTile], sDelta[kTile];
  const int ldk = ld_rows(p.D), ldv = ld_rows(p.Dv), ldq = ld_cols(p.D), ldo = ld_cols(p.Dv);
  float* sK = reinterpret_cast<float*>(smem4);
  float* sV = sK + kTile * ldk;
  float* sQ = sV + kTile * ldv;
  float* sO = sQ + kTile * ldq;
  const int64_t tiles = (p.Tk + kTile - 1) / kTile;
  const int64_t b = blockIdx.x / tiles;
  const int64_t k0 = (blockIdx.x % tiles) * kTile;  // causal: the first keys have the most queries; they start first
  const int g = static_cast<int>(threadIdx.x) / 16, l = static_cast<int>(threadIdx.x) % 16;

  load_tile(sK, ldk, k.head(b), k.sr, k0, p.Tk, p.D);
  load_tile(sV, ldv, v.head(b), v.sr, k0, p.Tk, p.Dv);
  const int64_t mhead = mask.base ? mask_head(mask, b) : 0;
  float gk[kRows][kMaxD / 16] = {}, gv[kRows][kMaxD / 16] = {};
  // Causal: query i sees key j when j <= i, so no tile before the one holding query k0.
  for (int64_t i0 = p.causal ? k0 / kTile * kTile : 0; i0 < p.Tq; i0 += kTile) {
    __syncthreads();  // the previous query tile is no longer read
    load_tile(sQ, ldq, q.head(b), q.sr, i0, p.Tq, p.D);
    load_tile(sO, ldo, dout.head(b), dout.sr, i0, p.Tq, p.Dv);
    if (threadIdx.x < kTile) {
      const int64_t row = i0 + threadIdx.x;
      sL[threadIdx.x] = row < p.Tq ? lse[b * p.Tq + row] : -INFINITY;
      sDelta[threadIdx.x] = row < p.Tq ? delta[b * p.Tq + row] : 0.f;
    }
    if (p.dropout) dropout_bits(bits, p, b, i0, k0);
    __syncthreads();
    // Transposed tiles: s[a][c] = k_j . q_i and dp[a][c] = v_j . dO_i for key j = k0 + 4g + a and
    // query i = i0 + l + 16c.
    float s[kRows][kCols] = {}, dp[kRows][kCols] = {};
    tile_dot(s, sK, ldk, sQ, ldq, p.D, g, l);
    tile_dot(dp, sV, ldv, sO, ldo, p.Dv, g, l);
#pragma unroll
    for (int a = 0; a < kRows; ++a) {
      const int64_t j = k0 + g * kRows + a;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int il = l + 16 * c;
        const int64_t i = i0 + il;
        const ProbGrad r = score_grad<T>(p, mask, mhead, i, j, s[a][c], dp[a][c], sL[il], sDelta[il],
                                         p.dropout && kept(bits, il, g * kRows + a));
        s[a][c] = r.pd;
        dp[a][c] = r.ds;
      }
    }
    tile_accumulate<kMaxD>(gv, s, sO, ldo, p.Dv, l);  // dV += P_drop^T dO
    tile_accumulate<kMaxD>(gk, dp, sQ, ldq, p.D, l);  // dK += dS^T Q (scaled below)
  }
#pragma unroll
  for (int a = 0; a < kRows; ++a) {
    const int64_t j = k0 + g * kRows + a;
    if (j >= p.Tk) continue;
    T* dkr = dk + (b * p.Tk + j) * p.D;
    T* dvr = dv + (b * p.Tk + j) * p.Dv;
#pragma unroll
    for (int c = 0; c < kMaxD / 16; ++c) {
      if (l + 16 * c < p.D) dkr[l + 16 * c] = static_cast<T>(gk[a][c] * p.scale);
      if (l + 16 * c < p.Dv) dvr[l + 16 * c] = static_cast<T>(gv[a][c]);
    }
  }
}

// One block per (head b, 64 queries): walks the key tiles its rows see. smem: Q [64][ld_rows(D)],
// dO [64][ld_rows(Dv)], K [64][ld_cols(D)], V [64][ld_cols(Dv)]. dmask (when not null) gets dS.
template <typename T, int kMaxD>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(Operand<T> q, Operand<T> k, Operand<T> v, Operand<T> dout, MaskDesc mask, Params p,
              const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dq, T* __restrict__ dmask) {
  TRIDENT_DYNAMIC_SHARED(float4, smem4);
  __shared__ uint16_t bits[kTile * 4];
  const int ldq = ld_rows(p.D), ldo = ld_rows(p.Dv), ldk = ld_cols(p.D), ldv = ld_cols(p.Dv);
  float* sQ = reinterpret_cast<float*>(smem4);
  float* sO = sQ + kTile * ldq;
  float* sK = sO + kTile * ldo;
  float* sV = sK + kTile * ldk;
  const int64_t tiles = (p.Tq + kTile - 1) / kTile;
  const int64_t b = blockIdx.x / tiles;
  const int64_t i0 = (tiles - 1 - blockIdx.x % tiles) * kTile;  // causal: the longest rows start first
  const int g = static_cast<int>(threadIdx.x) / 16, l = static_cast<int>(threadIdx.x) % 16;

  load_tile(sQ, ldq, q.head(b), q.sr, i0, p.Tq, p.D);
  load_tile(sO, ldo, dout.head(b), dout.sr, i0, p.Tq, p.Dv);
  const int64_t mhead = mask.base ? mask_head(mask, b) : 0;
  float L[kRows], dl[kRows], gq[kRows][kMaxD / 16] = {};
#pragma unroll
  for (int a = 0; a < kRows; ++a) {
    const int64_t row = i0 + g * kRows + a;
    L[a] = row < p.Tq ? lse[b * p.Tq + row] : -INFINITY;
    dl[a] = row < p.Tq ? delta[b * p.Tq + row] : 0.f;
  }
  const int64_t kend = p.causal ? min(p.Tk, i0 + kTile) : p.Tk;
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();  // the previous key and value tiles are no longer read
    load_tile(sK, ldk, k.head(b), k.sr, k0, p.Tk, p.D);
    load_tile(sV, ldv, v.head(b), v.sr, k0, p.Tk, p.Dv);
    if (p.dropout) dropout_bits(bits, p, b, i0, k0);
    __syncthreads();
    float s[kRows][kCols] = {}, dp[kRows][kCols] = {};
    tile_dot(s, sQ, ldq, sK, ldk, p.D, g, l);
    tile_dot(dp, sO, ldo, sV, ldv, p.Dv, g, l);
#pragma unroll
    for (int a = 0; a < kRows; ++a) {
      const int64_t i = i0 + g * kRows + a;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int jl = l + 16 * c;
        const int64_t j = k0 + jl;
        const ProbGrad r =
            score_grad<T>(p, mask, mhead, i, j, s[a][c], dp[a][c], L[a], dl[a], p.dropout && kept(bits, g * kRows + a, jl));
        s[a][c] = r.ds;
        if (dmask && i < p.Tq && j < p.Tk) dmask[(b * p.Tq + i) * p.Tk + j] = static_cast<T>(r.ds);
      }
    }
    tile_accumulate<kMaxD>(gq, s, sK, ldk, p.D, l);  // dQ += dS K (scaled below)
  }
#pragma unroll
  for (int a = 0; a < kRows; ++a) {
    const int64_t i = i0 + g * kRows + a;
    if (i >= p.Tq) continue;
    T* dqr = dq + (b * p.Tq + i) * p.D;
#pragma unroll
    for (int c = 0; c < kMaxD / 16; ++c)
      if (l + 16 * c < p.D) dqr[l + 16 * c] = static_cast<T>(gq[a][c] * p.scale);
  }
}

// Dynamic shared memory of dkdv_kernel and dq_kernel.
inline size_t backward_smem(const Params& p) {
  return sizeof(float) * kTile * (ld_rows(p.D) + ld_rows(p.Dv) + ld_cols(p.D) + ld_cols(p.Dv));
}

}  // namespace
}  // namespace attn

#if !defined(TRIDENT_SIMT)
namespace attn {
namespace {

template <typename T, int kMaxD>
void launch_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const MaskDesc& md,
                     const Tensor& out, const Tensor& lse, const Params& p, AttentionGrads& g) {
  Tensor keep[5];
  const Operand<T> qo = operand<T>(q, keep[0]), ko = operand<T>(k, keep[1]), vo = operand<T>(v, keep[2]);
  const Operand<T> go = operand<T>(dout, keep[3]), oo = operand<T>(out, keep[4]);
  const int64_t BH = q.size(0);
  const int device = q.device().index;
  const cudaStream_t stream = current_stream(device).handle();
  const Tensor lse_c = lse.contiguous();
  Tensor delta = empty_on({BH, p.Tq}, DType::F32, q.device());
  delta_kernel<T><<<grid_size((BH * p.Tq + kThreads / 32 - 1) / (kThreads / 32), 1), kThreads, 0, stream>>>(
      go, oo, static_cast<float*>(delta.data_ptr()), BH, p.Tq, p.Dv);
  TRIDENT_CUDA_KERNEL_CHECK();
  const float* lp = static_cast<const float*>(lse_c.data_ptr());
  const float* dp = static_cast<const float*>(delta.data_ptr());
  if constexpr (!std::is_same_v<T, float>) {
    if (attention_mma_backward(dout, q, k, v, md, p, lp, dp, g)) return;  // NOTE [Tensor-core attention]
  }

  const size_t smem = backward_smem(p);
  allow_shared_memory(dkdv_kernel<T, kMaxD>, smem, device);
  dkdv_kernel<T, kMaxD><<<grid_blocks(BH, (p.Tk + kTile - 1) / kTile), kThreads, smem, stream>>>(
      qo, ko, vo, go, md, p, lp, dp, static_cast<T*>(g.dk.data_ptr()), static_cast<T*>(g.dv.data_ptr()));
  TRIDENT_CUDA_KERNEL_CHECK();
  allow_shared_memory(dq_kernel<T, kMaxD>, smem, device);
  dq_kernel<T, kMaxD><<<grid_blocks(BH, (p.Tq + kTile - 1) / kTile), kThreads, smem, stream>>>(
      qo, ko, vo, go, md, p, lp, dp, static_cast<T*>(g.dq.data_ptr()),
      g.dmask.defined() ? static_cast<T*>(g.dmask.data_ptr()) : nullptr);
  TRIDENT_CUDA_KERNEL_CHECK();
}

}  // namespace
}  // namespace attn

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                  const Tensor& out, const Tensor& lse, const AttentionParams& ap, bool want_dmask) {
  const int64_t BH = q.size(0), Tq = q.size(1), Tk = k.size(1), D = q.size(2), Dv = v.size(2);
  const attn::Params p = attn::params(q, k, v, ap);
  TRIDENT_CHECK(lse.dtype() == DType::F32 && lse.sizes() == Shape({BH, Tq}),
                "scaled_dot_product_attention backward (CUDA): lse must be the f32 [", BH, ", ", Tq,
                "] tensor the forward returned, got ", lse.dtype(), " ", lse.sizes());
  const TensorOptions opts = TensorOptions(q.dtype()).device(q.device());
  AttentionGrads g;
  const bool empty = BH == 0 || Tq == 0 || Tk == 0;
  // Every row and key that the kernels visit is written; only these may need zeros first.
  g.dq = empty ? zeros({BH, Tq, D}, opts) : empty_on({BH, Tq, D}, q.dtype(), q.device());
  g.dk = empty ? zeros({BH, Tk, D}, opts) : empty_on({BH, Tk, D}, q.dtype(), q.device());
  g.dv = empty ? zeros({BH, Tk, Dv}, opts) : empty_on({BH, Tk, Dv}, q.dtype(), q.device());
  if (want_dmask) g.dmask = zeros({BH, Tq, Tk}, opts);  // causal: the skipped tiles stay 0
  if (empty) return g;
  DeviceGuard guard(q.device().index);
  const attn::MaskDesc md = attn::mask_desc(mask);
  TRIDENT_DISPATCH_CUDA_FLOATING(q.dtype(), "scaled_dot_product_attention backward", [&] {
    if (std::max(p.D, p.Dv) <= 64)
      attn::launch_backward<scalar_t, 64>(dout, q, k, v, md, out, lse, p, g);
    else
      attn::launch_backward<scalar_t, 128>(dout, q, k, v, md, out, lse, p, g);
  });
  return g;
}
#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
