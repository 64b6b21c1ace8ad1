// Fused attention forward on CUDA (NOTE [Flash attention on CUDA] in attention_common.cuh).
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_mma.h"
#if !defined(TRIDENT_SIMT)  // the host side: not compiled by the CPU emulator (tests/simt/simt.h)
#include "ops/cuda/common.cuh"
#endif

namespace trident::cuda {

namespace attn {
namespace {

// One block per (head b, 64 query rows); smem: Q [64][ld_rows(D)], then one [64][ld_cols(max(D,
// Dv))] buffer holding the key tile and then the value tile.
template <typename T, int kMaxD>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Operand<T> q, Operand<T> k, Operand<T> v, MaskDesc mask, Params p, T* __restrict__ out,
                   float* __restrict__ lse) {
  TRIDENT_DYNAMIC_SHARED(float4, smem4);
  __shared__ uint16_t bits[kTile * 4];
  float* sQ = reinterpret_cast<float*>(smem4);
  const int ldq = ld_rows(p.D), ldkv = ld_cols(max(p.D, p.Dv));
  float* sKV = sQ + kTile * ldq;
  const int64_t tiles = (p.Tq + kTile - 1) / kTile;
  const int64_t b = blockIdx.x / tiles;
  const int64_t q0 = (tiles - 1 - blockIdx.x % tiles) * kTile;  // causal: the longest rows start first
  const int g = static_cast<int>(threadIdx.x) / 16, l = static_cast<int>(threadIdx.x) % 16;

  load_tile(sQ, ldq, q.head(b), q.sr, q0, p.Tq, p.D);
  const int64_t mhead = mask.base ? mask_head(mask, b) : 0;
  float m[kRows], sum[kRows], acc[kRows][kMaxD / 16];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    m[i] = -INFINITY;
    sum[i] = 0.f;
#pragma unroll
    for (int c = 0; c < kMaxD / 16; ++c) acc[i][c] = 0.f;
  }
  const int64_t kend = p.causal ? min(p.Tk, q0 + kTile) : p.Tk;  // causal: later keys are never seen
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();  // the previous value tile (or nothing yet) is no longer read
    load_tile(sKV, ldkv, k.head(b), k.sr, k0, p.Tk, p.D);
    if (p.dropout) dropout_bits(bits, p, b, q0, k0);
    __syncthreads();
    float s[kRows][kCols] = {};
    tile_dot(s, sQ, ldq, sKV, ldkv, p.D, g, l);
    // Online softmax: s becomes exp(s - m_new) (dropped and rescaled when dropout is on; the
    // sum counts the kept and the dropped alike, as the CPU normalizes before dropping).
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int64_t row = q0 + g * kRows + i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int64_t col = k0 + l + 16 * j;
        float x = -INFINITY;
        if (col < p.Tk && (!p.causal || col <= row)) {
          x = s[i][j] * p.scale;
          if (mask.base && row < p.Tq) x += mask_value<T>(mask, mhead, row, col);
        }
        s[i][j] = x;
        mx = fmaxf(mx, x);
      }
      mx = group_max(mx);
      const float mnew = fmaxf(m[i], mx);
      const float mref = mnew == -INFINITY ? 0.f : mnew;  // all -inf so far: exp(-inf - 0) = 0, no NaN
      const float alpha = expf(m[i] - mref);
      float ps = 0.f;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const float e = expf(s[i][j] - mref);
        ps += e;
        s[i][j] = !p.dropout ? e : kept(bits, g * kRows + i, l + 16 * j) ? e * p.keep_scale : 0.f;
      }
      sum[i] = sum[i] * alpha + group_sum(ps);
      m[i] = mnew;
#pragma unroll
      for (int c = 0; c < kMaxD / 16; ++c) acc[i][c] *= alpha;
    }
    __syncthreads();  // the key tile is no longer read
    load_tile(sKV, ldkv, v.head(b), v.sr, k0, p.Tk, p.Dv);
    __syncthreads();
    tile_accumulate<kMaxD>(acc, s, sKV, ldkv, p.Dv, l);
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int64_t row = q0 + g * kRows + i;
    if (row >= p.Tq) continue;
    const float inv = sum[i] > 0.f ? 1.f / sum[i] : 0.f;  // a row that sees no key: zeros
    T* o = out + (b * p.Tq + row) * p.Dv;
#pragma unroll
    for (int c = 0; c < kMaxD / 16; ++c)
      if (l + 16 * c < p.Dv) o[l + 16 * c] = static_cast<T>(acc[i][c] * inv);
    if (l == 0) lse[b * p.Tq + row] = sum[i] > 0.f ? m[i] + logf(sum[i]) : -INFINITY;
  }
}

// Dynamic shared memory of forward_kernel.
inline size_t forward_smem(const Params& p) {
  return sizeof(float) * kTile * (ld_rows(p.D) + ld_cols(std::max(p.D, p.Dv)));
}

}  // namespace
}  // namespace attn

#if !defined(TRIDENT_SIMT)
namespace attn {
namespace {

template <typename T, int kMaxD>
void launch_forward(const Tensor& q, const Tensor& k, const Tensor& v, const MaskDesc& md, const Params& p, Tensor& out,
                    Tensor& lse) {
  Tensor qk, kk, vk;
  const Operand<T> qo = operand<T>(q, qk), ko = operand<T>(k, kk), vo = operand<T>(v, vk);
  const int device = q.device().index;
  const size_t smem = forward_smem(p);
  allow_shared_memory(forward_kernel<T, kMaxD>, smem, device);
  const int blocks = grid_blocks(q.size(0), (p.Tq + kTile - 1) / kTile);
  forward_kernel<T, kMaxD><<<blocks, kThreads, smem, current_stream(device).handle()>>>(
      qo, ko, vo, md, p, static_cast<T*>(out.data_ptr()), static_cast<float*>(lse.data_ptr()));
  TRIDENT_CUDA_KERNEL_CHECK();
}

}  // namespace
}  // namespace attn

Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const AttentionParams& ap,
                         Tensor& lse) {
  const int64_t BH = q.size(0), Tq = q.size(1), Dv = v.size(2);
  const attn::Params p = attn::params(q, k, v, ap);
  Tensor out = empty_on({BH, Tq, Dv}, q.dtype(), q.device());
  lse = empty_on({BH, Tq}, DType::F32, q.device());
  if (BH == 0 || Tq == 0) return out;
  DeviceGuard guard(q.device().index);
  if (attention_mma_supported(q, k, v)) {
    attention_mma_forward(q, k, v, mask, ap, out, lse);
    return out;
  }
  const attn::MaskDesc md = attn::mask_desc(mask);
  TRIDENT_DISPATCH_CUDA_FLOATING(q.dtype(), "scaled_dot_product_attention", [&] {
    if (std::max(p.D, p.Dv) <= 64)
      attn::launch_forward<scalar_t, 64>(q, k, v, md, p, out, lse);
    else
      attn::launch_forward<scalar_t, 128>(q, k, v, md, p, out, lse);
  });
  return out;
}
#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
