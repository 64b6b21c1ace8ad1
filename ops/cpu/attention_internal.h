// Pieces the CPU attention kernels share: the f32/f64 kernels (ops/cpu/attention.cpp) and the
// bf16 ones on the bf16 GEMM kernels (ops/cpu/attention_bf16.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "core/factory.h"
#include "core/tensor.h"
#include "ops/cpu/attention.h"

namespace trident::cpu::attention_detail {

inline constexpr int64_t kBlock = 64;  // query rows per task: 64 x Tk scores stay in cache-sized buffers

// NOTE [Attention in the heads' layout]: GPT-2 and BERT split [B, T, H D] projections into heads
// as views [B, H, T, D] whose batch and head dims do not fold into one (the heads lie between the
// positions), and merge the output back with transpose(1, 2) and reshape. The kernels take such
// an operand as it is, [B, H, T, D] with any strides and a unit inner stride (a Mat3 with two
// batch strides), and write the output and the gradients of such operands in that layout:
// [B, H, T, D] over [B, T, H, D] storage, so that the merge and the gradients' way back to the
// projections are views, not copies (GPT-2 tiny's bf16 step made 32 such copies, 3.1 ms).
// Anything else is [BH, T, D] as before (ops/attention.cpp folds the leading dims, or copies).

// A [BH, rows, cols] operand with unit inner stride: b = (batch, head) with heads > 1 for a
// [B, H, rows, cols] tensor.
template <typename T>
struct Mat3 {
  T* p;
  int64_t sb, sr, heads = 1, sh = 0;
  T* row(int64_t b, int64_t r) const {
    if (heads == 1) return p + b * sb + r * sr;
    return p + (b / heads) * sb + (b % heads) * sh + r * sr;
  }
};

template <typename T>
Mat3<T> mat3(const Tensor& t) {
  TRIDENT_ASSERT((t.dim() == 3 || t.dim() == 4) && (t.stride(-1) == 1 || t.size(-1) <= 1), "attention operand ", t.sizes(),
                 " strides ", t.strides());
  T* p = static_cast<T*>(t.data_ptr());
  const int64_t sr = std::max<int64_t>(t.stride(-2), t.size(-1));
  if (t.dim() == 3) return {p, t.stride(0), sr};
  return {p, t.stride(0), sr, std::max<int64_t>(t.size(1), 1), t.stride(1)};
}

// Batch-heads of an operand, [BH, rows, cols] or [B, H, rows, cols].
inline int64_t batch_heads(const Tensor& t) { return t.dim() == 4 ? t.size(0) * t.size(1) : t.size(0); }

// An operand with unit inner stride, as the kernels read it (copied only when it has none).
inline Tensor unit_inner(const Tensor& t) { return t.stride(-1) == 1 || t.size(-1) <= 1 ? t : t.contiguous(); }

// A result [BH, rows, cols] laid out as the operand `like`: for [B, H, ., .], [B, H, rows, cols]
// over [B, rows, H, cols] storage (NOTE [Attention in the heads' layout]); else contiguous.
// Zero-filled when `zero`.
inline Tensor result_like(const Tensor& like, int64_t rows, int64_t cols, DType dt, bool zero) {
  if (like.dim() == 4) {
    const int64_t B = like.size(0), H = like.size(1);
    const Tensor s = zero ? zeros({B, rows, H, cols}, dt) : empty({B, rows, H, cols}, dt);
    return s.as_strided({B, H, rows, cols}, {rows * H * cols, cols, H * cols, 1}, 0);
  }
  return zero ? zeros({like.size(0), rows, cols}, dt) : empty({like.size(0), rows, cols}, dt);
}

// Reads the mask, broadcast to [lead..., Tq, Tk] (stride 0 on broadcast dims), for batch-head b:
// scores of type T, an additive mask stored as M.
template <typename T, typename M = T>
struct MaskReader {
  bool present = false, is_bool = false;
  const char* base = nullptr;
  Shape lead_sizes, lead_strides;
  int64_t sr = 0, sc = 0, elem = 0;

  explicit MaskReader(const Tensor& m) {
    if (!m.defined()) return;
    present = true;
    is_bool = m.dtype() == DType::Bool;
    base = static_cast<const char*>(m.data_ptr());
    elem = static_cast<int64_t>(m.element_size());
    lead_sizes.assign(m.sizes().begin(), m.sizes().end() - 2);
    lead_strides.assign(m.strides().begin(), m.strides().end() - 2);
    sr = m.stride(-2);
    sc = m.stride(-1);
  }
  const char* head(int64_t b) const {
    int64_t off = 0;
    for (size_t d = lead_sizes.size(); d-- > 0;) {
      off += (b % lead_sizes[d]) * lead_strides[d];
      b /= lead_sizes[d];
    }
    return base + off * elem;
  }
  // Adds row r's mask to scores s[0, n): -inf where a bool mask is false.
  void apply(int64_t b, int64_t r, T* s, int64_t n) const {
    if (!present) return;
    if (is_bool) {
      const bool* mp = reinterpret_cast<const bool*>(head(b)) + r * sr;
      for (int64_t j = 0; j < n; ++j)
        if (!mp[j * sc]) s[j] = -std::numeric_limits<T>::infinity();
    } else {
      const M* mp = reinterpret_cast<const M*>(head(b)) + r * sr;
      for (int64_t j = 0; j < n; ++j) s[j] += static_cast<T>(mp[j * sc]);
    }
  }
};

// Dropout keep decisions along a row; caches the Philox block shared by 4 neighbours.
struct DropoutRow {
  const AttentionParams& p;
  uint64_t cached_block = UINT64_MAX;
  uint32_t out[4] = {0, 0, 0, 0};
  explicit DropoutRow(const AttentionParams& params) : p(params) {}
  bool keep(uint64_t idx) {
    const uint64_t blk = idx / 4;
    if (blk != cached_block) {
      philox::block(p.rng.seed, p.rng.offset, blk, out);
      cached_block = blk;
    }
    return philox::uniform_f32(out[idx % 4]) >= static_cast<float>(p.dropout_p);
  }
};

// This thread's buffers of T, grown when needed and kept between tasks and calls: a task's
// scores are 64 x Tk values, and allocating and freeing them per task made glibc trim its heap
// and fault it back in (madvise and brk, with TLB shootdowns across the cores), which took
// about a third of the bf16 attention's time at GPT-2's sizes. Slots are independent buffers.
template <typename T>
struct Scratch {
  std::vector<T> slot[5];
  T* get(int i, int64_t n) {
    std::vector<T>& v = slot[i];
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v.data();
  }
  T* zeros(int i, int64_t n) {
    T* p = get(i, n);
    std::fill(p, p + n, T(0));
    return p;
  }
};
template <typename T>
Scratch<T>& scratch() {
  thread_local Scratch<T> s;
  return s;
}

// Backward's pass over the dropout keep mask for the `rows` rows of a query block whose first
// row is row r0 of the [BH * Tq] rows: dP = dP_drop * keep / (1 - p) in place, and the dropped
// probabilities P_drop = P * keep / (1 - p) beside them, stored as Out.
template <typename C, typename Out>
void dropout_backward_rows(DropoutRow& drop, int64_t r0, int64_t rows, int64_t kn, int64_t Tk, C keep_scale, const C* P,
                           C* dP, Out* Pd) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t base = static_cast<uint64_t>((r0 + r) * Tk);
    const C* s = P + r * kn;
    C* d = dP + r * kn;
    Out* pd = Pd + r * kn;
    for (int64_t j = 0; j < kn; ++j) {
      const bool keep = drop.keep(base + static_cast<uint64_t>(j));
      d[j] = keep ? d[j] * keep_scale : C(0);
      pd[j] = Out(keep ? s[j] * keep_scale : C(0));
    }
  }
}

// Delta_r = dO_r . O_r (= sum_j P_drop[r, j] dP_drop[r, j]) for `rows` contiguous rows of dv
// values, summed in C.
template <typename C, typename A>
void row_dots(const A* dO, int64_t ld_dO, const A* O, int64_t ld_O, int64_t rows, int64_t dv, C* delta) {
  for (int64_t r = 0; r < rows; ++r) {
    C acc = 0;
    const A* a = dO + r * ld_dO;
    const A* c = O + r * ld_O;
    for (int64_t d = 0; d < dv; ++d) acc += static_cast<C>(a[d]) * static_cast<C>(c[d]);
    delta[r] = acc;
  }
}

// Runs f(t) for every task: in parallel (each GEMM on its thread) when there are enough of
// them, one after another (each GEMM split across the threads) otherwise (NOTE [Threads]).
template <typename F>
void for_tasks(int64_t n, const F& f) {
  if (n >= 2 * get_num_threads()) {
    parallel_for(0, n, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t t = b0; t < b1; ++t) f(t);
    });
  } else {
    for (int64_t t = 0; t < n; ++t) f(t);
  }
}

// NOTE [Attention exp rows] (ops/cpu/attention.cpp). Rows of S [rows][kn] in place:
// e^(s - m) with m the row's maximum, m and the sum of the row's exponentials to m[r] and l[r]
// (a row whose maximum is -inf becomes zeros with l[r] = 0); and e^(s - L[r]), zeros where
// L[r] = -inf.
void attention_exp_rows(float* S, int64_t rows, int64_t kn, float* m, float* l);
void attention_exp_rows(double* S, int64_t rows, int64_t kn, double* m, double* l);
void attention_exp_minus_rows(float* S, int64_t rows, int64_t kn, const float* L);
void attention_exp_minus_rows(double* S, int64_t rows, int64_t kn, const double* L);

}  // namespace trident::cpu::attention_detail
