#include "ops/cpu/linalg.h"

#include <cblas.h>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/blas.h"

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
  std::vector<int64_t> idx(batch.size(), 0);
  for (int64_t i = 0; i < nbatch; ++i) {
    int64_t ao = 0, bo = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      ao += idx[d] * ast[d];
      bo += idx[d] * bst[d];
    }
    gemm<T>(la.trans == CblasTrans, lb.trans == CblasTrans, m, n, k, T(1), ap + ao, la.ld, bp + bo, lb.ld, T(0), op + i * m * n, n);
    for (size_t d = batch.size(); d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  get_num_threads();  // sizes OpenBLAS's pool once (NOTE [Threads])
  const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n), K = static_cast<blasint>(k);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
                static_cast<blasint>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
                static_cast<blasint>(ldc));
  }
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
    case DType::F16:
    case DType::BF16: return matmul_typed<float>(a.to(DType::F32), b.to(DType::F32)).to(a.dtype());
    default: TRIDENT_FAIL("matmul: no kernel for dtype ", a.dtype(), " (supported: f32, f64, f16, bf16)");
  }
}

}  // namespace trident::cpu
