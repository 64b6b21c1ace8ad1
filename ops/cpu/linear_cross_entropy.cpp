// NOTE [Linear cross-entropy]: the loss of a classifier over a large vocabulary without its
// logits. cross_entropy(hidden W[:V]^T + b[:V], target) over GPT-2's [tokens, 50304] writes the
// logits (103 MB per 1024 tokens in bf16, twice that in f32), reads them twice for the loss,
// writes their gradient as large again and reads it twice more for the two gradient products:
// on a 2-core CPU most of that is memory traffic, and on any device it is the largest activation
// of the model. Here the logits exist one tile at a time ([<= 1024 rows, 512 classes], in the
// accumulation type: f32 for f32 and bf16, f64 for f64), from the same products:
//  - forward: for each tile, logits = hidden W_c^T (+ b_c) by the GEMM, then per row an online
//    log-sum-exp (the running max m and sum s = sum e^(x - m), rescaled when the max grows, the
//    sums of exponentials in f64 per block as NOTE [Row accumulation]) and the target's logit.
//    Kept per row: m and log s. The loss of a row is (m - x_t) + log s, cross_entropy's formula.
//  - backward: each tile's logits again (one more product than the unfused backward, which reads
//    its stored logits instead), its gradient G (e^((x - m) - log s) - [c = t]) in the tile
//    (rounded to bf16 once for bf16 inputs, as the unfused bf16 gradient is), then
//    d hidden += dL W_c and d W_c (+)= dL^T hidden in the accumulation type, d b_c += column sums.
//    For bf16, d hidden and d W are rounded once at the end.
// Rows whose target is ignore_index contribute nothing and are left out before the products
// (BERT's masked-LM rows that are not masked: 85% of them). Classes past V (a padded embedding
// table) are never read; their weight and bias gradients are zero. The tiles run rows outer and
// classes inner, so d hidden of a row block stays in cache and d W is read and written once per
// row block. The products are the threaded GEMMs (the bf16 ones on gemm_bf16: AMX or
// AVX512-BF16, never the conversion), the row passes run in parallel over rows: every sum runs in
// the same order whatever the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/copy.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/loss.h"
#include "ops/cpu/rows.h"
#include "ops/math/softmax.h"

namespace trident::cpu {
namespace {

constexpr int64_t kRowBlock = 1024;   // rows of a tile at most (the blocks are balanced)
constexpr int64_t kClassBlock = 512;  // classes of a tile

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// C[m, n] = op(A) op(B) (+ C when accumulating) in the accumulation type.
template <typename T>
void product(Bf16Gemm kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
             int64_t ldb, Acc<T>* c, int64_t ldc, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, Acc<T>(0));
    return;
  }
  if constexpr (std::is_same_v<T, BFloat16>) {
    gemm_bf16(kernel, ta, tb, m, n, k, reinterpret_cast<const uint16_t*>(a), lda, reinterpret_cast<const uint16_t*>(b), ldb,
              nullptr, c, ldc, accumulate);
  } else {
    gemm<T>(ta, tb, m, n, k, T(1), a, lda, b, ldb, accumulate ? T(1) : T(0), c, ldc);
  }
}

// One tile's rows [b, e) of `cols` classes starting at class v0; l holds their logits without
// the bias (overwritten: with the bias in forward, with the gradient in backward).
template <typename A>
struct TileRows {
  A* l = nullptr;
  int64_t cols = 0, v0 = 0;
  const A* bias = nullptr;     // the tile's classes, or null
  const int64_t* t = nullptr;  // targets of the tile's rows
  // forward: running max, sum of exponentials and target logit per row
  A* m = nullptr;
  double* s = nullptr;
  A* xt = nullptr;
  // backward: saved max and log-sum per row, upstream gradient per row
  const A* saved_m = nullptr;
  const A* saved_logs = nullptr;
  const A* g = nullptr;
};

template <typename A>
inline void forward_row_range(const TileRows<A>& p, int64_t b, int64_t e) {
  const int64_t n = p.cols;
  for (int64_t r = b; r < e; ++r) {
    A* l = p.l + r * n;
    if (p.bias != nullptr) {
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) l[c] += p.bias[c];
    }
    const int64_t tc = p.t[r] - p.v0;
    if (tc >= 0 && tc < n) p.xt[r] = l[tc];
    const A mc = row_max(l, n);
    A m = p.m[r];
    if (mc > m) {  // the sum so far rescaled to the new max (0 before the first tile)
      p.s[r] *= std::exp(static_cast<double>(m) - static_cast<double>(mc));
      m = mc;
      p.m[r] = m;
    }
    p.s[r] += row_sum<A>(n, [&](int64_t c) { return math::softmax_exp(static_cast<A>(l[c] - m)); });
  }
}

template <typename A>
inline void backward_row_range(const TileRows<A>& p, int64_t b, int64_t e) {
  const int64_t n = p.cols;
  for (int64_t r = b; r < e; ++r) {
    A* l = p.l + r * n;
    const A m = p.saved_m[r], logs = p.saved_logs[r], g = p.g[r];
    if (p.bias != nullptr) {
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) l[c] = g * math::softmax_exp(static_cast<A>(((l[c] + p.bias[c]) - m) - logs));
    } else {
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) l[c] = g * math::softmax_exp(static_cast<A>((l[c] - m) - logs));
    }
    const int64_t tc = p.t[r] - p.v0;
    if (tc >= 0 && tc < n) l[tc] -= g;
  }
}

// The f32 row passes compiled for AVX2 and AVX-512 too (NOTE [ISA clones], NOTE [AVX-512
// kernels]): an exponential per logit.
TRIDENT_CPU_KERNEL(lce_forward_rows_f32, (const TileRows<float>& p, int64_t b, int64_t e), { forward_row_range(p, b, e); })
TRIDENT_CPU_KERNEL(lce_backward_rows_f32, (const TileRows<float>& p, int64_t b, int64_t e), { backward_row_range(p, b, e); })

template <typename A>
void forward_rows(const TileRows<A>& p, int64_t rows) {
  parallel_for(0, rows, rows_grain(p.cols), [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<A, float>) TRIDENT_CPU_PICK(lce_forward_rows_f32)(p, b, e);
    else forward_row_range(p, b, e);
  });
}
template <typename A>
void backward_rows(const TileRows<A>& p, int64_t rows) {
  parallel_for(0, rows, rows_grain(p.cols), [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<A, float>) TRIDENT_CPU_PICK(lce_backward_rows_f32)(p, b, e);
    else backward_row_range(p, b, e);
  });
}

// The problem with the ignored rows left out: x [nv, C] and t [nv] (views of the inputs when
// nothing is ignored), rows[i] the input row of compact row i.
template <typename T>
struct Compact {
  std::vector<T> x_store;
  std::vector<int64_t> t_store, rows;
  const T* x = nullptr;
  const int64_t* t = nullptr;
  int64_t nv = 0;
};

template <typename T>
Compact<T> compact_rows(const T* x, const int64_t* t, int64_t n, int64_t C, int64_t ignore) {
  Compact<T> k;
  for (int64_t i = 0; i < n; ++i)
    if (t[i] != ignore) k.rows.push_back(i);
  k.nv = static_cast<int64_t>(k.rows.size());
  if (k.nv == n) {
    k.x = x;
    k.t = t;
    return k;
  }
  k.x_store.resize(static_cast<size_t>(k.nv * C));
  k.t_store.resize(static_cast<size_t>(k.nv));
  for (int64_t i = 0; i < k.nv; ++i) {
    const int64_t r = k.rows[static_cast<size_t>(i)];
    std::copy(x + r * C, x + (r + 1) * C, k.x_store.data() + i * C);
    k.t_store[static_cast<size_t>(i)] = t[r];
  }
  k.x = k.x_store.data();
  k.t = k.t_store.data();
  return k;
}

// Balanced row blocks of at most kRowBlock rows.
int64_t row_block(int64_t nv) {
  const int64_t blocks = std::max<int64_t>(1, (nv + kRowBlock - 1) / kRowBlock);
  return (nv + blocks - 1) / blocks;
}

template <typename T>
std::vector<Acc<T>> bias_in_acc(const Tensor& bias, int64_t V) {
  std::vector<Acc<T>> b;
  if (!bias.defined()) return b;
  const T* p = bias.data<T>();
  b.resize(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) b[static_cast<size_t>(i)] = static_cast<Acc<T>>(p[i]);
  return b;
}

template <typename T>
LinearCrossEntropyForward forward_impl(Bf16Gemm kernel, const Tensor& hidden, const Tensor& weight, const Tensor& bias,
                                       const Tensor& target, const LinearCrossEntropyArgs& args) {
  using A = Acc<T>;
  const int64_t n = hidden.size(0), C = hidden.size(1), V = args.vocab;
  const T* w = weight.data<T>();
  const Compact<T> k = compact_rows(hidden.data<T>(), target.data<int64_t>(), n, C, args.ignore_index);
  const std::vector<A> bv = bias_in_acc<T>(bias, V);
  const DType acc = std::is_same_v<A, double> ? DType::F64 : DType::F32;
  LinearCrossEntropyForward f;
  f.loss = zeros({n}, acc);
  f.row_max = zeros({n}, acc);
  f.row_logsum = zeros({n}, acc);
  f.count = k.nv;
  A* loss = f.loss.data<A>();
  A* saved_m = f.row_max.data<A>();
  A* saved_logs = f.row_logsum.data<A>();
  const int64_t rb = row_block(k.nv);
  std::vector<A> tile(static_cast<size_t>(std::max<int64_t>(rb, 1) * std::min(V, kClassBlock)));
  std::vector<A> m(static_cast<size_t>(rb)), xt(static_cast<size_t>(rb));
  std::vector<double> s(static_cast<size_t>(rb));
  for (int64_t r0 = 0; r0 < k.nv; r0 += rb) {
    const int64_t nr = std::min(rb, k.nv - r0);
    std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
    std::fill(s.begin(), s.end(), 0.0);
    for (int64_t v0 = 0; v0 < V; v0 += kClassBlock) {
      const int64_t nc = std::min(kClassBlock, V - v0);
      product<T>(kernel, false, true, nr, nc, C, k.x + r0 * C, C, w + v0 * C, C, tile.data(), nc, false);
      TileRows<A> p;
      p.l = tile.data();
      p.cols = nc;
      p.v0 = v0;
      p.bias = bv.empty() ? nullptr : bv.data() + v0;
      p.t = k.t + r0;
      p.m = m.data();
      p.s = s.data();
      p.xt = xt.data();
      forward_rows(p, nr);
    }
    for (int64_t i = 0; i < nr; ++i) {
      const int64_t row = k.rows[static_cast<size_t>(r0 + i)];
      const A logs = static_cast<A>(std::log(s[static_cast<size_t>(i)]));
      saved_m[row] = m[static_cast<size_t>(i)];
      saved_logs[row] = logs;
      loss[row] = (m[static_cast<size_t>(i)] - xt[static_cast<size_t>(i)]) + logs;
    }
  }
  for (int64_t i = 0; i < n; ++i) f.loss_sum += static_cast<double>(loss[i]);
  return f;
}

template <typename T>
LinearCrossEntropyGrads backward_impl(Bf16Gemm kernel, const Tensor& g_in, double scale, const Tensor& hidden,
                                      const Tensor& weight, const Tensor& bias, const Tensor& target, const Tensor& row_max,
                                      const Tensor& row_logsum, const LinearCrossEntropyArgs& args, bool need_hidden,
                                      bool need_weight, bool need_bias) {
  using A = Acc<T>;
  constexpr bool kHalf = std::is_same_v<T, BFloat16>;
  const int64_t n = hidden.size(0), C = hidden.size(1), V = args.vocab, Vp = weight.size(0);
  const DType dt = hidden.dtype();
  const DType acc = std::is_same_v<A, double> ? DType::F64 : DType::F32;
  const T* w = weight.data<T>();
  const Compact<T> k = compact_rows(hidden.data<T>(), target.data<int64_t>(), n, C, args.ignore_index);
  const std::vector<A> bv = bias_in_acc<T>(bias, V);
  // The upstream gradient per compact row, times the reduction's scale.
  const Tensor gc = g_in.to(acc).contiguous();
  const A* gp = gc.data<A>();
  const bool per_row = gc.numel() != 1;
  std::vector<A> g(static_cast<size_t>(k.nv)), m(static_cast<size_t>(k.nv)), logs(static_cast<size_t>(k.nv));
  for (int64_t i = 0; i < k.nv; ++i) {
    const int64_t row = k.rows[static_cast<size_t>(i)];
    g[static_cast<size_t>(i)] = static_cast<A>(static_cast<double>(per_row ? gp[row] : gp[0]) * scale);
    m[static_cast<size_t>(i)] = row_max.data<A>()[row];
    logs[static_cast<size_t>(i)] = row_logsum.data<A>()[row];
  }
  LinearCrossEntropyGrads out;
  // d hidden of the compact rows and d W in the accumulation type (for f32 and f64 the outputs).
  Tensor dx = zeros({k.nv, C}, acc);
  Tensor dw = need_weight ? zeros({Vp, C}, acc) : Tensor();
  std::vector<A> db(need_bias ? static_cast<size_t>(V) : 0, A(0));
  const int64_t rb = row_block(k.nv);
  const int64_t tile_size = std::max<int64_t>(rb, 1) * std::min(V, kClassBlock);
  std::vector<A> tile(static_cast<size_t>(tile_size));
  std::vector<T> tile_half(kHalf ? static_cast<size_t>(tile_size) : 0);
  for (int64_t r0 = 0; r0 < k.nv; r0 += rb) {
    const int64_t nr = std::min(rb, k.nv - r0);
    const T* xr = k.x + r0 * C;
    for (int64_t v0 = 0; v0 < V; v0 += kClassBlock) {
      const int64_t nc = std::min(kClassBlock, V - v0);
      product<T>(kernel, false, true, nr, nc, C, xr, C, w + v0 * C, C, tile.data(), nc, false);
      TileRows<A> p;
      p.l = tile.data();
      p.cols = nc;
      p.v0 = v0;
      p.bias = bv.empty() ? nullptr : bv.data() + v0;
      p.t = k.t + r0;
      p.saved_m = m.data() + r0;
      p.saved_logs = logs.data() + r0;
      p.g = g.data() + r0;
      backward_rows(p, nr);
      const T* dl;
      if constexpr (kHalf) {
        parallel_for(0, nr, rows_grain(nc, 8192), [&](int64_t b, int64_t e) {
          convert_f32_to_bf16(tile.data() + b * nc, tile_half.data() + b * nc, (e - b) * nc);
        });
        dl = tile_half.data();
      } else {
        dl = tile.data();
      }
      if (need_bias) {  // column sums of the gradient as the products read it
        parallel_for(0, nc, 64, [&](int64_t b, int64_t e) {
          for (int64_t r = 0; r < nr; ++r)
            for (int64_t c = b; c < e; ++c) db[static_cast<size_t>(v0 + c)] += static_cast<A>(dl[r * nc + c]);
        });
      }
      if (need_hidden) product<T>(kernel, false, false, nr, C, nc, dl, nc, w + v0 * C, C, dx.data<A>() + r0 * C, C, v0 > 0);
      if (need_weight) product<T>(kernel, true, false, nc, C, nr, dl, nc, xr, C, dw.data<A>() + v0 * C, C, r0 > 0);
    }
  }
  if (need_hidden) {
    out.hidden = zeros({n, C}, dt);
    T* dh = out.hidden.data<T>();
    const A* src = dx.data<A>();
    parallel_for(0, k.nv, rows_grain(C, 8192), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T* d = dh + k.rows[static_cast<size_t>(i)] * C;
        if constexpr (kHalf) convert_f32_to_bf16(src + i * C, d, C);
        else std::copy(src + i * C, src + (i + 1) * C, d);
      }
    });
  }
  if (need_weight) {
    if constexpr (kHalf) {
      out.weight = empty({Vp, C}, dt);
      const float* src = dw.data<float>();
      BFloat16* d = out.weight.data<BFloat16>();
      parallel_for(0, Vp * C, 1 << 16, [&](int64_t b, int64_t e) { convert_f32_to_bf16(src + b, d + b, e - b); });
    } else {
      out.weight = dw;
    }
  }
  if (need_bias) {
    out.bias = zeros({Vp}, dt);
    T* d = out.bias.data<T>();
    for (int64_t i = 0; i < V; ++i) d[i] = static_cast<T>(db[static_cast<size_t>(i)]);
  }
  return out;
}

Bf16Gemm kernel_for(DType dt) {
  if (dt != DType::BF16) return Bf16Gemm::None;
  const Bf16Gemm kernel = bf16_gemm_kernel();
  TRIDENT_CHECK(kernel != Bf16Gemm::None,
                "linear_cross_entropy: bf16 on the CPU needs a bf16 GEMM kernel (AMX or AVX512-BF16); none is in use here");
  return kernel;
}

}  // namespace

LinearCrossEntropyForward linear_cross_entropy_forward(const Tensor& hidden, const Tensor& weight, const Tensor& bias,
                                                       const Tensor& target, const LinearCrossEntropyArgs& args) {
  const Bf16Gemm kernel = kernel_for(hidden.dtype());
  switch (hidden.dtype()) {
    case DType::F32: return forward_impl<float>(kernel, hidden, weight, bias, target, args);
    case DType::F64: return forward_impl<double>(kernel, hidden, weight, bias, target, args);
    case DType::BF16: return forward_impl<BFloat16>(kernel, hidden, weight, bias, target, args);
    default: TRIDENT_FAIL("linear_cross_entropy: no CPU kernel for ", hidden.dtype());
  }
}

LinearCrossEntropyGrads linear_cross_entropy_backward(const Tensor& g, double scale, const Tensor& hidden,
                                                      const Tensor& weight, const Tensor& bias, const Tensor& target,
                                                      const Tensor& row_max, const Tensor& row_logsum,
                                                      const LinearCrossEntropyArgs& args, bool need_hidden, bool need_weight,
                                                      bool need_bias) {
  const Bf16Gemm kernel = kernel_for(hidden.dtype());
  switch (hidden.dtype()) {
    case DType::F32:
      return backward_impl<float>(kernel, g, scale, hidden, weight, bias, target, row_max, row_logsum, args, need_hidden,
                                  need_weight, need_bias);
    case DType::F64:
      return backward_impl<double>(kernel, g, scale, hidden, weight, bias, target, row_max, row_logsum, args, need_hidden,
                                   need_weight, need_bias);
    case DType::BF16:
      return backward_impl<BFloat16>(kernel, g, scale, hidden, weight, bias, target, row_max, row_logsum, args,
                                     need_hidden, need_weight, need_bias);
    default: TRIDENT_FAIL("linear_cross_entropy_backward: no CPU kernel for ", hidden.dtype());
  }
}

}  // namespace trident::cpu
