// Tensor-core attention forward for f16 and bf16 (NOTE [Tensor-core attention]).
//
// NOTE [Tensor-core attention]: for f16/bf16 inputs with head dims D = Dv = 64 or 128 on sm_80
// and later, the forward pass runs on the tensor cores (mma.sync m16n8k16, f32 accumulation;
// fragment layouts in ops/cuda/attention_mma.cuh) instead of the f32 FMA kernel of NOTE [Flash
// attention on CUDA], with the same contract and the same outputs up to rounding: O in q's
// dtype, lse in f32, the same online softmax, causal triangle, mask and Philox dropout indexing.
// A block of 8 warps owns 128 query rows (16 per warp) and walks the key tiles of 64:
//   - tiles travel from global to shared memory by cp.async (16 bytes per copy, no registers),
//     rows padded by 8 elements so that the 8 rows an ldmatrix reads fall in 8 different bank
//     groups; Q's fragments are loaded into registers once; K and V take turns so that each
//     loads behind the other's products (the next key tile during the softmax and P V, the next
//     value tile during the next Q K^T), with one buffer each;
//   - fragments come from shared memory by ldmatrix, one instruction per four registers: K as
//     it is (K[key][d] is B^T for Q K^T) and V transposed on the way (.trans: the B operand of
//     P V wants pairs of consecutive keys in one 32-bit word, which V's rows do not hold);
//   - S = Q K^T: per warp 8 accumulators of 16 x 8 (64 keys), 4 f32 per lane;
//   - the softmax works on those registers: each lane holds two rows (g and g + 8 of its warp's
//     16) and 16 of their 64 columns; row maxima meet over the 4 lanes of a quad by shuffles;
//     the running sums stay per lane (every term is rescaled by the same row factor) and are
//     added over the quad once at the end; a tile inside the keys, below the causal diagonal
//     and without a mask skips the per-element checks, and each exponential is one FFMA and
//     one exp2 (the scale and log2(e) folded into one factor);
//   - P, rounded to q's dtype, is already the A operand of P V (attention_mma.cuh), and O
//     (16 x D per warp, D / 8 accumulators per lane) stays in registers throughout.
// Rounding P to 16 bits before P V is what every fused f16/bf16 attention does (FlashAttention,
// cuDNN); the normalizer sums the f32 values, so the error is a relative 2^-8 (bf16) per
// weight, inside the cross-backend tolerance for bf16 outputs. f32 inputs, other head dims,
// unaligned operands and older GPUs keep the FMA kernel (attention_mma_supported).
#include <atomic>
#include <cstdlib>

#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/attention_mma.h"
#if !defined(TRIDENT_SIMT)  // the host side: not compiled by the CPU emulator (tests/simt/simt.h)
#include "ops/cuda/common.cuh"
#endif

namespace trident::cuda {

namespace attn {
namespace {

// 8 warps, 128 query rows per block: each key and value tile loaded serves twice the rows it
// would in a block of 64, halving the tiles' traffic from L2 per flop (at 64 rows a block reads
// 64 flops' worth per byte, which at the hundreds of TFLOP/s the tensor cores allow is more than
// an H100's L2 delivers). One block per multiprocessor at D = 128 (registers), as FlashAttention-2.
constexpr int kFwdWarps = 8;
constexpr int kFwdThreads = 32 * kFwdWarps;
constexpr int kFwdRows = 16 * kFwdWarps;

template <typename T, int D>
__global__ void __launch_bounds__(kFwdThreads, 1)
    mma_forward_kernel(Operand<uint16_t> q, Operand<uint16_t> k, Operand<uint16_t> v, MaskDesc mask, Params p,
                       uint16_t* __restrict__ out, float* __restrict__ lse) {
  using M = typename MmaType<T>::type;
  constexpr int kLd = D + 8;  // tile row stride (elements): the 8 rows of an ldmatrix hit 8 bank groups
  constexpr int kSteps = D / 16, kOut = D / 8, kKeyTiles = kTile / 8;
  TRIDENT_DYNAMIC_SHARED(uint4, smem_mma);
  __shared__ uint16_t bits[kFwdRows * 4];
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem_mma);
  uint16_t* sK = sQ + kFwdRows * kLd;
  uint16_t* sV = sK + kTile * kLd;

  const int64_t tiles = (p.Tq + kFwdRows - 1) / kFwdRows;
  const int64_t b = blockIdx.x / tiles;
  const int64_t q0 = (tiles - 1 - blockIdx.x % tiles) * kFwdRows;  // causal: the longest rows start first
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int wr = warp * 16;                            // the warp's first row in the tile
  const int64_t row_a = q0 + wr + g, row_b = row_a + 8;  // this lane's two rows
  const int64_t kend = p.causal ? min(p.Tk, q0 + kFwdRows) : p.Tk;  // causal: later keys are never seen

  // Three groups of copies in flight: Q, the first key tile, the first value tile.
  async_rows<D, kFwdRows, kFwdThreads>(sQ, kLd, q.head(b), q.sr, q0, p.Tq);
  mma::cp_async_commit();
  async_rows<D, kTile, kFwdThreads>(sK, kLd, k.head(b), k.sr, 0, p.Tk);
  mma::cp_async_commit();
  async_rows<D, kTile, kFwdThreads>(sV, kLd, v.head(b), v.sr, 0, p.Tk);
  mma::cp_async_commit();
  mma::cp_async_wait<2>();
  __syncthreads();
  uint32_t qf[kSteps][4];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) mma::ldmatrix_a(qf[s], sQ + wr * kLd + 16 * s, kLd, lane);

  const int64_t mhead = mask.base ? mask_head(mask, b) : 0;
  float o[kOut][4];
#pragma unroll
  for (int n = 0; n < kOut; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;  // running max and (partial) sums

  // Each tile: wait for K, S = Q K^T, then (sK free) start the next key tile, softmax, wait for
  // V, O += P V, then (sV free) start the next value tile: the next K loads during the softmax
  // and P V, the next V during the next Q K^T.
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    const bool more = k0 + kTile < kend;
    if (p.dropout) {  // the previous tile's bits were last read before the barrier of its P V
      for (int x = static_cast<int>(threadIdx.x); x < kFwdRows * 4; x += kFwdThreads) dropout_bits(bits, p, b, q0, k0, x);
    }
    mma::cp_async_wait<1>();  // this thread's key tile (the value tile may still be on its way)
    __syncthreads();          // and everyone's

    float s[kKeyTiles][4];
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
#pragma unroll
      for (int j = 0; j < kKeyTiles; j += 2) {
        uint32_t kb[4];
        mma::ldmatrix_bt(kb, sK + 8 * j * kLd + 16 * st, kLd, lane);
        mma::mma_16816<M>(s[j], qf[st], kb[0], kb[1]);
        mma::mma_16816<M>(s[j + 1], qf[st], kb[2], kb[3]);
      }
    }
    __syncthreads();  // every warp is done with sK
    if (more) async_rows<D, kTile, kFwdThreads>(sK, kLd, k.head(b), k.sr, k0 + kTile, p.Tk);
    mma::cp_async_commit();

    // Scale, mask, bounds; the tile's row maxima. A plain tile (inside the keys, below the causal
    // diagonal, no mask, a positive scale: the whole block alike) keeps q.k as it is, its maxima
    // scaled afterwards, and the scale joins the exponent's single FFMA below.
    const bool plain = p.scale > 0.f && !mask.base && k0 + kTile <= p.Tk && (!p.causal || k0 + kTile - 1 <= q0);
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
      if (!plain) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t row = e < 2 ? row_a : row_b, col = k0 + 8 * j + 2 * t + (e & 1);
          float x = -INFINITY;
          if (col < p.Tk && (!p.causal || col <= row)) {
            x = s[j][e] * p.scale;
            if (mask.base && row < p.Tq) x += mask_value<T>(mask, mhead, row, col);
          }
          s[j][e] = x;
        }
      }
      mx_a = fmaxf(mx_a, fmaxf(s[j][0], s[j][1]));
      mx_b = fmaxf(mx_b, fmaxf(s[j][2], s[j][3]));
    }
    if (plain) {
      mx_a *= p.scale;
      mx_b *= p.scale;
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {  // the quad's 4 lanes share the two rows
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
    }
    const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
    // All -inf so far: exp(-inf - 0) = 0, never NaN.
    const float ref_a = mn_a == -INFINITY ? 0.f : mn_a, ref_b = mn_b == -INFINITY ? 0.f : mn_b;
    const float alpha_a = exp2f((m_a - ref_a) * kLog2e), alpha_b = exp2f((m_b - ref_b) * kLog2e);
    m_a = mn_a;
    m_b = mn_b;
    // exp(x - ref) = 2^(x log2(e) - ref log2(e)), x = scale q.k in a plain tile.
    const float c = plain ? p.scale * kLog2e : kLog2e, off_a = -ref_a * kLog2e, off_b = -ref_b * kLog2e;
    float ps_a = 0.f, ps_b = 0.f;
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float ex = exp2f(fmaf(s[j][e], c, e < 2 ? off_a : off_b));
        if (e < 2) ps_a += ex; else ps_b += ex;
        // The sum counts kept and dropped alike: the CPU normalizes before dropping.
        s[j][e] = !p.dropout ? ex : kept(bits, wr + g + (e < 2 ? 0 : 8), 8 * j + 2 * t + (e & 1)) ? ex * p.keep_scale : 0.f;
      }
    }
    l_a = l_a * alpha_a + ps_a;
    l_b = l_b * alpha_b + ps_b;
#pragma unroll
    for (int n = 0; n < kOut; ++n) {
      o[n][0] *= alpha_a;
      o[n][1] *= alpha_a;
      o[n][2] *= alpha_b;
      o[n][3] *= alpha_b;
    }

    mma::cp_async_wait<1>();  // this thread's value tile (the next key tile may still be on its way)
    __syncthreads();
    // O += P V: keys 16 kk .. 16 kk + 15 are accumulators 2 kk and 2 kk + 1.
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      uint32_t pa[4];
      mma::acc_to_a<M>(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int n = 0; n < kOut; n += 2) {
        uint32_t vb[4];
        mma::ldmatrix_b(vb, sV + 16 * kk * kLd + 8 * n, kLd, lane);
        mma::mma_16816<M>(o[n], pa, vb[0], vb[1]);
        mma::mma_16816<M>(o[n + 1], pa, vb[2], vb[3]);
      }
    }
    __syncthreads();  // every warp is done with sV (and with bits)
    if (more) async_rows<D, kTile, kFwdThreads>(sV, kLd, v.head(b), v.sr, k0 + kTile, p.Tk);
    mma::cp_async_commit();
  }

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
  const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f, inv_b = l_b > 0.f ? 1.f / l_b : 0.f;  // no key seen: zeros
#pragma unroll
  for (int n = 0; n < kOut; ++n) {
    if (row_a < p.Tq)
      *reinterpret_cast<uint32_t*>(out + (b * p.Tq + row_a) * D + 8 * n + 2 * t) = mma::pack2<M>(o[n][0] * inv_a, o[n][1] * inv_a);
    if (row_b < p.Tq)
      *reinterpret_cast<uint32_t*>(out + (b * p.Tq + row_b) * D + 8 * n + 2 * t) = mma::pack2<M>(o[n][2] * inv_b, o[n][3] * inv_b);
  }
  if (t == 0) {
    if (row_a < p.Tq) lse[b * p.Tq + row_a] = l_a > 0.f ? m_a + logf(l_a) : -INFINITY;
    if (row_b < p.Tq) lse[b * p.Tq + row_b] = l_b > 0.f ? m_b + logf(l_b) : -INFINITY;
  }
}

// Dynamic shared memory of mma_forward_kernel<T, D>: the Q (128 rows), K and V (64) tiles.
template <int D>
constexpr size_t mma_forward_smem() {
  return sizeof(uint16_t) * (kFwdRows + 2 * kTile) * (D + 8);
}
// Its blocks for bh heads of tq queries.
inline int mma_forward_blocks(int64_t bh, int64_t tq) { return grid_blocks(bh, (tq + kFwdRows - 1) / kFwdRows, kFwdRows); }

}  // namespace
}  // namespace attn

#if !defined(TRIDENT_SIMT)
namespace attn {
namespace {

template <typename T, int D>
void launch_mma_forward(const Tensor& q, const Tensor& k, const Tensor& v, const MaskDesc& md, const Params& p, Tensor& out,
                        Tensor& lse) {
  const Operand<uint16_t> qo = raw_operand(q), ko = raw_operand(k), vo = raw_operand(v);
  const int device = q.device().index;
  const size_t smem = mma_forward_smem<D>();
  allow_shared_memory(mma_forward_kernel<T, D>, smem, device);
  mma_forward_kernel<T, D><<<mma_forward_blocks(q.size(0), p.Tq), kFwdThreads, smem, current_stream(device).handle()>>>(
      qo, ko, vo, md, p, static_cast<uint16_t*>(out.data_ptr()), static_cast<float*>(lse.data_ptr()));
  TRIDENT_CUDA_KERNEL_CHECK();
}

}  // namespace
}  // namespace attn

namespace {
// TRIDENT_ATTENTION_TENSOR_CORES=0 starts with them off: a fallback to the FMA kernels without
// a rebuild, should the tensor-core kernels misbehave on some GPU.
bool tensor_cores_from_env() {
  const char* e = std::getenv("TRIDENT_ATTENTION_TENSOR_CORES");
  return e == nullptr || e[0] != '0';
}
std::atomic<bool> g_tensor_cores{tensor_cores_from_env()};
}  // namespace

void set_attention_tensor_cores(bool on) { g_tensor_cores.store(on); }
bool attention_tensor_cores() { return g_tensor_cores.load(); }

bool attention_mma_supported(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!attention_tensor_cores()) return false;
  if (q.dtype() != DType::F16 && q.dtype() != DType::BF16) return false;
  const int64_t D = q.size(2);
  if ((D != 64 && D != 128) || v.size(2) != D || k.size(2) != D) return false;
  if (!attn::aligned16(q) || !attn::aligned16(k) || !attn::aligned16(v)) return false;
  int major = 0;
  TRIDENT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, q.device().index));
  return major >= 8;
}

void attention_mma_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                           const cpu::AttentionParams& ap, Tensor& out, Tensor& lse) {
  const attn::Params p = attn::params(q, k, v, ap);
  const attn::MaskDesc md = attn::mask_desc(mask);
  const int64_t D = q.size(2);
  if (q.dtype() == DType::BF16) {
    if (D == 64) attn::launch_mma_forward<BFloat16, 64>(q, k, v, md, p, out, lse);
    else attn::launch_mma_forward<BFloat16, 128>(q, k, v, md, p, out, lse);
  } else {
    if (D == 64) attn::launch_mma_forward<Half, 64>(q, k, v, md, p, out, lse);
    else attn::launch_mma_forward<Half, 128>(q, k, v, md, p, out, lse);
  }
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
