// Pieces the CPU attention kernels share: the f32/f64 kernels (ops/cpu/attention.cpp) and the
// bf16 ones on the bf16 GEMM kernels (ops/cpu/attention_bf16.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/cpu/attention.h"

namespace trident::cpu::attention_detail {

inline constexpr int64_t kBlock = 64;  // query rows per task: 64 x Tk scores stay in cache-sized buffers

// A [BH, rows, cols] operand with unit inner stride.
template <typename T>
struct Mat3 {
  T* p;
  int64_t sb, sr;
  T* row(int64_t b, int64_t r) const { return p + b * sb + r * sr; }
};

template <typename T>
Mat3<T> mat3(const Tensor& t) {
  TRIDENT_ASSERT(t.dim() == 3 && (t.stride(2) == 1 || t.size(2) <= 1), "attention operand ", t.sizes(), " strides ", t.strides());
  return {static_cast<T*>(t.data_ptr()), t.stride(0), std::max<int64_t>(t.stride(1), t.size(2))};
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
void row_dots(const A* dO, const A* O, int64_t rows, int64_t dv, C* delta) {
  for (int64_t r = 0; r < rows; ++r) {
    C acc = 0;
    const A* a = dO + r * dv;
    const A* c = O + r * dv;
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
