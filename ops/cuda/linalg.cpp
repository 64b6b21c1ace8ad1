#include "ops/cuda/linalg.h"

#include <cublasLt.h>

#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/factory.h"
#include "ops/shape.h"
#include "ops/cuda/plan_key.h"

namespace trident::cuda {
namespace {

std::atomic<bool> g_allow_tf32{false};

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what NVIDIA advises for Hopper

// One handle per device, made on first use and kept for the process: destroying handles from a
// static destructor races the CUDA runtime's own teardown.
cublasLtHandle_t handle_for(int device) {
  static std::mutex mu;
  static std::vector<cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  if (handles.size() <= static_cast<size_t>(device)) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  cublasLtHandle_t& h = handles[static_cast<size_t>(device)];
  if (h == nullptr) {
    DeviceGuard g(device);
    TRIDENT_CUBLAS_CHECK(cublasLtCreate(&h));
  }
  return h;
}

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: break;
  }
  TRIDENT_CHECK(false, "matmul (CUDA): dtype ", dt, " is not supported; expected f32, f16 or bf16");
  return CUDA_R_32F;
}

// The largest power of two up to 256 that divides the address: cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told otherwise, and views (a slice of a fused QKV output) are
// often less aligned than that.
uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// A column-major matrix as cuBLASLt stores it, and whether the GEMM reads it transposed.
struct Operand {
  const void* ptr = nullptr;
  int64_t rows = 0, cols = 0, ld = 1;  // the stored matrix, before the op
  bool trans = false;
  int64_t batch_stride = 0;
};

// The view x[r, c] (strides sr, sc; row-major indexing) read as the column-major matrix x^T
// [c, r]: a row-major x is that matrix untransposed, a column-major x (sr == 1) is the stored
// matrix [r, c] read with op T. False when neither stride is 1 (the caller copies).
bool as_transposed(int64_t r, int64_t c, int64_t sr, int64_t sc, Operand& op) {
  if ((sc == 1 || c == 1) && (r == 1 || sr >= std::max<int64_t>(1, c))) {
    op.rows = c;
    op.cols = r;
    op.ld = r == 1 ? std::max<int64_t>(1, c) : sr;
    op.trans = false;
    return true;
  }
  if ((sr == 1 || r == 1) && (c == 1 || sc >= std::max<int64_t>(1, r))) {
    op.rows = r;
    op.cols = c;
    op.ld = c == 1 ? std::max<int64_t>(1, r) : sc;
    op.trans = true;
    return true;
  }
  return false;
}

// The stride that walks the batch dims of an operand (already expanded to the batch shape) in
// order, if one does: each non-1 dim's stride is the next inner non-1 dim's stride times its size.
bool batch_stride_of(const Shape& batch, const Shape& strides, int64_t& out) {
  int64_t inner = -1, expect = 0;
  for (size_t d = batch.size(); d-- > 0;) {
    if (batch[d] == 1) continue;
    if (inner < 0) {
      inner = strides[d];
    } else if (strides[d] != expect) {
      return false;
    }
    expect = strides[d] * batch[d];
  }
  out = inner < 0 ? 0 : inner;
  return true;
}

using Key = PlanKey<16>;
using KeyHash = PlanKeyHash<16>;

// Descriptors and the chosen algorithm for one kind of product; built once per thread and key
// (thread-local, so setting the bias pointer per call needs no lock).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  TRIDENT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const auto count = static_cast<int32_t>(batch);
    TRIDENT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    TRIDENT_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

// C[m, n] (column-major, ldc = m, batch stride m * n) = op(A)[m, k] op(B)[k, n] (+ bias[m] per
// row of C), on the current stream of `device`. With gelu_aux (batch 1, m a multiple of 8), C
// gets GELU (tanh form) of that, and gelu_aux [m, n] (column-major, ld m) the value before it.
// Returns false, computing nothing, when cuBLASLt has no algorithm for the GELU epilogue at these
// alignments (the caller then runs linear and gelu); without the epilogue that is an error.
bool gemm(int device, DType dt, int64_t m, int64_t n, int64_t k, const Operand& A, const Operand& B, void* C,
          int64_t batch, const void* bias, void* gelu_aux = nullptr) {
  const cudaDataType_t type = cuda_type(dt);
  const bool tf32 = dt == DType::F32 && g_allow_tf32.load(std::memory_order_relaxed);
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const uint32_t align_a = alignment_of(A.ptr), align_b = alignment_of(B.ptr), align_c = alignment_of(C);
  const uint32_t align_bias = bias != nullptr ? alignment_of(bias) : 256;

  const uint32_t align_aux = gelu_aux != nullptr ? alignment_of(gelu_aux) : 0;
  Key key;
  key.v = {device, static_cast<int64_t>(dt), tf32, m, n, k, A.ld, B.ld, A.trans, B.trans, batch,
           A.batch_stride, B.batch_stride, (bias != nullptr ? align_bias : 0) | static_cast<int64_t>(align_aux) << 32,
           static_cast<int64_t>(align_a) << 32 | align_b, align_c};
  thread_local std::unordered_map<Key, std::unique_ptr<Plan>, KeyHash> plans;
  std::unique_ptr<Plan>& slot = plans[key];
  cublasLtHandle_t handle = handle_for(device);
  if (!slot) {
    auto plan = std::make_unique<Plan>();
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
    const cublasOperation_t ta = A.trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = B.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (bias != nullptr || gelu_aux != nullptr) {
      const cublasLtEpilogue_t epi = gelu_aux == nullptr ? CUBLASLT_EPILOGUE_BIAS
                                     : bias != nullptr   ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                         : CUBLASLT_EPILOGUE_GELU_AUX;
      TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    }
    if (bias != nullptr) {
      TRIDENT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof(type)));
      TRIDENT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (gelu_aux != nullptr) {  // the aux matrix has C's type (the attribute's default)
      const int64_t aux_ld = m;
      TRIDENT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
      TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &gelu_aux,
                                                          sizeof(gelu_aux)));
    }
    plan->a = make_layout(type, A.rows, A.cols, A.ld, batch, A.batch_stride);
    plan->b = make_layout(type, B.rows, B.cols, B.ld, batch, B.batch_stride);
    plan->c = make_layout(type, m, n, m, batch, m * n);

    cublasLtMatmulPreference_t pref = nullptr;
    TRIDENT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                                              pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (gelu_aux != nullptr && !(st == CUBLAS_STATUS_SUCCESS && found > 0)) {
      plans.erase(key);  // asked again next time: the heuristic is cheap next to a failure
      return false;
    }
    TRIDENT_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0, "matmul (CUDA): cuBLASLt has no algorithm for ", dt, " [", m,
                  " x ", k, "] @ [", k, " x ", n, "] (column-major, batch ", batch, ", lda ", A.ld, ", ldb ", B.ld,
                  ", transposed ", A.trans, "/", B.trans, "): status ", static_cast<int>(st));
    plan->algo = result.algo;
    slot = std::move(plan);
  } else {
    if (bias != nullptr) {
      TRIDENT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(slot->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (gelu_aux != nullptr) {
      TRIDENT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(slot->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &gelu_aux,
                                                          sizeof(gelu_aux)));
    }
  }
  const float alpha = 1.f, beta = 0.f;
  // The workspace is an ordinary allocation on this stream: the caching allocator hands the same
  // block back next time, and no other stream can reuse it while this GEMM runs.
  const Tensor ws = empty({static_cast<int64_t>(kWorkspaceBytes)}, TensorOptions(kU8).device(Device::cuda(device)));
  TRIDENT_CUBLAS_CHECK(cublasLtMatmul(handle, slot->desc, &alpha, A.ptr, slot->a, B.ptr, slot->b, &beta, C, slot->c, C,
                                      slot->c, &slot->algo, ws.data_ptr(), kWorkspaceBytes,
                                      current_stream(device).handle()));
  return true;
}

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const int64_t m = a_in.size(-2), k = a_in.size(-1), n = b_in.size(-1);
  const Shape abatch(a_in.sizes().begin(), a_in.sizes().end() - 2), bbatch(b_in.sizes().begin(), b_in.sizes().end() - 2);
  const Shape batch = broadcast_shapes(abatch, bbatch, "matmul");
  const int64_t nbatch = shape_numel(batch);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  const int device = a_in.device().index;
  DeviceGuard g(device);
  if (nbatch == 0 || m == 0 || n == 0) return empty(out_shape, TensorOptions(a_in.dtype()).device(a_in.device()));
  if (k == 0) return zeros(out_shape, TensorOptions(a_in.dtype()).device(a_in.device()));

  const auto expanded = [&](const Tensor& x, int64_t r, int64_t c) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return x.sizes() == s ? x : expand(x, s);
  };
  Tensor a = expanded(a_in, m, k), b = expanded(b_in, k, n);
  const size_t nb = batch.size();
  const auto batch_strides = [&](const Tensor& x) { return Shape(x.strides().begin(), x.strides().begin() + nb); };

  // A batch against one shared right operand ([B, T, C] @ [C, N]) is one tall GEMM when a's
  // batch dims fold into its rows (the common x @ W).
  int64_t sb = 0, sa = 0;
  if (nbatch > 1 && batch_stride_of(batch, batch_strides(b), sb) && sb == 0 && a.stride(-1) == 1 &&
      batch_stride_of(batch, batch_strides(a), sa) && sa == m * a.stride(-2) && a.stride(-2) >= k) {
    Operand A, B;
    // The one matrix every batch shares: b's first batch entry. Not reshape(b_in, ...): b_in
    // may itself be an expanded view ([4, k, n] with batch stride 0), whose numel is not k * n.
    Tensor b2 = b.as_strided({k, n}, {b.stride(-2), b.stride(-1)}, b.storage_offset());
    if (!as_transposed(k, n, b2.stride(0), b2.stride(1), A)) {
      b2 = b2.contiguous();
      as_transposed(k, n, b2.stride(0), b2.stride(1), A);
    }
    A.ptr = b2.data_ptr();
    B.ptr = a.data_ptr();
    as_transposed(nbatch * m, k, a.stride(-2), 1, B);
    Tensor out = empty(out_shape, TensorOptions(a.dtype()).device(a.device()));
    gemm(device, a.dtype(), n, nbatch * m, k, A, B, out.data_ptr(), 1, nullptr);
    return out;
  }

  // Otherwise a strided batch: each operand's batch dims must walk with one stride, and a
  // broadcast operand (stride 0 along a dim that is not 1) is materialized.
  const auto prepare = [&](Tensor& x, int64_t r, int64_t c, Operand& op) {
    int64_t s = 0;
    bool ok = batch_stride_of(batch, batch_strides(x), s) && (nbatch == 1 || s != 0) &&
              as_transposed(r, c, x.stride(-2), x.stride(-1), op);
    if (!ok) {
      x = x.contiguous();
      batch_stride_of(batch, batch_strides(x), s);
      as_transposed(r, c, x.stride(-2), x.stride(-1), op);
    }
    op.ptr = x.data_ptr();
    op.batch_stride = s;
  };
  Operand A, B;
  prepare(b, k, n, A);  // out^T = b^T a^T
  prepare(a, m, k, B);
  Tensor out = empty(out_shape, TensorOptions(a.dtype()).device(a.device()));
  gemm(device, a.dtype(), n, m, k, A, B, out.data_ptr(), nbatch, nullptr);
  return out;
}

namespace {

// linear, and with `pre` (not null) the fused GELU: *pre gets the value before GELU; an
// undefined result when cuBLASLt has no fused-GELU algorithm for these operands (gemm).
Tensor linear_impl(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* pre) {
  const int64_t in = w.size(1), out_f = w.size(0);
  Shape out_shape(x.sizes().begin(), x.sizes().end() - 1);
  out_shape.push_back(out_f);
  const int device = x.device().index;
  DeviceGuard g(device);
  Tensor out = empty(out_shape, TensorOptions(x.dtype()).device(x.device()));
  const int64_t rows = out.numel() / std::max<int64_t>(1, out_f);
  if (out.numel() == 0) return out;
  if (in == 0) {
    if (b.defined()) return expand(b, out_shape).contiguous();
    return zeros(out_shape, TensorOptions(x.dtype()).device(x.device()));
  }
  Tensor x2 = reshape(x, {rows, in});
  Operand A, B;
  // out^T [out_f, rows] = w [out_f, in] @ x^T [in, rows]; w is (w^T)^T.
  Tensor wv = w;
  if (!as_transposed(in, out_f, wv.stride(1), wv.stride(0), A)) {
    wv = w.contiguous();
    as_transposed(in, out_f, wv.stride(1), wv.stride(0), A);
  }
  A.ptr = wv.data_ptr();
  if (!as_transposed(rows, in, x2.stride(0), x2.stride(1), B)) {
    x2 = x2.contiguous();
    as_transposed(rows, in, x2.stride(0), x2.stride(1), B);
  }
  B.ptr = x2.data_ptr();
  Tensor bias = b.defined() ? b.contiguous() : Tensor();
  if (pre != nullptr) *pre = empty(out_shape, TensorOptions(x.dtype()).device(x.device()));
  if (!gemm(device, x.dtype(), out_f, rows, in, A, B, out.data_ptr(), 1, bias.defined() ? bias.data_ptr() : nullptr,
            pre != nullptr ? pre->data_ptr() : nullptr))
    return Tensor();
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) { return linear_impl(x, w, b, nullptr); }

bool linear_gelu_tanh(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out, Tensor& pre) {
  // The aux matrix's leading dimension (out_features) must divide by 8; empty products and a
  // zero inner size have no GEMM to fuse into.
  // f32 keeps the two kernels: the fusion is for the half-precision training path.
  if (x.dtype() == DType::F32 || w.size(0) % 8 != 0 || w.size(1) == 0 || x.numel() == 0) return false;
  out = linear_impl(x, w, b, &pre);
  return out.defined();
}

}  // namespace trident::cuda
