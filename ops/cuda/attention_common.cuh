// Shared by the fused-attention kernels (ops/cuda/attention_forward.cu, attention_backward.cu).
//
// NOTE [Flash attention on CUDA]: the Tq x Tk score matrix is never stored. A block of 256
// threads owns a 64 x 64 tile of it: 16 groups of 16 lanes, group g holds tile rows 4g..4g+3 and
// lane l of the group columns l, l+16, l+32, l+48 (kRows x kCols scores in registers). Operands
// live in shared memory as f32 (converted once when a tile is loaded): an operand read by rows
// (the same row for all 16 lanes of a group) has a row stride that is a multiple of 4 plus 4
// (float4 reads, the two groups of a warp on different banks); one read by columns (lane l reads
// row l + 16 j) has an odd row stride (16 lanes on 16 banks).
//   forward (one block per 64 query rows): for each 64-key tile S = scale q k^T + mask, an online
//     softmax in f32 (running max m and sum l per row, the output rescaled by exp(m_old - m_new)),
//     then O += P V with P passed between the lanes of a group by warp shuffles; at the end
//     O /= l and lse = m + log l. A row that sees no key gets O = 0 and lse = -inf.
//   backward, deterministic (no float atomics), in two kernels after Delta_i = dO_i . O_i:
//     one block per 64 keys walks the query tiles and accumulates dV += P_drop^T dO and
//     dK += scale dS^T Q; one block per 64 queries walks the key tiles and accumulates
//     dQ += scale dS K (and writes dS as dmask when asked). Each recomputes P = exp(S - lse) and
//     dP = dO V^T for its tiles, with dS = P * (dP_drop * keep / (1 - p) - Delta).
// Dropout keeps element (b, i, j) when Philox draw (b * Tq + i) * Tk + j is >= p, the CPU
// kernel's indexing (NOTE [Philox streams]), so both backends drop the same entries for the same
// generator state. Each tile's keep bits are drawn once into shared memory (at most 5 Philox
// blocks per thread) and read by every pass over the tile.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/cuda/attention.h"

// A kernel's dynamic shared memory, `T* name`. The SIMT emulator (tests/simt/simt.h) defines it
// first, as a pointer to its own buffer.
#ifndef TRIDENT_DYNAMIC_SHARED
#define TRIDENT_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

namespace trident::cuda::attn {

constexpr int kThreads = 256;      // 16 groups of 16 lanes
constexpr int kTile = 64;          // query rows and keys per tile
constexpr int kRows = 4;           // tile rows per group member: 16 groups x 4 = 64
constexpr int kCols = kTile / 16;  // tile columns per lane: l, l + 16, l + 32, l + 48
constexpr int kMaxLead = 8;        // leading (batch, head) dims of a mask

// One [BH, rows, cols] operand with unit inner stride.
template <typename T>
struct Operand {
  const T* p;
  int64_t sb, sr;
  __device__ __forceinline__ const T* head(int64_t b) const { return p + b * sb; }
};

// The mask broadcast to [lead..., Tq, Tk] (stride 0 along broadcast dims); base null: none.
struct MaskDesc {
  const void* base = nullptr;
  int is_bool = 0;
  int nlead = 0;
  int64_t lead_sizes[kMaxLead] = {};
  int64_t lead_strides[kMaxLead] = {};
  int64_t sr = 0, sc = 0;
};

struct Params {
  int64_t Tq = 0, Tk = 0;
  int D = 0, Dv = 0;
  float scale = 1.f;
  float dropout_p = 0.f, keep_scale = 1.f;
  int causal = 0, dropout = 0;
  uint64_t seed = 0, offset = 0;
};

// Row strides in shared memory (NOTE [Flash attention on CUDA]).
__host__ __device__ __forceinline__ int ld_rows(int cols) { return (cols + 3) / 4 * 4 + 4; }
__host__ __device__ __forceinline__ int ld_cols(int cols) { return cols | 1; }

// Element offset of batch-head b's [Tq, Tk] slice of the mask.
__device__ __forceinline__ int64_t mask_head(const MaskDesc& m, int64_t b) {
  int64_t off = 0;
  for (int d = m.nlead - 1; d >= 0; --d) {
    off += (b % m.lead_sizes[d]) * m.lead_strides[d];
    b /= m.lead_sizes[d];
  }
  return off;
}

// What the mask adds to score (row, col): -inf where a bool mask is false.
template <typename T>
__device__ __forceinline__ float mask_value(const MaskDesc& m, int64_t head, int64_t row, int64_t col) {
  const int64_t off = head + row * m.sr + col * m.sc;
  if (m.is_bool) return static_cast<const uint8_t*>(m.base)[off] ? 0.f : -INFINITY;
  return static_cast<float>(static_cast<const T*>(m.base)[off]);
}

// Max and sum over the 16 lanes of a group (xor offsets below 16 stay inside the half-warp).
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Rows [row0, row0 + kTile) of one head (src: its row 0; rows >= nrows are zeros, so products
// with them are 0 and never NaN from stale shared memory), `cols` columns, into buf (stride ld).
// A warp per row: the global reads are coalesced.
template <typename T>
__device__ void load_tile(float* buf, int ld, const T* src, int64_t sr, int64_t row0, int64_t nrows, int cols) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (int r = warp; r < kTile; r += kThreads / 32) {
    float* dst = buf + r * ld;
    const int64_t gr = row0 + r;
    if (gr < nrows) {
      const T* s = src + gr * sr;
      for (int c = lane; c < cols; c += 32) dst[c] = static_cast<float>(s[c]);
    } else {
      for (int c = lane; c < cols; c += 32) dst[c] = 0.f;
    }
  }
}

// Dropout keep bits of query rows [row0, row0 + 64) x keys [col0, col0 + 64) of head b:
// bits[r * 4 + s] bit t is key col0 + 16 s + t of row row0 + r. Thread x draws row x / 4, keys
// 16 (x % 4) .. +15: at most 5 Philox blocks.
// x: which of the 256 (row, 16 keys) pieces this call draws (blocks of 256 threads pass
// threadIdx.x; smaller blocks call it for x, x + blockDim.x, ...).
__device__ __forceinline__ void dropout_bits(uint16_t* bits, const Params& p, int64_t b, int64_t row0, int64_t col0, int x) {
  const int r = x / 4, s = x % 4;
  const int64_t row = row0 + r;
  uint32_t m = 0;
  if (row < p.Tq) {
    const uint64_t base = static_cast<uint64_t>((b * p.Tq + row) * p.Tk);
    uint64_t cached = ~uint64_t{0};
    uint32_t o[4] = {0, 0, 0, 0};
    for (int t = 0; t < 16; ++t) {
      const int64_t col = col0 + 16 * s + t;
      if (col >= p.Tk) break;
      const uint64_t idx = base + static_cast<uint64_t>(col);
      if (idx / 4 != cached) {
        cached = idx / 4;
        philox::block(p.seed, p.offset, cached, o);
      }
      const unsigned w = static_cast<unsigned>(idx % 4);
      const uint32_t x = w == 0 ? o[0] : w == 1 ? o[1] : w == 2 ? o[2] : o[3];
      if (philox::uniform_f32(x) >= p.dropout_p) m |= 1u << t;
    }
  }
  bits[x] = static_cast<uint16_t>(m);
}
__device__ __forceinline__ void dropout_bits(uint16_t* bits, const Params& p, int64_t b, int64_t row0, int64_t col0) {
  dropout_bits(bits, p, b, row0, col0, static_cast<int>(threadIdx.x));
}
// Whether tile element (query row r, key c) is kept.
__device__ __forceinline__ bool kept(const uint16_t* bits, int r, int c) { return (bits[r * 4 + c / 16] >> (c % 16)) & 1u; }

// P (dropped: pd) and dS of one score, shared by both passes, from its probability P; dp: dO.v.
struct ProbGrad {
  float pd, ds;
};
__device__ __forceinline__ ProbGrad grad_of_prob(float P, float dp, float delta, bool dropout, bool keep, float keep_scale) {
  if (!dropout) return {P, P * (dp - delta)};
  return {keep ? P * keep_scale : 0.f, P * ((keep ? dp * keep_scale : 0.f) - delta)};
}

// The score of query i and key j as the softmax sees it, from raw = q_i . k_j: scale times raw
// plus the mask, or -inf outside the bounds and the causal triangle.
template <typename T>
__device__ __forceinline__ float score_value(const Params& p, const MaskDesc& mask, int64_t mhead, int64_t i, int64_t j,
                                             float raw) {
  if (j >= p.Tk || i >= p.Tq || (p.causal && j > i)) return -INFINITY;
  float x = raw * p.scale;
  if (mask.base) x += mask_value<T>(mask, mhead, i, j);
  return x;
}

// P and dS of the score of query i and key j, from raw = q_i . k_j (every FMA backward kernel
// sees scores this way). keep: the dropout bit (ignored without dropout).
template <typename T>
__device__ __forceinline__ ProbGrad score_grad(const Params& p, const MaskDesc& mask, int64_t mhead, int64_t i, int64_t j,
                                               float raw, float dp, float L, float delta, bool keep) {
  const float x = score_value<T>(p, mask, mhead, i, j, raw);
  return grad_of_prob(x != -INFINITY && L != -INFINITY ? expf(x - L) : 0.f, dp, delta, p.dropout, p.dropout && keep,
                      p.keep_scale);
}

// acc[i][j] += sum_{d < n} A[4g + i][d] * B[l + 16 j][d]: A read by rows (stride lda, a
// multiple of 4), B by columns (odd stride ldb).
__device__ __forceinline__ void tile_dot(float (&acc)[kRows][kCols], const float* A, int lda, const float* B, int ldb,
                                         int n, int g, int l) {
  const float* a = A + g * kRows * lda;
  const float* b = B + l * ldb;
  int d = 0;
  for (; d + 4 <= n; d += 4) {
    float4 av[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) av[i] = *reinterpret_cast<const float4*>(a + i * lda + d);
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const float* bj = b + j * 16 * ldb + d;
      const float b0 = bj[0], b1 = bj[1], b2 = bj[2], b3 = bj[3];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        float s = acc[i][j];
        s = fmaf(av[i].x, b0, s);
        s = fmaf(av[i].y, b1, s);
        s = fmaf(av[i].z, b2, s);
        s = fmaf(av[i].w, b3, s);
        acc[i][j] = s;
      }
    }
  }
  for (; d < n; ++d) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const float bv = b[j * 16 * ldb + d];
#pragma unroll
      for (int i = 0; i < kRows; ++i) acc[i][j] = fmaf(a[i * lda + d], bv, acc[i][j]);
    }
  }
}

// out[i][c] += sum_{k < 64} w[i][k] * B[k][l + 16 c] for the columns l + 16 c < n. w[i][k] is
// held by lane k % 16 of the group as w[i][k / 16] (the layout of tile_dot's acc) and reaches
// the other lanes by shuffles; B (stride ldb) is read along rows, consecutive lanes on
// consecutive banks.
template <int kMaxD>
__device__ __forceinline__ void tile_accumulate(float (&out)[kRows][kMaxD / 16], const float (&w)[kRows][kCols],
                                                const float* B, int ldb, int n, int l) {
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    // Partly unrolled: a full unroll lets the compiler hoist every load and run out of registers.
#pragma unroll 2
    for (int kk = 0; kk < 16; ++kk) {
      float wv[kRows];
#pragma unroll
      for (int i = 0; i < kRows; ++i) wv[i] = __shfl_sync(0xffffffffu, w[i][j], kk, 16);
      const float* brow = B + (j * 16 + kk) * ldb + l;
#pragma unroll
      for (int c = 0; c < kMaxD / 16; ++c) {
        if (l + 16 * c < n) {
          const float bv = brow[16 * c];
#pragma unroll
          for (int i = 0; i < kRows; ++i) out[i][c] = fmaf(wv[i], bv, out[i][c]);
        }
      }
    }
  }
}

// ---- host side ----

// t as a kernel operand; a copy when its inner stride is not 1 (keep holds it alive).
template <typename T>
Operand<T> operand(const Tensor& t, Tensor& keep) {
  TRIDENT_ASSERT(t.dim() == 3, "attention operand of shape ", t.sizes());
  keep = (t.stride(2) == 1 || t.size(2) <= 1) ? t : t.contiguous();
  // The strides as they are: a broadcast gradient (stride 0 along heads or rows) reads fine.
  return {static_cast<const T*>(keep.data_ptr()), keep.stride(0), keep.stride(1)};
}

inline MaskDesc mask_desc(const Tensor& m) {
  MaskDesc d;
  if (!m.defined()) return d;
  TRIDENT_CHECK(m.dim() >= 2 && m.dim() - 2 <= kMaxLead, "scaled_dot_product_attention (CUDA): a mask of rank ", m.dim(),
                " (shape ", m.sizes(), "); at most ", kMaxLead, " leading dims are supported");
  d.base = m.data_ptr();
  d.is_bool = m.dtype() == DType::Bool;
  d.nlead = static_cast<int>(m.dim() - 2);
  for (int i = 0; i < d.nlead; ++i) {
    d.lead_sizes[i] = m.size(i);
    d.lead_strides[i] = m.stride(i);
  }
  d.sr = m.stride(-2);
  d.sc = m.stride(-1);
  return d;
}

inline Params params(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& ap) {
  const char* op = "scaled_dot_product_attention (CUDA)";
  TRIDENT_CHECK(q.size(2) <= kMaxHeadDim && v.size(2) <= kMaxHeadDim, op, ": head dims up to ", kMaxHeadDim,
                " are supported, got query ", q.sizes(), " and value ", v.sizes());
  Params p;
  p.Tq = q.size(1);
  p.Tk = k.size(1);
  p.D = static_cast<int>(q.size(2));
  p.Dv = static_cast<int>(v.size(2));
  p.scale = static_cast<float>(ap.scale);
  p.causal = ap.causal;
  p.dropout = ap.dropout_p > 0;
  p.dropout_p = static_cast<float>(ap.dropout_p);  // the CPU compares with the same f32 threshold
  p.keep_scale = p.dropout ? static_cast<float>(1.0 / (1.0 - ap.dropout_p)) : 1.f;
  p.seed = ap.rng.seed;
  p.offset = ap.rng.offset;
  return p;
}

// Blocks for BH heads x `tiles` tiles, one grid dimension.
inline int grid_blocks(int64_t bh, int64_t tiles, int rows = kTile) {
  const int64_t n = bh * tiles;
  TRIDENT_CHECK(n <= 0x7fffffff, "scaled_dot_product_attention (CUDA): ", bh, " heads x ", tiles, " tiles of ", rows,
                " rows exceed one grid");
  return static_cast<int>(n);
}

// Lets `kernel` use `bytes` of dynamic shared memory: above the default 48 KB a kernel must opt
// in, up to the device's limit (which the kernel's small static arrays also count against).
template <typename Kernel>
void allow_shared_memory(Kernel kernel, size_t bytes, int device) {
  if (bytes <= 48 * 1024) return;
  int optin = 0;
  TRIDENT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  TRIDENT_CHECK(bytes + 2048 <= static_cast<size_t>(optin), "scaled_dot_product_attention (CUDA): needs ", bytes,
                " bytes of shared memory per block, device ", device, " allows ", optin);
  TRIDENT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace trident::cuda::attn
