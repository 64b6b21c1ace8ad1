#include "ops/loss.h"

#include "core/factory.h"
#include "ops/arith.h"
#include "ops/autocast.h"
#include "ops/common.h"
#include "ops/compare.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/softmax.h"
#include "ops/unary.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/loss.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/loss.h"
#endif

namespace trident {

using namespace ops_detail;

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
  }
  return "?";
}

namespace {

// ---- the class losses (cross_entropy, nll_loss): shapes, targets, reduction ----

std::string position_str(int64_t flat, const Shape& sizes) {
  Shape idx(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    idx[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  return detail::str(idx);
}

// Checks input, target and weight of a class loss and returns the [n, classes, inner] view.
cpu::ClassLossArgs class_loss_args(const char* op, const Tensor& input, const Tensor& target, const Tensor& weight,
                                   int64_t ignore_index) {
  check_defined(op, input, "input");
  check_defined(op, target, "target");
  check_device(op, input);
  check_same_device(op, input, target);
  check_floating(op, input);
  TRIDENT_CHECK(target.dtype() == DType::I64, op, ": target must be an i64 tensor of class indices, got ", target.dtype(),
                " (class probabilities as targets are not supported)");
  TRIDENT_CHECK(input.dim() >= 1, op, ": input must have a class dim, got a 0-dim tensor");
  cpu::ClassLossArgs a;
  Shape expect;
  if (input.dim() == 1) {
    a.classes = input.size(0);
  } else {
    a.n = input.size(0);
    a.classes = input.size(1);
    expect.push_back(a.n);
    for (int64_t d = 2; d < input.dim(); ++d) {
      a.inner *= input.size(d);
      expect.push_back(input.size(d));
    }
  }
  if (input.dim() == 1) a.n = 1;
  TRIDENT_CHECK(target.sizes() == expect, op, ": expected target of shape ", expect, " for input of shape ", input.sizes(),
                ", got target of shape ", target.sizes());
  if (weight.defined()) {
    check_same_device(op, input, weight);
    TRIDENT_CHECK(weight.dim() == 1 && weight.size(0) == a.classes, op, ": weight of shape ", weight.sizes(),
                  " does not match the ", a.classes, " classes of input of shape ", input.sizes());
    TRIDENT_CHECK(weight.dtype() == input.dtype(), op, ": weight has dtype ", weight.dtype(), " but input has ",
                  input.dtype());
    TRIDENT_CHECK(!autograd::any_requires_grad({weight}), op,
                  ": weight requires grad, but class weights are constants here (no derivative); detach() it");
  }
  a.ignore_index = ignore_index;
  // Every target must name a class or be ignore_index; the first bad one is reported (PyTorch:
  // "Target 7 is out of bounds."). On a GPU this reads a host value back (a synchronization).
  const int64_t bad = TRIDENT_KERNEL(first_invalid_target)(target, a.classes, ignore_index);
  if (bad >= 0) {
    const Tensor tc = target.contiguous();
    const int64_t t = tc.as_strided({1}, {1}, tc.storage_offset() + bad).item<int64_t>();
    TRIDENT_FAIL(op, ": target ", t, " at position ", position_str(bad, target.sizes()), " is out of range for ",
                 a.classes, " classes (expected a class index in [0, ", a.classes, ") or ignore_index ", ignore_index,
                 ")");
  }
  return a;
}

// The reduced loss from per-position losses (already computed in f64 sums).
Tensor reduce_class_loss(const Tensor& per_position, double loss_sum, double total_weight, Reduction r,
                         const Shape& target_shape, DType dtype) {
  const TensorOptions on(TensorOptions(dtype).device(per_position.device()));
  switch (r) {
    case Reduction::None: return view(per_position, target_shape).to(dtype);
    case Reduction::Sum: return scalar_tensor(loss_sum, on);
    case Reduction::Mean: return scalar_tensor(loss_sum / total_weight, on);  // 0 / 0 = NaN when nothing counts
  }
  return {};
}

// NOTE [Higher-order gradients]: cross_entropy's gradient as a recorded formula. Per position
// (valid = not ignored, w_t = weight of the target, eps = label smoothing over C classes, G = g
// times the reduction's scale):
//   d loss / d x = G (P A - (1 - eps) w_t valid onehot(t) - eps / C w valid),
//   A = ((1 - eps) w_t + eps / C sum_c w_c) valid,
// with P = softmax(x) recorded and the rest constants; the one-hot term is a scatter_add of one
// value per position, so nothing the size of the logits but P and the result is made.
Tensor cross_entropy_grad_recorded(const Tensor& g, bool per_position, double scale, const Tensor& x, const Tensor& target,
                                   const Tensor& weight, const cpu::ClassLossArgs& args) {
  const DType dt = x.dtype();
  const int64_t cdim = x.dim() == 1 ? 0 : 1, classes = args.classes;
  const double eps = args.label_smoothing, c = static_cast<double>(classes);
  const Tensor t = target.detach().to(kI64);
  const Tensor ignored = eq(t, static_cast<double>(args.ignore_index));
  const Tensor valid = logical_not(ignored).to(dt);
  const Tensor ts = masked_fill(t, ignored, 0.0);
  const Tensor wv = weight.defined() ? weight.detach().to(dt) : ones({classes}, TensorOptions(dt).device(x.device()));
  const Tensor w_t = reshape(index_select(wv, 0, reshape(ts, {-1})), t.sizes());
  const double sum_w = sum(wv.to(kF64)).item<double>();
  const Tensor gpos = mul(per_position ? g : expand(g, t.sizes()), scale);  // G per position
  const Tensor a = mul(add(mul(w_t, 1 - eps), eps / c * sum_w), valid);
  Tensor r = mul(softmax(x, cdim), unsqueeze(mul(a, gpos), cdim));
  if (eps > 0) {
    Shape wshape(static_cast<size_t>(x.dim()), 1);
    wshape[static_cast<size_t>(cdim)] = classes;
    r = sub(r, mul(reshape(wv, wshape), unsqueeze(mul(mul(valid, gpos), eps / c), cdim)));
  }
  const Tensor at_target = unsqueeze(mul(mul(w_t, valid), mul(gpos, -(1 - eps))), cdim);
  return scatter_add(r, cdim, unsqueeze(ts, cdim), at_target);
}

// d loss / d per-position-loss: g itself (None) or g scaled by 1 (Sum) or 1 / total weight (Mean).
double class_loss_scale(Reduction r, double total_weight) { return r == Reduction::Mean ? 1.0 / total_weight : 1.0; }

// cross_entropy with the reduced loss in `out_dtype`.
Tensor cross_entropy_into(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o, DType out_dtype) {
  const char* op = "cross_entropy";
  cpu::ClassLossArgs args = class_loss_args(op, logits, target, o.weight, o.ignore_index);
  TRIDENT_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
                o.label_smoothing);
  args.label_smoothing = o.label_smoothing;
  const Tensor w = o.weight.defined() ? o.weight.detach() : Tensor();
  cpu::CrossEntropyForward f = TRIDENT_KERNEL(cross_entropy_forward)(logits.detach(), target, w, args);
  Tensor out = reduce_class_loss(f.loss, f.loss_sum, f.total_weight, o.reduction, target.sizes(), out_dtype);
  if (autograd::any_requires_grad({logits})) {
    // Saved: the logits, targets and weights (no copies) and two numbers per position (the row
    // max and log-sum-exp); backward recomputes the softmax from them in one sweep.
    autograd::record("CrossEntropyBackward", {logits}, out,
                     [sx = SavedTensor(logits), st = SavedTensor(target), sw = SavedTensor(w), m = f.row_max,
                      l = f.row_logsum, args, scale = class_loss_scale(o.reduction, f.total_weight),
                      shape = logits.sizes(), dtype = logits.dtype(),
                      per_position = o.reduction == Reduction::None](const TensorList& g) {
                       if (recording_backward()) {  // half logits: the formula in f32, as the widened logits had it
                         const Tensor x = sx.unpack();
                         const Tensor xf = is_reduced_float(x.dtype()) ? x.to(DType::F32) : x;
                         return TensorList{cross_entropy_grad_recorded(g[0].to(xf.dtype()), per_position, scale, xf,
                                                                       st.unpack(), sw.defined() ? sw.unpack() : Tensor(),
                                                                       args).to(dtype)};
                       }
                       const Tensor gx = TRIDENT_KERNEL(cross_entropy_backward)(
                           g[0], scale, sx.unpack(), st.unpack(), sw.defined() ? sw.unpack() : Tensor(), m, l, args);
                       return TensorList{view(gx, shape).to(dtype)};
                     }, kDifferentiable);
  }
  return out;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    // Half logits on the CPU without class weights are read as they are (NOTE [Half-precision
    // cross-entropy rows] in ops/cpu/loss.cpp): the loss in f32 and the gradient in the logits'
    // dtype, the same numbers as widening them first, without two logits-sized copies.
    if (is_reduced_float(logits.dtype()) && logits.device().is_cpu() && !o.weight.defined())
      return cross_entropy_into(logits, target, o, DType::F32);
    return cross_entropy(autocast::widen(logits), target, o);
  }
  return cross_entropy_into(logits, target, o, logits.dtype());
}


namespace {

// linear_cross_entropy on the CPU kernels: hidden [n, C] contiguous, all of one dtype the kernels
// take; the reduced loss in `out_dtype`.
Tensor linear_cross_entropy_fused(const Tensor& hidden, const Tensor& weight, const Tensor& bias, const Tensor& target,
                                  const cpu::LinearCrossEntropyArgs& args, Reduction reduction, DType out_dtype) {
  const Tensor h = hidden.detach().contiguous(), w = weight.detach().contiguous();
  const Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  const Tensor t = target.contiguous();
  cpu::LinearCrossEntropyForward f;
  {
    profiler::Scope scope("linear_cross_entropy_forward");
    f = cpu::linear_cross_entropy_forward(h, w, b, t, args);
  }
  const double count = static_cast<double>(f.count);
  Tensor out = reduce_class_loss(f.loss, f.loss_sum, count, reduction, target.sizes(), out_dtype);
  if (autograd::any_requires_grad({hidden, weight, bias})) {
    // Saved: the inputs (no copies) and two numbers per row; backward recomputes the logits.
    autograd::record(
        "LinearCrossEntropyBackward", {hidden, weight, bias}, out,
        [sh = SavedTensor(hidden), sw = SavedTensor(weight), sb = SavedTensor(bias), st = SavedTensor(t), m = f.row_max,
         l = f.row_logsum, args, scale = class_loss_scale(reduction, count), per_position = reduction == Reduction::None,
         gh = hidden.requires_grad(), gw = weight.requires_grad(),
         gb = bias.defined() && bias.requires_grad()](const TensorList& g) {
          const Tensor hx = sh.unpack(), wx = sw.unpack(), bx = sb.defined() ? sb.unpack() : Tensor();
          if (recording_backward()) {  // NOTE [Higher-order gradients]: the composition's formula, recorded
            const int64_t V = args.vocab, Vp = wx.size(0);
            // An f32 table with bf16 hidden states (autocast) is rounded by a differentiable cast.
            const Tensor wv = narrow(wx, 0, 0, V).to(hx.dtype());
            const Tensor bv = bx.defined() ? narrow(bx, 0, 0, V).to(hx.dtype()) : Tensor();
            Tensor logits = linear(hx, wv, bv);
            if (is_reduced_float(logits.dtype())) logits = logits.to(DType::F32);
            cpu::ClassLossArgs ca;
            ca.n = hx.size(0);
            ca.classes = V;
            ca.ignore_index = args.ignore_index;
            const Tensor gl = cross_entropy_grad_recorded(g[0].to(logits.dtype()), per_position, scale, logits, st.unpack(),
                                                          Tensor(), ca)
                                  .to(hx.dtype());
            auto pad_rows = [&](const Tensor& x) {
              if (Vp == V) return x;
              Shape rest = x.sizes();
              rest[0] = Vp - V;
              return cat({x, zeros(rest, TensorOptions(x.dtype()).device(x.device()))}, 0);
            };
            return TensorList{gh ? matmul(gl, wv) : Tensor(),
                              gw ? pad_rows(matmul(transpose(gl, 0, 1), hx)).to(wx.dtype()) : Tensor(),
                              gb ? pad_rows(sum(gl, {0})).to(bx.dtype()) : Tensor()};
          }
          profiler::Scope scope("linear_cross_entropy_backward");
          cpu::LinearCrossEntropyGrads r = cpu::linear_cross_entropy_backward(
              g[0], scale, hx.contiguous(), wx.contiguous(), bx.defined() ? bx.contiguous() : Tensor(), st.unpack(), m, l,
              args, gh, gw, gb);
          return TensorList{r.hidden, r.weight, r.bias};
        },
        kDifferentiable);
  }
  return out;
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& bias, const Tensor& target,
                            const LinearCrossEntropyOptions& o) {
  const char* op = "linear_cross_entropy";
  check_floating_pair(op, hidden, "hidden", weight, "weight");
  check_defined(op, target, "target");
  check_same_device(op, hidden, target);
  TRIDENT_CHECK(weight.dim() == 2, op, ": weight must be [classes, features], got shape ", weight.sizes());
  TRIDENT_CHECK(hidden.dim() >= 1 && hidden.size(-1) == weight.size(1), op, ": hidden of shape ", hidden.sizes(),
                " does not end in the ", weight.size(1), " features of weight of shape ", weight.sizes());
  if (bias.defined()) {
    check_same_device(op, hidden, bias);
    TRIDENT_CHECK(bias.dtype() == hidden.dtype(), op, ": bias has dtype ", bias.dtype(), " but hidden has ", hidden.dtype());
    TRIDENT_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), op, ": bias of shape ", bias.sizes(),
                  " does not match weight of shape ", weight.sizes());
  }
  const int64_t Vp = weight.size(0), C = weight.size(1);
  const int64_t V = o.vocab_size < 0 ? Vp : o.vocab_size;
  TRIDENT_CHECK(V >= 1 && V <= Vp, op, ": vocab_size ", o.vocab_size, " must be in [1, ", Vp,
                "] for weight of shape ", weight.sizes(), " (or -1: every row)");
  const Shape lead(hidden.sizes().begin(), hidden.sizes().end() - 1);
  TRIDENT_CHECK(target.dtype() == DType::I64, op, ": target must be an i64 tensor of class indices, got ", target.dtype());
  TRIDENT_CHECK(target.sizes() == lead, op, ": expected target of shape ", lead, " for hidden of shape ", hidden.sizes(),
                ", got target of shape ", target.sizes());
  int64_t n = 1;
  for (const int64_t d : lead) n *= d;
  const Tensor h2 = reshape(hidden, {n, C}), t1 = reshape(target, {n});
  const Tensor wv = V == Vp ? weight : narrow(weight, 0, 0, V);
  const Tensor bv = !bias.defined() || V == Vp ? bias : narrow(bias, 0, 0, V);
  TRIDENT_CHECK(o.impl != LinearCrossEntropyImpl::Tiled || hidden.device().is_cpu(), op,
                ": the tiled kernels are the CPU's; hidden is on ", hidden.device());
  // The dtype the product runs in (autocast lowers f32 to its half type).
  const DType product_dtype = autocast::is_enabled() && hidden.dtype() == DType::F32 ? autocast::dtype() : hidden.dtype();
  const bool tiled =
      o.impl == LinearCrossEntropyImpl::Tiled ||
      (o.impl == LinearCrossEntropyImpl::Auto && hidden.device().is_cpu() &&
       ((product_dtype == DType::BF16 && cpu::bf16_gemm_kernel() != cpu::Bf16Gemm::None) ||
        !autograd::any_requires_grad({hidden, weight, bias})));
  // The composition, with autocast's policies (as a model's unfused loss).
  if (!tiled) {
    CrossEntropyOptions ce;
    ce.reduction = o.reduction;
    ce.ignore_index = o.ignore_index;
    const Tensor l = cross_entropy(linear(h2, wv, bv), t1, ce);
    return o.reduction == Reduction::None ? reshape(l, lead) : l;
  }
  const int64_t bad = cpu::first_invalid_target(t1, V, o.ignore_index);
  if (bad >= 0) {
    TRIDENT_FAIL(op, ": target ", t1.contiguous().data<int64_t>()[bad], " at position ", position_str(bad, target.sizes()),
                 " is out of range for ", V, " classes (expected a class index in [0, ", V, ") or ignore_index ",
                 o.ignore_index, ")");
  }
  Tensor hc = h2, wc = weight, bc = bias;
  DType out_dtype = hidden.dtype();
  if (autocast::is_enabled()) {  // NOTE [Autocast]: a product; the loss in f32
    autocast::Suspend off;
    hc = autocast::lower(hc);
    // An f32 table (and bias) of a bf16 product on a bf16 GEMM kernel stays f32: the kernels
    // round each tile as they read it and give its gradient as the f32 sums (NOTE [Linear
    // cross-entropy]): no bf16 copy of the table, no cast of its gradient back.
    const bool keep_f32 = hc.dtype() == DType::BF16 && cpu::bf16_gemm_kernel() != cpu::Bf16Gemm::None &&
                          wc.dtype() == DType::F32 && (!bc.defined() || bc.dtype() == DType::F32);
    if (!keep_f32) {
      wc = autocast::lower(wc);
      bc = autocast::lower(bc);
    }
    if (is_reduced_float(hc.dtype())) out_dtype = DType::F32;
  }
  // f16, and bf16 without a bf16 GEMM kernel: in f32 on widened copies (differentiable casts).
  if (hc.dtype() == DType::F16 || (hc.dtype() == DType::BF16 && cpu::bf16_gemm_kernel() == cpu::Bf16Gemm::None)) {
    hc = hc.to(DType::F32);
    wc = wc.to(DType::F32);
    if (bc.defined()) bc = bc.to(DType::F32);
  }
  cpu::LinearCrossEntropyArgs args;
  args.vocab = V;
  args.ignore_index = o.ignore_index;
  const DType compute_out = is_reduced_float(out_dtype) && out_dtype != hc.dtype() ? hc.dtype() : out_dtype;
  Tensor l = linear_cross_entropy_fused(hc, wc, bc, t1, args, o.reduction, compute_out);
  if (l.dtype() != out_dtype) l = l.to(out_dtype);
  return o.reduction == Reduction::None ? reshape(l, lead) : l;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& o) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return nll_loss(autocast::widen(log_probs), target, o);
  }
  const char* op = "nll_loss";
  const cpu::ClassLossArgs args = class_loss_args(op, log_probs, target, o.weight, o.ignore_index);
  const Tensor w = o.weight.defined() ? o.weight.detach() : Tensor();
  cpu::NllLossForward f = TRIDENT_KERNEL(nll_loss_forward)(log_probs.detach(), target, w, args);
  Tensor out = reduce_class_loss(f.loss, f.loss_sum, f.total_weight, o.reduction, target.sizes(), log_probs.dtype());
  if (autograd::any_requires_grad({log_probs})) {
    autograd::record("NllLossBackward", {log_probs}, out,
                     [st = SavedTensor(target), sw = SavedTensor(w), args,
                      scale = class_loss_scale(o.reduction, f.total_weight), shape = log_probs.sizes(),
                      dtype = log_probs.dtype(), per_position = o.reduction == Reduction::None,
                      cdim = log_probs.dim() == 1 ? 0 : 1](const TensorList& g) {
                       // Linear in g with a constant coefficient (NOTE [Higher-order gradients]).
                       const bool rec = recording_backward();
                       const Tensor gx = TRIDENT_KERNEL(nll_loss_backward)(
                           rec ? ones_like(g[0]) : g[0], scale, st.unpack(), sw.defined() ? sw.unpack() : Tensor(), args, dtype);
                       const Tensor r = view(gx, shape).to(dtype);
                       if (rec) return TensorList{mul(per_position ? unsqueeze(g[0], cdim) : g[0], r)};
                       return TensorList{r};
                     }, kDifferentiable);
  }
  return out;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return mse_loss(autocast::widen(input), autocast::widen(target), reduction);
  }
  const char* op = "mse_loss";
  check_floating_pair(op, input, "input", target, "target");
  const Shape shape = broadcast_shapes(input.sizes(), target.sizes(), op);
  const int64_t n = shape_numel(shape);
  Tensor out;
  if (reduction == Reduction::None) {
    out = TRIDENT_KERNEL(squared_error)(input.detach(), target.detach());
  } else {
    // A host number by contract (on a GPU: a synchronization).
    const double s = TRIDENT_KERNEL(squared_error_sum)(expand(input.detach(), shape), expand(target.detach(), shape));
    out = scalar_tensor(reduction == Reduction::Mean ? s / static_cast<double>(n) : s,
                        TensorOptions(input.dtype()).device(input.device()));
  }
  if (autograd::any_requires_grad({input, target})) {
    // d/d input = 2 (input - target) g (/ n for Mean); d/d target is its negative. Both summed
    // back over broadcast dims.
    autograd::record("MseLossBackward", {input, target}, out,
                     [sa = SavedTensor(input), sb = SavedTensor(target), za = input.sizes(), zb = target.sizes(),
                      k = reduction == Reduction::Mean ? 2.0 / static_cast<double>(n) : 2.0](const TensorList& g) {
                       const Tensor d = mul(sub(sa.unpack(), sb.unpack()), mul(g[0], k));
                       return TensorList{sum_to(d, za), sum_to(neg(d), zb)};
                     }, kDifferentiable);
  }
  return out;
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction,
                                        const Tensor& pos_weight) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return binary_cross_entropy_with_logits(autocast::widen(logits), autocast::widen(target), reduction,
                                            autocast::widen(pos_weight));
  }
  const char* op = "binary_cross_entropy_with_logits";
  check_defined(op, logits, "logits");
  check_defined(op, target, "target");
  check_device(op, logits);
  check_floating(op, logits);
  check_same_dtype(op, logits, target);
  check_same_device(op, logits, target);
  TRIDENT_CHECK(target.sizes() == logits.sizes(), op, ": target of shape ", target.sizes(),
                " must have the shape of logits ", logits.sizes());
  if (pos_weight.defined()) {
    check_same_dtype(op, logits, pos_weight);
    check_same_device(op, logits, pos_weight);
    bool fits = pos_weight.dim() <= logits.dim();
    for (int64_t d = 1; fits && d <= pos_weight.dim(); ++d)
      fits = pos_weight.size(-d) == 1 || pos_weight.size(-d) == logits.size(-d);
    TRIDENT_CHECK(fits, op, ": pos_weight of shape ", pos_weight.sizes(), " does not broadcast to the logits' shape ",
                  logits.sizes());
    TRIDENT_CHECK(!autograd::any_requires_grad({pos_weight}), op,
                  ": pos_weight requires grad, but it is a constant here (no derivative); detach() it");
  }
  const Tensor pw = pos_weight.defined() ? pos_weight.detach() : Tensor();
  const Tensor loss = TRIDENT_KERNEL(bce_with_logits)(logits.detach(), target.detach(), pw);
  const int64_t n = logits.numel();
  Tensor out;
  if (reduction == Reduction::None) {
    out = loss.to(logits.dtype());
  } else {
    const double s = sum(loss).item<double>();  // f64 accumulation (NOTE [Accumulation]); f32 on a GPU
    out = scalar_tensor(reduction == Reduction::Mean ? s / static_cast<double>(n) : s,
                        TensorOptions(logits.dtype()).device(logits.device()));
  }
  if (autograd::any_requires_grad({logits, target})) {
    autograd::record("BinaryCrossEntropyWithLogitsBackward", {logits, target}, out,
                     [sx = SavedTensor(logits), sy = SavedTensor(target), sp = SavedTensor(pw),
                      scale = reduction == Reduction::Mean ? 1.0 / static_cast<double>(n) : 1.0,
                      need_x = logits.requires_grad(), need_y = target.requires_grad(),
                      dtype = logits.dtype()](const TensorList& g) {
                       if (recording_backward()) {
                         // NOTE [Higher-order gradients]: l = (1 - y) x + L softplus(-x), L = 1 + (pw - 1) y:
                         // dl/dx = (1 - y) - L sigmoid(-x), dl/dy = -x + (pw - 1) softplus(-x).
                         const Tensor x = sx.unpack(), y = sy.unpack();
                         const Tensor pw = sp.defined() ? sp.unpack() : Tensor();
                         const Tensor gs = mul(g[0], scale);
                         TensorList r(2);
                         if (need_x) {
                           const Tensor big_l = pw.defined() ? add(mul(y, sub(pw, 1.0)), 1.0) : ones_like(x);
                           r[0] = mul(gs, sub(rsub(y, 1.0), mul(big_l, sigmoid(neg(x)))));
                         }
                         if (need_y) {
                           // softplus(-x) = max(-x, 0) + log(1 + exp(-|x|)), stable for large |x|
                           const Tensor sp_neg = add(maximum(neg(x), 0.0), log(add(exp(neg(abs(x))), 1.0)));
                           r[1] = mul(gs, pw.defined() ? add(neg(x), mul(sub(pw, 1.0), sp_neg)) : neg(x));
                         }
                         return r;
                       }
                       auto [gx, gy] = TRIDENT_KERNEL(bce_with_logits_backward)(
                           g[0], scale, sx.unpack(), sy.unpack(), sp.defined() ? sp.unpack() : Tensor(), need_x, need_y);
                       return TensorList{gx.defined() ? gx.to(dtype) : gx, gy.defined() ? gy.to(dtype) : gy};
                     }, kDifferentiable);
  }
  return out;
}

}  // namespace trident
