// NOTE [Linear cross-entropy]: the loss of a classifier over a large vocabulary without its
// logits. cross_entropy(hidden W[:V]^T + b[:V], target) over GPT-2's [tokens, 50304] writes the
// logits (103 MB per 1024 tokens in bf16, twice that in f32), reads them twice for the loss,
// writes their gradient as large again and reads it twice more for the two gradient products;
// on any device they are the largest activation of the model. Here the logits exist one tile at
// a time ([<= 1024 rows, 512 classes], in the accumulation type: f32 for f32 and bf16, f64 for
// f64), from the same products:
//  - forward: for each tile, logits = hidden W_c^T (+ b_c) by the GEMM, then per row an online
//    log-sum-exp (the running max m and sum s = sum e^(x - m), rescaled when the max grows, the
//    sums of exponentials in f64 per block as NOTE [Row accumulation]) and the target's logit.
//    Kept per row: m and log s. The loss of a row is (m - x_t) + log s, cross_entropy's formula.
//  - backward: each tile's logits again (one more product than the composed backward, which
//    reads its stored logits instead), its gradient G (e^((x - m) - log s) - [c = t]) in the tile
//    (rounded to bf16 once for bf16 inputs, as the composed bf16 gradient is), then
//    d hidden += dL W_c and d W_c (+)= dL^T hidden in the accumulation type, d b_c += column sums.
//    For bf16, d hidden is rounded once at the end, and d W once by its product (one row block)
//    or at the end (several).
// Rows whose target is ignore_index contribute nothing and are left out before the products.
// Classes past V (a padded embedding table) are never read; their weight and bias gradients are
// zero. Row blocks run one after another; within one, the class tiles go to lanes (for_lanes
// below), each tile's products (single-threaded GEMMs; the bf16 ones on gemm_bf16, AMX or
// AVX512-BF16, never the conversion) and row passes on one thread. Every sum runs in the same order
// whatever the thread count.
// bf16 takes a tile's rows in chunks of 128 (TileProducts below): a chunk's f32 logits (256 KiB)
// stay in L2 from the product to the row pass, the tile's W_c^T and W_c are packed once for all
// chunks and the row block's hidden states once for every tile's d W product (PackedBf16B).
// bf16 hidden states may come with an f32 table and bias (autocast's f32 parameters): each tile
// is rounded to bf16 as a lane reads it, and d W and d b are written in f32, the sums unrounded,
// so no bf16 copy of a 50304-row table exists and its gradient needs no cast back.
// Measured (GPT-2 tiny's head, [1024, 256] x [50304, 256], 2 threads of the AMX Xeon, against
// linear + cross_entropy, docs/performance.md): bf16 forward 24.3-26.6 against 32.7-34.6 ms,
// forward + backward 82.8-87.2 against 85.1-90.0 (the recomputed product costs about what the
// logits' memory traffic saved); with the chunks, alternating with the whole tiles, forward
// 20.3-23.2 against 25.9-26.2, forward + backward 74.7-84.1 against 89.3-90.6. f32 forward 83-84
// against 87-92, forward + backward 332-345 against 285-286 (the f32 GEMM is compute-bound: the
// fourth product costs more than any traffic). Hence LinearCrossEntropyImpl::Auto in ops/loss.h.
#include <algorithm>
#include <cmath>
#include <cstring>
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
  // backward: saved max and log-sum per row, upstream gradient per row; the gradient rounded to
  // bf16 into `half` (rows of `cols`) when set
  BFloat16* half = nullptr;
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
    if constexpr (std::is_same_v<A, float>) {
      if (p.half != nullptr) convert_f32_to_bf16(l, p.half + r * n, n);  // while the row is in L1
    }
  }
}

// The f32 row passes compiled for AVX2 and AVX-512 too (NOTE [ISA clones], NOTE [AVX-512
// kernels]): an exponential per logit.
TRIDENT_CPU_KERNEL(lce_forward_rows_f32, (const TileRows<float>& p, int64_t b, int64_t e), { forward_row_range(p, b, e); })
TRIDENT_CPU_KERNEL(lce_backward_rows_f32, (const TileRows<float>& p, int64_t b, int64_t e), { backward_row_range(p, b, e); })

// One lane's products with the current tile of the table, W_c = W[v0, v0 + nc): the logits of
// row chunks (x W_c^T) and the input gradient's (dL W_c). bf16 on a bf16 GEMM kernel packs W_c^T
// and W_c once per tile for all the chunks (PackedBf16B), and takes the rows in chunks of
// kChunkRows, whose f32 logits stay in L2 between the product and the row pass (a whole
// [1024, 512] tile is the whole 2 MiB L2 of the AMX Xeon: its logits went out to L3 and back;
// 64 and 128 rows measured alike, 256 slower); the other types run product() on whole tiles.
constexpr int64_t kChunkRows = 128;

template <typename T>
struct TileProducts {
  using A = Acc<T>;
  Bf16Gemm kernel = Bf16Gemm::None;
  int64_t C = 0;
  bool chunked = false;  // bf16 whose tiles of W pack: rows in chunks of kChunkRows
  bool packed = false;   // this tile's W_c^T and W_c packed
  PackedBf16B wt, wn;
  const T* wc = nullptr;
  int64_t nc = 0;

  // bf16 hidden states with an f32 table: each tile rounded to bf16 here as it is read.
  const float* w32 = nullptr;
  std::vector<T> rounded;

  // `width`: the classes of a full tile. Chunks only where each tile's W packs (features up to
  // 1024: GPT-2 tiny to 355M); wider, a product per chunk would pack W_c again each time, so
  // whole tiles, one product each, as the other types.
  TileProducts(Bf16Gemm k, int64_t features, int64_t width, const float* table32) : kernel(k), C(features), w32(table32) {
    if constexpr (std::is_same_v<T, BFloat16>) chunked = bf16_b_packs_whole(width, C) && bf16_b_packs_whole(C, width);
  }
  int64_t chunk(int64_t rows) const { return chunked ? std::min(rows, kChunkRows) : rows; }
  void begin_tile(const T* w, int64_t v0, int64_t classes, bool input_gradient) {
    nc = classes;
    if (w32 == nullptr) wc = w + v0 * C;
    if constexpr (std::is_same_v<T, BFloat16>) {
      if (w32 != nullptr) {
        rounded.resize(static_cast<size_t>(nc * C));
        convert_f32_to_bf16(w32 + v0 * C, rounded.data(), nc * C);
        wc = rounded.data();
      }
      packed = bf16_b_packs_whole(nc, C) && (!input_gradient || bf16_b_packs_whole(C, nc));
      if (packed) {
        wt.pack(true, nc, C, reinterpret_cast<const uint16_t*>(wc), C);
        if (input_gradient) wn.pack(false, C, nc, reinterpret_cast<const uint16_t*>(wc), C);
      }
    }
  }
  // out [rows, nc] = x [rows, C] W_c^T
  void logits(const T* x, int64_t rows, A* out) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      if (packed) return gemm_bf16_packed(kernel, false, rows, reinterpret_cast<const uint16_t*>(x), C, wt, out, nc);
    }
    product<T>(kernel, false, true, rows, nc, C, x, C, wc, C, out, nc, false);
  }
  // dx [rows, C] (+)= dl [rows, nc] W_c
  void input_gradient(const T* dl, int64_t rows, A* dx, bool accumulate) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      if (packed) return gemm_bf16_packed(kernel, false, rows, reinterpret_cast<const uint16_t*>(dl), nc, wn, dx, C, accumulate);
    }
    product<T>(kernel, false, false, rows, C, nc, dl, nc, wc, C, dx, C, accumulate);
  }
};

// The row-pass parameters of `rows` rows of a tile (classes [v0, v0 + nc)), their logits in l.
template <typename A>
TileRows<A> tile_rows(A* l, int64_t v0, int64_t nc, const std::vector<A>& bias, const int64_t* t) {
  TileRows<A> p;
  p.l = l;
  p.cols = nc;
  p.v0 = v0;
  p.bias = bias.empty() ? nullptr : bias.data() + v0;
  p.t = t;
  return p;
}

template <typename A>
void forward_rows(const TileRows<A>& p, int64_t rows) {
  if constexpr (std::is_same_v<A, float>) TRIDENT_CPU_PICK(lce_forward_rows_f32)(p, 0, rows);
  else forward_row_range(p, 0, rows);
}
template <typename A>
void backward_rows(const TileRows<A>& p, int64_t rows) {
  if constexpr (std::is_same_v<A, float>) TRIDENT_CPU_PICK(lce_backward_rows_f32)(p, 0, rows);
  else backward_row_range(p, 0, rows);
}

// The class tiles of a row block go to kLanes lanes (tile c to lane c % kLanes), each lane's tiles
// in order on one thread, the lanes shared among the threads: a tile's product, row pass and
// gradient products run on one thread, in its cache, with no barrier between them. What the
// lanes sum (the row's exponentials in forward, d hidden in backward) each lane keeps apart, and
// the lanes are added in lane order: the same numbers whatever the thread count.
constexpr int64_t kLanes = 8;

template <typename F>
void for_lanes(int64_t tiles, const F& f) {
  parallel_for(0, std::min(kLanes, tiles), 1, [&](int64_t b, int64_t e) {
    for (int64_t lane = b; lane < e; ++lane) f(lane);
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
  b.resize(static_cast<size_t>(V));
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (bias.dtype() == DType::F32) {  // autocast's f32 bias, rounded as the table is
      const float* p = bias.data<float>();
      for (int64_t i = 0; i < V; ++i) b[static_cast<size_t>(i)] = static_cast<float>(BFloat16(p[i]));
      return b;
    }
  }
  const T* p = bias.data<T>();
  for (int64_t i = 0; i < V; ++i) b[static_cast<size_t>(i)] = static_cast<Acc<T>>(p[i]);
  return b;
}

// bf16 hidden states with an f32 table (and bias): the table's f32 values, else null (the table
// is T).
template <typename T>
const float* mixed_table(const Tensor& weight) {
  if constexpr (std::is_same_v<T, BFloat16>) return weight.dtype() == DType::F32 ? weight.data<float>() : nullptr;
  return nullptr;
}

template <typename T>
LinearCrossEntropyForward forward_impl(Bf16Gemm kernel, const Tensor& hidden, const Tensor& weight, const Tensor& bias,
                                       const Tensor& target, const LinearCrossEntropyArgs& args) {
  using A = Acc<T>;
  const int64_t n = hidden.size(0), C = hidden.size(1), V = args.vocab;
  const float* w32 = mixed_table<T>(weight);
  const T* w = w32 != nullptr ? nullptr : weight.data<T>();
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
  const int64_t tiles = (V + kClassBlock - 1) / kClassBlock, lanes = std::min(kLanes, tiles);
  const size_t lane_rows = static_cast<size_t>(lanes * rb);
  // Per lane and row: the running max and sum of exponentials over the lane's tiles.
  std::vector<A> m(lane_rows), xt(static_cast<size_t>(rb));
  std::vector<double> s(lane_rows);
  for (int64_t r0 = 0; r0 < k.nv; r0 += rb) {
    const int64_t nr = std::min(rb, k.nv - r0);
    std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
    std::fill(s.begin(), s.end(), 0.0);
    for_lanes(tiles, [&](int64_t lane) {
      TileProducts<T> tp(kernel, C, std::min(V, kClassBlock), w32);
      const int64_t chunk = tp.chunk(nr);
      std::vector<A> tile(static_cast<size_t>(chunk * std::min(V, kClassBlock)));
      for (int64_t c = lane; c < tiles; c += kLanes) {
        const int64_t v0 = c * kClassBlock, nc = std::min(kClassBlock, V - v0);
        tp.begin_tile(w, v0, nc, false);
        for (int64_t i0 = 0; i0 < nr; i0 += chunk) {
          const int64_t rows = std::min(chunk, nr - i0);
          tp.logits(k.x + (r0 + i0) * C, rows, tile.data());
          TileRows<A> p = tile_rows(tile.data(), v0, nc, bv, k.t + r0 + i0);
          p.m = m.data() + lane * rb + i0;
          p.s = s.data() + lane * rb + i0;
          p.xt = xt.data() + i0;  // one tile holds a row's target: one lane writes it
          forward_rows(p, rows);
        }
      }
    });
    for (int64_t i = 0; i < nr; ++i) {
      A mx = -std::numeric_limits<A>::infinity();
      for (int64_t l = 0; l < lanes; ++l) mx = std::max(mx, m[static_cast<size_t>(l * rb + i)]);
      double sum = 0;
      for (int64_t l = 0; l < lanes; ++l)
        sum += s[static_cast<size_t>(l * rb + i)] *
               std::exp(static_cast<double>(m[static_cast<size_t>(l * rb + i)]) - static_cast<double>(mx));
      const int64_t row = k.rows[static_cast<size_t>(r0 + i)];
      const A logs = static_cast<A>(std::log(sum));
      saved_m[row] = mx;
      saved_logs[row] = logs;
      loss[row] = (mx - xt[static_cast<size_t>(i)]) + logs;
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
  const float* w32 = mixed_table<T>(weight);
  const bool mixed = w32 != nullptr;  // f32 weight and bias gradients, from the f32 sums
  const T* w = mixed ? nullptr : weight.data<T>();
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
  const int64_t rb = row_block(k.nv);
  // d hidden of the compact rows in the accumulation type (the first tile of a row block writes
  // it); d W in the accumulation type too (f32 and f64: the output itself), except bf16 with one
  // row block, whose products write each tile's rows of d W once (rounded, or in f32 for an f32
  // table): no f32 copy of it. Rows past V, and everything when every row is ignored, are zero.
  const bool dw_direct = kHalf && k.nv <= rb;
  Tensor dx = empty({k.nv, C}, acc);
  Tensor dw;
  if (need_weight) {
    const DType dw_dtype = (kHalf && !dw_direct) || mixed ? acc : dt;
    dw = k.nv == 0 ? zeros({Vp, C}, dw_dtype) : empty({Vp, C}, dw_dtype);
    if (k.nv > 0 && Vp > V) {
      char* base = static_cast<char*>(dw.data_ptr());
      const size_t elem = dw_dtype == acc ? sizeof(A) : sizeof(T);
      std::memset(base + static_cast<size_t>(V * C) * elem, 0, static_cast<size_t>((Vp - V) * C) * elem);
    }
  }
  std::vector<A> db(need_bias ? static_cast<size_t>(V) : 0, A(0));
  const int64_t tiles = (V + kClassBlock - 1) / kClassBlock, lanes = std::min(kLanes, tiles);
  // Each lane's sum of d hidden over its tiles, [lanes, rb, C].
  std::vector<A> dx_lanes(need_hidden ? static_cast<size_t>(lanes * rb * C) : 0);
  for (int64_t r0 = 0; r0 < k.nv; r0 += rb) {
    const int64_t nr = std::min(rb, k.nv - r0);
    const T* xr = k.x + r0 * C;
    // bf16: the row block's hidden states packed once as B of every tile's d W product.
    PackedBf16B x_packed;
    const bool x_is_packed = kHalf && need_weight && dw_direct && bf16_b_packs_whole(C, nr);
    if (x_is_packed) x_packed.pack(false, C, nr, reinterpret_cast<const uint16_t*>(xr), C);
    for_lanes(tiles, [&](int64_t lane) {
      const int64_t width = std::min(V, kClassBlock);
      TileProducts<T> tp(kernel, C, width, w32);
      const int64_t chunk = tp.chunk(nr);
      // The f32 logits of a chunk; for bf16 the gradient of the whole tile, rounded (d W's
      // product reads all its rows).
      std::vector<A> tile(static_cast<size_t>(chunk * width));
      std::vector<T> tile_half(kHalf ? static_cast<size_t>(nr * width) : 0);
      A* dxl = need_hidden ? dx_lanes.data() + lane * rb * C : nullptr;
      for (int64_t c = lane; c < tiles; c += kLanes) {
        const int64_t v0 = c * kClassBlock, nc = std::min(kClassBlock, V - v0);
        tp.begin_tile(w, v0, nc, need_hidden);
        for (int64_t i0 = 0; i0 < nr; i0 += chunk) {
          const int64_t rows = std::min(chunk, nr - i0);
          tp.logits(xr + i0 * C, rows, tile.data());
          TileRows<A> p = tile_rows(tile.data(), v0, nc, bv, k.t + r0 + i0);
          p.saved_m = m.data() + r0 + i0;
          p.saved_logs = logs.data() + r0 + i0;
          p.g = g.data() + r0 + i0;
          const T* dl;
          if constexpr (kHalf) {
            p.half = tile_half.data() + i0 * nc;
            dl = p.half;
          } else {
            dl = tile.data();
          }
          backward_rows(p, rows);
          if (need_bias) {  // column sums of the gradient as the products read it
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t j = 0; j < nc; ++j) db[static_cast<size_t>(v0 + j)] += static_cast<A>(dl[r * nc + j]);
          }
          if (need_hidden) tp.input_gradient(dl, rows, dxl + i0 * C, c != lane);
          if (need_weight && !kHalf)  // f32 and f64 take whole tiles as one chunk
            product<T>(kernel, true, false, nc, C, rows, dl, nc, xr + i0 * C, C, dw.data<A>() + v0 * C, C, r0 > 0 || i0 > 0);
        }
        if constexpr (kHalf) {
          const uint16_t* dl = reinterpret_cast<const uint16_t*>(tile_half.data());
          const auto write_dw = [&](auto* out) {  // the tile's rows of d W, rounded or f32
            if (x_is_packed) return gemm_bf16_packed(kernel, true, nc, dl, nc, x_packed, out + v0 * C, C);
            if (C > 0)
              gemm_bf16(kernel, true, false, nc, C, nr, dl, nc, reinterpret_cast<const uint16_t*>(xr), C, nullptr, out + v0 * C, C);
          };
          if (need_weight && dw_direct) {
            if (mixed) write_dw(dw.data<float>());
            else write_dw(reinterpret_cast<uint16_t*>(dw.data<BFloat16>()));
          } else if (need_weight) {
            product<T>(kernel, true, false, nc, C, nr, tile_half.data(), nc, xr, C, dw.data<A>() + v0 * C, C, r0 > 0);
          }
        }
      }
    });
    if (need_hidden) {  // the lanes' sums, in lane order
      A* d = dx.data<A>() + r0 * C;
      parallel_for(0, nr * C, 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          A v = dx_lanes[static_cast<size_t>(i)];
          for (int64_t l = 1; l < lanes; ++l) v += dx_lanes[static_cast<size_t>(l * rb * C + i)];
          d[i] = v;
        }
      });
    }
  }
  if (need_hidden) {
    out.hidden = k.nv < n ? zeros({n, C}, dt) : empty({n, C}, dt);
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
    if (kHalf && !dw_direct && !mixed) {
      out.weight = empty({Vp, C}, dt);
      const float* src = dw.data<float>();
      BFloat16* d = out.weight.data<BFloat16>();
      parallel_for(0, Vp * C, 1 << 16, [&](int64_t b, int64_t e) { convert_f32_to_bf16(src + b, d + b, e - b); });
    } else {
      out.weight = dw;
    }
  }
  if (need_bias) {
    out.bias = zeros({Vp}, bias.dtype());
    const auto write = [&](auto* d) {
      for (int64_t i = 0; i < V; ++i) d[i] = static_cast<std::remove_pointer_t<decltype(d)>>(db[static_cast<size_t>(i)]);
    };
    if (bias.dtype() == DType::F32) write(out.bias.data<float>());
    else write(out.bias.data<T>());
  }
  return out;
}

// The dtypes the kernels take (ops/cpu/loss.h): one dtype, or bf16 hidden states with an f32
// weight and bias.
void check_dtypes(const char* op, const Tensor& hidden, const Tensor& weight, const Tensor& bias) {
  const DType h = hidden.dtype(), w = weight.dtype();
  const bool mixed = h == DType::BF16 && w == DType::F32;
  TRIDENT_CHECK(w == h || mixed, op, ": hidden is ", h, " but weight is ", w, " (expected one dtype, or bf16 with f32)");
  TRIDENT_CHECK(!bias.defined() || bias.dtype() == w, op, ": bias is ", bias.dtype(), " but weight is ", w);
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
  check_dtypes("linear_cross_entropy", hidden, weight, bias);
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
  check_dtypes("linear_cross_entropy_backward", hidden, weight, bias);
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
