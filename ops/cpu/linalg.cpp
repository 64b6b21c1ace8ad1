#include "ops/cpu/linalg.h"

#include <cblas.h>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/gemv.h"
#include "ops/cpu/sgemm.h"
#include "ops/shape.h"

namespace trident::cpu {
namespace {

struct MatrixArg {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};

// How BLAS can read a [rows, cols] matrix with strides (s0, s1), if it can.
bool blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, MatrixArg& out) {
  if (s1 == 1 && s0 >= std::max<int64_t>(1, cols)) {
    out = {CblasNoTrans, s0};
    return true;
  }
  if (s0 == 1 && s1 >= std::max<int64_t>(1, rows)) {
    out = {CblasTrans, s1};
    return true;
  }
  if (rows == 1 && s1 == 1) {  // a single row: any row stride works
    out = {CblasNoTrans, std::max<int64_t>(1, cols)};
    return true;
  }
  if (cols == 1 && s0 == 1) {
    out = {CblasTrans, std::max<int64_t>(1, rows)};
    return true;
  }
  return false;
}

// C = A B for matmul_typed: f32 and f64 through gemm, bf16 on a bf16 GEMM (NOTE [AMX bf16 GEMM]).
template <typename T>
void product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
             int64_t ldc) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    gemm_bf16(bf16_gemm_kernel(), ta, tb, m, n, k, reinterpret_cast<const uint16_t*>(a), lda,
              reinterpret_cast<const uint16_t*>(b), ldb, nullptr, reinterpret_cast<uint16_t*>(c), ldc);
  } else {
    gemm<T>(ta, tb, m, n, k, T(1), a, lda, b, ldb, T(0), c, ldc);
  }
}

template <typename T>
Tensor matmul_typed(Tensor a, Tensor b) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const Shape abatch(a.sizes().begin(), a.sizes().end() - 2), bbatch(b.sizes().begin(), b.sizes().end() - 2);
  const Shape batch = broadcast_shapes(abatch, bbatch, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = empty(out_shape, a.dtype());
  if (out.numel() == 0) return out;
  if (k == 0) {
    std::fill_n(out.data<T>(), out.numel(), T(0));
    return out;
  }
  MatrixArg la{}, lb{};
  if (!blas_layout(m, k, a.stride(-2), a.stride(-1), la)) {
    a = a.contiguous();
    blas_layout(m, k, a.stride(-2), a.stride(-1), la);
  }
  if (!blas_layout(k, n, b.stride(-2), b.stride(-1), lb)) {
    b = b.contiguous();
    blas_layout(k, n, b.stride(-2), b.stride(-1), lb);
  }
  const Shape ast = broadcast_strides(abatch, Shape(a.strides().begin(), a.strides().end() - 2), batch);
  const Shape bst = broadcast_strides(bbatch, Shape(b.strides().begin(), b.strides().end() - 2), batch);
  const T* ap = a.data<T>();
  const T* bp = b.data<T>();
  T* op = out.data<T>();
  const int64_t nbatch = shape_numel(batch);
  const bool ta = la.trans == CblasTrans, tb = lb.trans == CblasTrans;

  // A batch against one shared right operand ([B, T, C] @ [C, N]) is one tall GEMM when a's
  // batch dims fold into its rows.
  bool b_shared = true;
  for (int64_t s : bst) b_shared = b_shared && s == 0;
  if (nbatch > 1 && b_shared && !ta && a.stride(-1) == 1) {
    // The rows of all batch matrices must form one strided sequence: walking the non-1 dims of
    // [batch..., m] from the inside out, each stride is the next one's stride times its size.
    bool foldable = true;
    int64_t row_stride = 0, expect = 0;
    auto visit = [&](int64_t size, int64_t stride) {
      if (size == 1) return;
      if (stride == 0) foldable = false;  // a broadcast batch of a: rows repeat
      if (row_stride == 0) {
        row_stride = stride;
      } else {
        foldable = foldable && stride == expect;
      }
      expect = stride * size;
    };
    visit(m, a.stride(-2));
    for (size_t d = batch.size(); d-- > 0;) visit(batch[d], ast[d]);
    if (foldable && row_stride >= k) {
      product<T>(false, tb, nbatch * m, n, k, ap, row_stride, bp, lb.ld, op, n);
      return out;
    }
  }

  auto one = [&](int64_t i) {
    int64_t ao = 0, bo = 0, rem = i;
    for (size_t d = batch.size(); d-- > 0;) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      ao += idx * ast[d];
      bo += idx * bst[d];
    }
    product<T>(ta, tb, m, n, k, ap + ao, la.ld, bp + bo, lb.ld, op + i * m * n, n);
  };
  if (gemm_batch_in_parallel(nbatch, m, n, k)) {
    parallel_for(0, nbatch, 1, [&](int64_t b0, int64_t e0) {
      for (int64_t i = b0; i < e0; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < nbatch; ++i) one(i);
  }
  return out;
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // C = beta C: BLAS implementations differ on k = 0, so do it here
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  // A few rows against a matrix: streamed once, bandwidth-bound (NOTE [Small-m SGEMM]).
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_small_m(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  }
  // Decided once for the whole product, so that every panel below runs the same kernel and the
  // result does not depend on the thread count (NOTE [AVX-512 SGEMM], NOTE [AVX2 SGEMM]).
  Sgemm kernel = Sgemm::OpenBlas;
  if constexpr (std::is_same_v<T, float>) kernel = sgemm_kernel_for(m, n, k);
  const auto call = [&](int64_t mm, int64_t nn, const T* ap, const T* bp, T* cp) {
    if constexpr (std::is_same_v<T, float>) {
      if (kernel == Sgemm::Avx512) return sgemm_avx512(trans_a, trans_b, mm, nn, k, alpha, ap, lda, bp, ldb, beta, cp, ldc);
      if (kernel == Sgemm::Avx2) return sgemm_avx2(trans_a, trans_b, mm, nn, k, alpha, ap, lda, bp, ldb, beta, cp, ldc);
    }
    const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    const auto M = static_cast<blasint>(mm), N = static_cast<blasint>(nn), K = static_cast<blasint>(k);
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, ap, static_cast<blasint>(lda), bp, static_cast<blasint>(ldb), beta, cp,
                  static_cast<blasint>(ldc));
    } else {
      cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, ap, static_cast<blasint>(lda), bp, static_cast<blasint>(ldb), beta, cp,
                  static_cast<blasint>(ldc));
    }
  };
  const int threads = get_num_threads();  // also puts OpenBLAS on one thread (NOTE [Threads])
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (threads <= 1 || omp_in_parallel() || work < 262144.0 || std::max(m, n) < 32) {
    call(m, n, a, b, c);
    return;
  }
  // Panels of C's rows (or columns, when there are more of those), 16-aligned, one per thread.
  const bool by_rows = m >= n;
  const int64_t extent = by_rows ? m : n;
  const int64_t panels = std::min<int64_t>(threads, (extent + 15) / 16);
  const int64_t step = ((extent + panels - 1) / panels + 15) / 16 * 16;
  parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t lo = p * step, hi = std::min(extent, lo + step);
      if (lo >= hi) continue;
      if (by_rows) {
        call(hi - lo, n, trans_a ? a + lo : a + lo * lda, b, c + lo * ldc);
      } else {
        call(m, hi - lo, a, trans_b ? b + lo * ldb : b + lo, c + lo);
      }
    }
  });
}
bool gemm_batch_in_parallel(int64_t count, int64_t m, int64_t n, int64_t k) {
  // Below ~2M multiply-adds a GEMM split in panels keeps each thread busy too briefly; many of
  // them are better spread one per thread.
  return count > 1 && get_num_threads() > 1 && m * n * k <= (int64_t{1} << 21);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                          float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*, int64_t,
                           double, double*, int64_t);

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  // Kernels work on detached handles: any copy they make is not part of the graph.
  const Tensor a = a_in.detach(), b = b_in.detach();
  switch (a.dtype()) {
    case DType::F32: return matmul_typed<float>(a, b);
    case DType::F64: return matmul_typed<double>(a, b);
    case DType::BF16:
      if (bf16_gemm_kernel() != Bf16Gemm::None) return matmul_typed<BFloat16>(a, b);
      [[fallthrough]];
    case DType::F16: return matmul_typed<float>(a.to(DType::F32), b.to(DType::F32)).to(a.dtype());
    default: TRIDENT_FAIL("matmul: no kernel for dtype ", a.dtype(), " (supported: f32, f64, f16, bf16)");
  }
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  const Tensor x = x_in.detach(), w = w_in.detach(), b = b_in.defined() ? b_in.detach() : Tensor();
  // bf16 on a bf16 GEMM below where the CPU has one (NOTE [AMX bf16 GEMM]); otherwise f16 and
  // bf16 compute in f32 on their exact values, rounded once.
  const Bf16Gemm kernel =
      x.dtype() == DType::BF16 && w.dtype() == DType::BF16 && w.size(1) > 0 ? bf16_gemm_kernel() : Bf16Gemm::None;
  if (is_reduced_float(x.dtype()) && kernel == Bf16Gemm::None) {
    return linear(x.to(DType::F32), w.to(DType::F32), b.defined() ? b.to(DType::F32) : b).to(x.dtype());
  }
  const int64_t in = w.size(1), out_f = w.size(0);
  Shape out_shape(x.sizes().begin(), x.sizes().end() - 1);
  const int64_t rows = shape_numel(out_shape);
  out_shape.push_back(out_f);
  Tensor out = empty(out_shape, x.dtype());
  if (out.numel() == 0) return out;
  // x as [rows, in] (a view when its leading dims fold), W read transposed in place.
  Tensor x2 = x;
  if (x.dim() != 2) {
    auto st = view_strides(x.sizes(), x.strides(), {rows, in});
    x2 = st ? x.as_strided({rows, in}, *st, x.storage_offset()) : x.contiguous().as_strided({rows, in}, {in, 1}, 0);
  }
  MatrixArg lx{}, lw{};
  if (!blas_layout(rows, in, x2.stride(0), x2.stride(1), lx)) {
    x2 = x2.contiguous();
    blas_layout(rows, in, x2.stride(0), x2.stride(1), lx);
  }
  Tensor w2 = w;
  if (!blas_layout(out_f, in, w2.stride(0), w2.stride(1), lw)) {
    w2 = w2.contiguous();
    blas_layout(out_f, in, w2.stride(0), w2.stride(1), lw);
  }
  if (kernel != Bf16Gemm::None) {
    const Tensor bias = b.defined() ? b.to(DType::F32).contiguous() : Tensor();
    gemm_bf16(kernel, lx.trans == CblasTrans, lw.trans != CblasTrans, rows, out_f, in,
              reinterpret_cast<const uint16_t*>(x2.data<BFloat16>()), lx.ld, reinterpret_cast<const uint16_t*>(w2.data<BFloat16>()),
              lw.ld, bias.defined() ? bias.data<float>() : nullptr, reinterpret_cast<uint16_t*>(out.data<BFloat16>()), out_f);
    return out;
  }
  TRIDENT_DISPATCH_F32_F64(x.dtype(), "linear", [&] {
    using T = scalar_t;
    T* o = out.data<T>();
    T beta = T(0);
    if (b.defined()) {
      // Start C from the bias rows; the GEMM adds x W^T on top (beta = 1): the bias costs one
      // pass over the output instead of two.
      const Tensor bc = b.contiguous();
      const T* bp = bc.data<T>();
      parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(out_f, 1)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) std::copy(bp, bp + out_f, o + r * out_f);
      });
      beta = T(1);
    }
    if (in == 0) return;
    // out = x2 @ W^T: W stored [out, in] row-major is W^T read with the opposite transpose flag.
    gemm<T>(lx.trans == CblasTrans, lw.trans != CblasTrans, rows, out_f, in, T(1), x2.data<T>(), lx.ld, w2.data<T>(), lw.ld,
            beta, o, out_f);
  });
  return out;
}

}  // namespace trident::cpu
