#include "ops/linalg.h"

#include "ops/arith.h"
#include "ops/autocast.h"
#include "ops/common.h"
#include "ops/cpu/linalg.h"
#include "ops/cpu/unary.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/linalg.h"
#include "ops/cuda/unary.h"
#endif
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/unary.h"

namespace trident {

using namespace ops_detail;

namespace {

// Both operands have >= 2 dims.
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  Tensor out = TRIDENT_KERNEL(matmul)(a, b);
  if (autograd::any_requires_grad({a, b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    autograd::record("MatmulBackward", {a, b}, out,
                     [sa = gb ? SavedTensor(a) : SavedTensor(), sb = ga ? SavedTensor(b) : SavedTensor(), za = a.sizes(),
                      zb = b.sizes()](const TensorList& g) {
                       TensorList r(2);
                       if (sb.defined()) r[0] = sum_to(matmul_nd(g[0], transpose(sb.unpack(), -1, -2)), za);
                       if (sa.defined()) r[1] = sum_to(matmul_nd(transpose(sa.unpack(), -1, -2), g[0]), zb);
                       return r;
                     }, kDifferentiable);
  }
  return out;
}

void check_matmul(const char* op, const Tensor& a, const Tensor& b) {
  check_floating_pair(op, a, "first operand", b, "second operand");
  TRIDENT_CHECK(a.dim() >= 1 && b.dim() >= 1, op, ": both operands need at least 1 dim, got shapes ", a.sizes(), " and ",
                b.sizes());
  const int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  TRIDENT_CHECK(ka == kb, op, ": shapes ", a.sizes(), " and ", b.sizes(), " cannot be multiplied (inner sizes ", ka,
                " and ", kb, " differ)");
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return matmul(autocast::lower(a), autocast::lower(b));
  }
  check_matmul("matmul", a, b);
  if (a.dim() == 1 && b.dim() == 1) return reshape(matmul_nd(unsqueeze(a, 0), unsqueeze(b, 1)), {});
  if (a.dim() == 1) return squeeze(matmul_nd(unsqueeze(a, 0), b), -2);
  if (b.dim() == 1) return squeeze(matmul_nd(a, unsqueeze(b, 1)), -1);
  return matmul_nd(a, b);
}

Tensor mm(const Tensor& a, const Tensor& b) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return mm(autocast::lower(a), autocast::lower(b));
  }
  check_matmul("mm", a, b);
  TRIDENT_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected two 2-D tensors, got shapes ", a.sizes(), " and ", b.sizes());
  return matmul_nd(a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return bmm(autocast::lower(a), autocast::lower(b));
  }
  check_matmul("bmm", a, b);
  TRIDENT_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected two 3-D tensors, got shapes ", a.sizes(), " and ", b.sizes());
  TRIDENT_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: ", a.sizes(), " and ", b.sizes());
  return matmul_nd(a, b);
}

namespace {

void check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
  check_floating_pair(op, x, "input", w, "weight");
  TRIDENT_CHECK(w.dim() == 2, op, ": weight must be [out_features, in_features], got shape ", w.sizes());
  TRIDENT_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), op, ": input shape ", x.sizes(), " does not end in in_features = ",
                w.size(1), " of weight shape ", w.sizes());
  if (b.defined()) {
    check_same_dtype(op, x, b);
    check_same_device(op, x, b);
    TRIDENT_CHECK(b.dim() == 1 && b.size(0) == w.size(0), op, ": bias shape ", b.sizes(), " does not match out_features = ",
                  w.size(0), " of weight shape ", w.sizes());
  }
}

// Whether w [out, in] is the transpose of a contiguous [in, out] matrix (Hugging Face's Conv1D
// layout, as GPT-2 passes it): its gradient is then computed in that layout (NOTE [Casts keep
// the layout]).
bool transposed_layout(const Tensor& w) {
  return w.dim() == 2 && w.size(0) > 1 && w.size(1) > 1 && w.stride(0) == 1 && w.stride(1) == w.size(0);
}

// The gradients of x W^T + b from the gradient g of its output: [dx, dW, db], each only where
// its saved operand says it is wanted; dW laid out as W when `w_transposed` (transposed_layout).
TensorList linear_backward(const Tensor& g, const SavedTensor& sx, const SavedTensor& sw, bool has_b, const Shape& xs,
                           bool w_transposed) {
  const int64_t out_f = g.size(-1);
  int64_t rows = 1;  // counted, not inferred: reshape cannot infer -1 beside a 0 (no features)
  for (size_t d = 0; d + 1 < xs.size(); ++d) rows *= xs[d];
  const Tensor g2 = reshape(g, {rows, out_f});
  TensorList r(3);
  if (sw.defined()) r[0] = reshape(matmul(g2, sw.unpack()), xs);
  if (sx.defined()) {
    const Tensor x = sx.unpack();
    const Tensor x2 = reshape(x, {rows, x.size(-1)});
    r[1] = w_transposed ? transpose(matmul(transpose(x2, 0, 1), g2), 0, 1) : matmul(transpose(g2, 0, 1), x2);
  }
  if (has_b) r[2] = sum(g2, {0});
  return r;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return linear(autocast::lower(x), autocast::lower(w), autocast::lower(b));
  }
  check_linear("linear", x, w, b);
  Tensor out = TRIDENT_KERNEL(linear)(x, w, b);
  if (autograd::any_requires_grad({x, w, b})) {
    const bool gx = x.requires_grad(), gw = w.requires_grad();
    autograd::record("LinearBackward", {x, w, b}, out,
                     [sx = gw ? SavedTensor(x) : SavedTensor(), sw = gx ? SavedTensor(w) : SavedTensor(), has_b = b.defined(),
                      xs = x.sizes(), wt = transposed_layout(w)](const TensorList& g) {
                       return linear_backward(g[0], sx, sw, has_b, xs, wt);
                     },
                     kDifferentiable);
  }
  return out;
}

Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b, GeluApproximation approximate) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]: as linear; GELU then runs on its half-precision output
    autocast::Suspend off;
    return linear_gelu(autocast::lower(x), autocast::lower(w), autocast::lower(b), approximate);
  }
  check_linear("linear_gelu", x, w, b);
  const cpu::UnaryOp op = approximate == GeluApproximation::Tanh ? cpu::UnaryOp::GeluTanh : cpu::UnaryOp::Gelu;
  const Tensor xd = x.detach(), wd = w.detach(), bd = b.defined() ? b.detach() : Tensor();
  Tensor out, pre;
  bool fused = false;
#if TRIDENT_HAVE_CUDA
  if (x.device().is_cuda() && op == cpu::UnaryOp::GeluTanh) {
    profiler::Scope scope("linear_gelu_tanh", x.device().index);
    fused = cuda::linear_gelu_tanh(xd, wd, bd, out, pre);
  }
#endif
  if (!fused) {
    pre = TRIDENT_KERNEL(linear)(xd, wd, bd);
    out = TRIDENT_KERNEL(unary)(op, pre);
  }
  if (autograd::any_requires_grad({x, w, b})) {
    const bool gx = x.requires_grad(), gw = w.requires_grad();
    // x and w are saved whichever needs a gradient: a create_graph backward recomputes the
    // pre-activation from them (NOTE [Higher-order gradients]).
    autograd::record("LinearGeluBackward", {x, w, b}, out,
                     [sx = SavedTensor(x), sw = SavedTensor(w), sb = SavedTensor(b), gx, gw, xs = x.sizes(), op, approximate,
                      pre, wt = transposed_layout(w)](const TensorList& g) {
                       const SavedTensor none;
                       if (recording_backward()) {
                         const Tensor p = linear(sx.unpack(), sw.unpack(), sb.unpack());
                         return linear_backward(mul(g[0], gelu_derivative(p, approximate)), gw ? sx : none, gx ? sw : none,
                                                sb.defined(), xs, wt);
                       }
                       return linear_backward(TRIDENT_KERNEL(unary_backward)(op, g[0], pre), gw ? sx : none, gx ? sw : none,
                                              sb.defined(), xs, wt);
                     }, kDifferentiable);
  }
  return out;
}

#if TRIDENT_HAVE_CUDA
void set_matmul_allow_tf32(bool allow) { cuda::set_allow_tf32(allow); }
bool matmul_allow_tf32() { return cuda::allow_tf32(); }
#else
void set_matmul_allow_tf32(bool) {}
bool matmul_allow_tf32() { return false; }
#endif

}  // namespace trident
