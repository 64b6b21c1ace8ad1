// Tensor-core attention backward for f16 and bf16 (NOTE [Tensor-core attention] in
// attention_mma_forward.cu): the two deterministic passes of NOTE [Flash attention on CUDA]
// (dK and dV by key tiles, then dQ by query tiles, no atomics), each product on mma.sync with
// f32 accumulation. A warp owns 16 rows of its block's tile (keys in the first pass, queries in
// the second); the probabilities and dS leave the accumulators as A fragments of the next
// product, rounded to the input dtype as in the forward pass. Shared-memory tiles are stored
// row-major (rows padded by 8 elements) and arrive by cp.async, two stages of the tiles a pass
// walks; ldmatrix reads them along the head dim as they are and along the tile transposed
// (Q and dO for dK and dV, K for dQ), so no tile is stored twice.
#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/attention_mma.h"
#if !defined(TRIDENT_SIMT)  // the host side: not compiled by the CPU emulator (tests/simt/simt.h)
#include "ops/cuda/common.cuh"
#endif

namespace trident::cuda {

namespace attn {
namespace {

// Keys (first pass) or queries (second) of the other side that a warp's score registers cover
// at once: half a tile. All 64 would take s and dp to 64 registers beside dK and dV's 128 at
// D = 128 and push the first pass past 255; at D = 64 the half keeps both passes near 168
// registers, three blocks per multiprocessor instead of two (ptxas, sm_80 and sm_90).
constexpr int kSub = 32;

// Whether every score of (query tile i0, key tile k0) is inside both lengths and the causal
// triangle with no mask: then P = exp(scale q.k - lse) needs no per-element checks.
__device__ __forceinline__ bool plain_tile(const Params& p, const MaskDesc& mask, int64_t i0, int64_t k0) {
  return !mask.base && i0 + kTile <= p.Tq && k0 + kTile <= p.Tk && (!p.causal || k0 + kTile - 1 <= i0);
}

// P and dS of the score of query i and key j from raw = q_i . k_j, the row's lse in base 2
// (L2 = lse log2(e)): exp(x - lse) as one FFMA and one exp2; in a plain tile x is scale raw.
template <typename T>
__device__ __forceinline__ ProbGrad mma_score_grad(bool plain, const Params& p, const MaskDesc& mask, int64_t mhead,
                                                   int64_t i, int64_t j, float raw, float dp, float L2, float delta,
                                                   bool keep) {
  float P;
  if (plain) {
    P = exp2f(fmaf(raw, p.scale * kLog2e, -L2));
  } else {
    const float x = score_value<T>(p, mask, mhead, i, j, raw);
    P = x != -INFINITY && L2 != -INFINITY ? exp2f(fmaf(x, kLog2e, -L2)) : 0.f;
  }
  return grad_of_prob(P, dp, delta, p.dropout, p.dropout && keep, p.keep_scale);
}

// The two score-sized products of a backward tile, for a warp's 16 rows and N columns: s = A1 B1^T
// and dp = A2 B2^T, where A1, A2 point at the warp's first row of row-major tiles and B1, B2 at
// the first of N rows on the other side (row stride D + 8): s[j], dp[j] hold columns 8 j .. 8 j + 7.
template <typename M, int D, int N>
__device__ __forceinline__ void two_products(float (&s)[N / 8][4], float (&dp)[N / 8][4], const uint16_t* a1,
                                             const uint16_t* b1, const uint16_t* a2, const uint16_t* b2, int lane) {
  constexpr int kLd = D + 8;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = dp[j][0] = dp[j][1] = dp[j][2] = dp[j][3] = 0.f;
#pragma unroll
  for (int st = 0; st < D / 16; ++st) {
    uint32_t x[4], y[4];
    mma::ldmatrix_a(x, a1 + 16 * st, kLd, lane);
    mma::ldmatrix_a(y, a2 + 16 * st, kLd, lane);
#pragma unroll
    for (int j = 0; j < N / 8; j += 2) {
      uint32_t bb[4];
      mma::ldmatrix_bt(bb, b1 + 8 * j * kLd + 16 * st, kLd, lane);
      mma::mma_16816<M>(s[j], x, bb[0], bb[1]);
      mma::mma_16816<M>(s[j + 1], x, bb[2], bb[3]);
      mma::ldmatrix_bt(bb, b2 + 8 * j * kLd + 16 * st, kLd, lane);
      mma::mma_16816<M>(dp[j], y, bb[0], bb[1]);
      mma::mma_16816<M>(dp[j + 1], y, bb[2], bb[3]);
    }
  }
}

// acc[n] += A B for the D / 8 column blocks of a 16 x D accumulator, A the fragment of 16 rows
// of the other side, B the 16 rows x D of a row-major tile at `rows` (read transposed).
template <typename M, int D>
__device__ __forceinline__ void accumulate_rows(float (&acc)[D / 8][4], const uint32_t (&a)[4], const uint16_t* rows,
                                                int lane) {
#pragma unroll
  for (int n = 0; n < D / 8; n += 2) {
    uint32_t bb[4];
    mma::ldmatrix_b(bb, rows + 8 * n, D + 8, lane);
    mma::mma_16816<M>(acc[n], a, bb[0], bb[1]);
    mma::mma_16816<M>(acc[n + 1], a, bb[2], bb[3]);
  }
}

// One block per (head b, 64 keys); warp w owns keys k0 + 16 w .. + 15 and walks the query tiles
// that see any of the block's keys: S^T = K Q^T and dP^T = V dO^T, then dV += P_drop^T dO and
// dK += dS^T Q (scaled at the end). The query tiles (Q, dO, their lse and delta) are double
// buffered: the next one loads by cp.async while this one is worked on.
template <typename T, int D>
__global__ void __launch_bounds__(kMmaThreads)
    mma_dkdv_kernel(Operand<uint16_t> q, Operand<uint16_t> k, Operand<uint16_t> v, Operand<uint16_t> dout, MaskDesc mask,
                    Params p, const float* __restrict__ lse, const float* __restrict__ delta, uint16_t* __restrict__ dk,
                    uint16_t* __restrict__ dv) {
  using M = typename MmaType<T>::type;
  constexpr int kLd = D + 8;
  constexpr int kOut = D / 8, kStage = 2 * kTile * kLd;
  TRIDENT_DYNAMIC_SHARED(uint4, smem_mma);
  __shared__ uint16_t bits[kTile * 4];
  __shared__ float sL[2][kTile], sDelta[2][kTile];
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem_mma);  // [64][kLd] each
  uint16_t* sV = sK + kTile * kLd;
  uint16_t* sQO = sV + kTile * kLd;  // stage s: Q at sQO + s kStage, dO behind it

  const int64_t tiles = (p.Tk + kTile - 1) / kTile;
  const int64_t b = blockIdx.x / tiles;
  const int64_t k0 = (blockIdx.x % tiles) * kTile;  // causal: the first keys have the most queries; they start first
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int wr = warp * 16;
  const int key_a = wr + g, key_b = key_a + 8;  // this lane's two keys, in the tile
  // Query tile i0 into stage st: Q and dO by cp.async, lse and delta by plain stores (visible
  // behind the barrier that also covers the copies).
  const auto fetch = [&](int st, int64_t i0) {
    uint16_t* dst = sQO + st * kStage;
    async_rows<D>(dst, kLd, q.head(b), q.sr, i0, p.Tq);
    async_rows<D>(dst + kTile * kLd, kLd, dout.head(b), dout.sr, i0, p.Tq);
    if (threadIdx.x < kTile) {
      const int64_t row = i0 + threadIdx.x;
      sL[st][threadIdx.x] = row < p.Tq ? lse[b * p.Tq + row] * kLog2e : -INFINITY;  // base 2
      sDelta[st][threadIdx.x] = row < p.Tq ? delta[b * p.Tq + row] : 0.f;
    }
  };

  // Causal: query i sees key j when j <= i, so no tile before the one holding query k0.
  const int64_t first = p.causal ? k0 / kTile * kTile : 0;
  async_rows<D>(sK, kLd, k.head(b), k.sr, k0, p.Tk);
  async_rows<D>(sV, kLd, v.head(b), v.sr, k0, p.Tk);
  fetch(0, first);
  mma::cp_async_commit();
  const int64_t mhead = mask.base ? mask_head(mask, b) : 0;
  float gk[kOut][4], gv[kOut][4];
#pragma unroll
  for (int n = 0; n < kOut; ++n) {
    gk[n][0] = gk[n][1] = gk[n][2] = gk[n][3] = 0.f;
    gv[n][0] = gv[n][1] = gv[n][2] = gv[n][3] = 0.f;
  }
  int st = 0;
  for (int64_t i0 = first; i0 < p.Tq; i0 += kTile, st ^= 1) {
    // The other stage and the bits were last read before the barrier that ended the last tile.
    if (i0 + kTile < p.Tq) fetch(st ^ 1, i0 + kTile);
    mma::cp_async_commit();
    if (p.dropout) {
      for (int x = static_cast<int>(threadIdx.x); x < kTile * 4; x += kMmaThreads) dropout_bits(bits, p, b, i0, k0, x);
    }
    mma::cp_async_wait<1>();  // this thread's copies of this tile
    __syncthreads();          // and everyone's
    const uint16_t* cQ = sQO + st * kStage;
    const uint16_t* cO = cQ + kTile * kLd;
    const float* cL = sL[st];
    const float* cD = sDelta[st];
    const bool plain = plain_tile(p, mask, i0, k0);

    for (int h = 0; h < kTile; h += kSub) {
      // s[j] = keys x queries h + 8 j .. + 7 of K Q^T, dp[j] of V dO^T.
      float s[kSub / 8][4], dp[kSub / 8][4];
      two_products<M, D, kSub>(s, dp, sK + wr * kLd, cQ + h * kLd, sV + wr * kLd, cO + h * kLd, lane);
      // s becomes P_drop^T, dp becomes dS^T.
#pragma unroll
      for (int j = 0; j < kSub / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kl = e < 2 ? key_a : key_b, il = h + 8 * j + 2 * t + (e & 1);
          const ProbGrad r = mma_score_grad<T>(plain, p, mask, mhead, i0 + il, k0 + kl, s[j][e], dp[j][e], cL[il], cD[il],
                                               p.dropout && kept(bits, il, kl));
          s[j][e] = r.pd;
          dp[j][e] = r.ds;
        }
      }
      // Queries h + 16 kk .. + 15 are accumulators 2 kk and 2 kk + 1.
#pragma unroll
      for (int kk = 0; kk < kSub / 16; ++kk) {
        uint32_t pa[4], da[4];
        mma::acc_to_a<M>(pa, s[2 * kk], s[2 * kk + 1]);
        mma::acc_to_a<M>(da, dp[2 * kk], dp[2 * kk + 1]);
        accumulate_rows<M, D>(gv, pa, cO + (h + 16 * kk) * kLd, lane);  // dV += P_drop^T dO
        accumulate_rows<M, D>(gk, da, cQ + (h + 16 * kk) * kLd, lane);  // dK += dS^T Q
      }
    }
    __syncthreads();  // this stage, its statistics and the bits are free
  }
  const int64_t ka = k0 + key_a, kb = k0 + key_b;
#pragma unroll
  for (int n = 0; n < kOut; ++n) {
    const int c = 8 * n + 2 * t;
    if (ka < p.Tk) {
      *reinterpret_cast<uint32_t*>(dk + (b * p.Tk + ka) * D + c) = mma::pack2<M>(gk[n][0] * p.scale, gk[n][1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv + (b * p.Tk + ka) * D + c) = mma::pack2<M>(gv[n][0], gv[n][1]);
    }
    if (kb < p.Tk) {
      *reinterpret_cast<uint32_t*>(dk + (b * p.Tk + kb) * D + c) = mma::pack2<M>(gk[n][2] * p.scale, gk[n][3] * p.scale);
      *reinterpret_cast<uint32_t*>(dv + (b * p.Tk + kb) * D + c) = mma::pack2<M>(gv[n][2], gv[n][3]);
    }
  }
}

// One block per (head b, 64 queries); warp w owns queries i0 + 16 w .. + 15 and walks the key
// tiles they see: S = Q K^T and dP = dO V^T, then dQ += dS K (scaled at the end). dmask (when
// not null) gets dS. The key tiles (K and V) are double buffered like the first pass's query tiles.
template <typename T, int D>
__global__ void __launch_bounds__(kMmaThreads)
    mma_dq_kernel(Operand<uint16_t> q, Operand<uint16_t> k, Operand<uint16_t> v, Operand<uint16_t> dout, MaskDesc mask,
                  Params p, const float* __restrict__ lse, const float* __restrict__ delta, uint16_t* __restrict__ dq,
                  uint16_t* __restrict__ dmask) {
  using M = typename MmaType<T>::type;
  constexpr int kLd = D + 8;
  constexpr int kOut = D / 8, kStage = 2 * kTile * kLd;
  TRIDENT_DYNAMIC_SHARED(uint4, smem_mma);
  __shared__ uint16_t bits[kTile * 4];
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem_mma);  // [64][kLd] each
  uint16_t* sO = sQ + kTile * kLd;
  uint16_t* sKV = sO + kTile * kLd;  // stage s: K at sKV + s kStage, V behind it

  const int64_t tiles = (p.Tq + kTile - 1) / kTile;
  const int64_t b = blockIdx.x / tiles;
  const int64_t i0 = (tiles - 1 - blockIdx.x % tiles) * kTile;  // causal: the longest rows start first
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int wr = warp * 16;
  const int64_t row_a = i0 + wr + g, row_b = row_a + 8;
  const auto fetch = [&](int st, int64_t k0) {
    uint16_t* dst = sKV + st * kStage;
    async_rows<D>(dst, kLd, k.head(b), k.sr, k0, p.Tk);
    async_rows<D>(dst + kTile * kLd, kLd, v.head(b), v.sr, k0, p.Tk);
  };

  async_rows<D>(sQ, kLd, q.head(b), q.sr, i0, p.Tq);
  async_rows<D>(sO, kLd, dout.head(b), dout.sr, i0, p.Tq);
  fetch(0, 0);
  mma::cp_async_commit();
  const int64_t mhead = mask.base ? mask_head(mask, b) : 0;
  // The two rows' lse in base 2.
  const float L_a = row_a < p.Tq ? lse[b * p.Tq + row_a] * kLog2e : -INFINITY;
  const float L_b = row_b < p.Tq ? lse[b * p.Tq + row_b] * kLog2e : -INFINITY;
  const float d_a = row_a < p.Tq ? delta[b * p.Tq + row_a] : 0.f, d_b = row_b < p.Tq ? delta[b * p.Tq + row_b] : 0.f;
  float gq[kOut][4];
#pragma unroll
  for (int n = 0; n < kOut; ++n) gq[n][0] = gq[n][1] = gq[n][2] = gq[n][3] = 0.f;

  const int64_t kend = p.causal ? min(p.Tk, i0 + kTile) : p.Tk;
  int st = 0;
  for (int64_t k0 = 0; k0 < kend; k0 += kTile, st ^= 1) {
    // The other stage and the bits were last read before the barrier that ended the last tile.
    if (k0 + kTile < kend) fetch(st ^ 1, k0 + kTile);
    mma::cp_async_commit();
    if (p.dropout) {
      for (int x = static_cast<int>(threadIdx.x); x < kTile * 4; x += kMmaThreads) dropout_bits(bits, p, b, i0, k0, x);
    }
    mma::cp_async_wait<1>();  // this thread's copies of this tile
    __syncthreads();          // and everyone's
    const uint16_t* cK = sKV + st * kStage;
    const uint16_t* cV = cK + kTile * kLd;
    const bool plain = plain_tile(p, mask, i0, k0);

    for (int h = 0; h < kTile; h += kSub) {
      // s[j] = queries x keys h + 8 j .. + 7 of Q K^T, dp[j] of dO V^T.
      float s[kSub / 8][4], dp[kSub / 8][4];
      two_products<M, D, kSub>(s, dp, sQ + wr * kLd, cK + h * kLd, sO + wr * kLd, cV + h * kLd, lane);
      // s becomes dS.
#pragma unroll
      for (int j = 0; j < kSub / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int il = wr + g + (e < 2 ? 0 : 8), jl = h + 8 * j + 2 * t + (e & 1);
          const int64_t i = i0 + il, key = k0 + jl;
          const ProbGrad r = mma_score_grad<T>(plain, p, mask, mhead, i, key, s[j][e], dp[j][e], e < 2 ? L_a : L_b,
                                               e < 2 ? d_a : d_b, p.dropout && kept(bits, il, jl));
          s[j][e] = r.ds;
          if (dmask && i < p.Tq && key < p.Tk) {
            const T v16 = static_cast<T>(r.ds);
            dmask[(b * p.Tq + i) * p.Tk + key] = *reinterpret_cast<const uint16_t*>(&v16);
          }
        }
      }
#pragma unroll
      for (int kk = 0; kk < kSub / 16; ++kk) {
        uint32_t da[4];
        mma::acc_to_a<M>(da, s[2 * kk], s[2 * kk + 1]);
        accumulate_rows<M, D>(gq, da, cK + (h + 16 * kk) * kLd, lane);  // dQ += dS K
      }
    }
    __syncthreads();  // this stage and the bits are free
  }
#pragma unroll
  for (int n = 0; n < kOut; ++n) {
    const int c = 8 * n + 2 * t;
    if (row_a < p.Tq)
      *reinterpret_cast<uint32_t*>(dq + (b * p.Tq + row_a) * D + c) = mma::pack2<M>(gq[n][0] * p.scale, gq[n][1] * p.scale);
    if (row_b < p.Tq)
      *reinterpret_cast<uint32_t*>(dq + (b * p.Tq + row_b) * D + c) = mma::pack2<M>(gq[n][2] * p.scale, gq[n][3] * p.scale);
  }
}

// Dynamic shared memory of mma_dkdv_kernel<T, D> (K and V tiles, then two stages of Q and dO) and
// of mma_dq_kernel<T, D> (Q and dO tiles, then two stages of K and V): six tiles each.
template <int D>
constexpr size_t mma_dkdv_smem() {
  return sizeof(uint16_t) * 6 * kTile * (D + 8);
}
template <int D>
constexpr size_t mma_dq_smem() {
  return mma_dkdv_smem<D>();
}

}  // namespace
}  // namespace attn

#if !defined(TRIDENT_SIMT)
namespace attn {
namespace {

template <typename T, int D>
void launch_mma_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const MaskDesc& md,
                         const Params& p, const float* lse, const float* delta, cpu::AttentionGrads& g) {
  const Operand<uint16_t> qo = raw_operand(q), ko = raw_operand(k), vo = raw_operand(v), go = raw_operand(dout);
  const int64_t BH = q.size(0);
  const int device = q.device().index;
  const cudaStream_t stream = current_stream(device).handle();
  const size_t smem_kv = mma_dkdv_smem<D>(), smem_q = mma_dq_smem<D>();
  allow_shared_memory(mma_dkdv_kernel<T, D>, smem_kv, device);
  mma_dkdv_kernel<T, D><<<grid_blocks(BH, (p.Tk + kTile - 1) / kTile), kMmaThreads, smem_kv, stream>>>(
      qo, ko, vo, go, md, p, lse, delta, static_cast<uint16_t*>(g.dk.data_ptr()), static_cast<uint16_t*>(g.dv.data_ptr()));
  TRIDENT_CUDA_KERNEL_CHECK();
  allow_shared_memory(mma_dq_kernel<T, D>, smem_q, device);
  mma_dq_kernel<T, D><<<grid_blocks(BH, (p.Tq + kTile - 1) / kTile), kMmaThreads, smem_q, stream>>>(
      qo, ko, vo, go, md, p, lse, delta, static_cast<uint16_t*>(g.dq.data_ptr()),
      g.dmask.defined() ? static_cast<uint16_t*>(g.dmask.data_ptr()) : nullptr);
  TRIDENT_CUDA_KERNEL_CHECK();
}

}  // namespace
}  // namespace attn

bool attention_mma_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const attn::MaskDesc& mask,
                            const attn::Params& p, const float* lse, const float* delta, cpu::AttentionGrads& g) {
  if (!attention_mma_supported(q, k, v) || dout.dtype() != q.dtype()) return false;
  // The gradient of out often has a layout the 16-byte loads cannot take: sum(out)'s is a ones
  // tensor expanded with stride 0 everywhere, a slice's has padded or odd rows. A fresh
  // contiguous copy (rows of D = 64 or 128 elements, allocations 512-byte aligned) costs one pass
  // over dout, far less than the FMA kernels this would otherwise fall back to.
  const Tensor d = attn::aligned16(dout) ? dout : dout.detach().clone();
  TRIDENT_ASSERT(attn::aligned16(d), "attention backward: dout copy of shape ", d.sizes(), " is not 16-byte aligned");
  const int64_t D = q.size(2);
  if (q.dtype() == DType::BF16) {
    if (D == 64) attn::launch_mma_backward<BFloat16, 64>(d, q, k, v, mask, p, lse, delta, g);
    else attn::launch_mma_backward<BFloat16, 128>(d, q, k, v, mask, p, lse, delta, g);
  } else {
    if (D == 64) attn::launch_mma_backward<Half, 64>(d, q, k, v, mask, p, lse, delta, g);
    else attn::launch_mma_backward<Half, 128>(d, q, k, v, mask, p, lse, delta, g);
  }
  return true;
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
