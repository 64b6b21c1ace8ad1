#include "ops/attention.h"

#include <cmath>

#include "core/factory.h"
#include "ops/arith.h"
#include "ops/autocast.h"
#include "ops/common.h"
#include "ops/compare.h"
#include "ops/linalg.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/softmax.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/attention.h"
#endif

namespace trident {

using namespace ops_detail;

namespace {

// x [..., T, D] as [BH, T, D] with unit inner stride: a view when the leading dims fold. On the
// CPU a [B, H, T, D] view whose B and H do not fold (heads between the positions: NOTE [Attention
// in the heads' layout] in ops/cpu/attention_internal.h) stays as it is, 4-D.
Tensor as_bhtd(const Tensor& x, int64_t bh) {
  const Shape target{bh, x.size(-2), x.size(-1)};
  if (x.stride(-1) == 1 || x.size(-1) <= 1) {
    if (auto st = view_strides(x.sizes(), x.strides(), target)) return x.as_strided(target, *st, x.storage_offset());
    if (x.dim() == 4 && x.device().is_cpu()) return x;
  }
  const Tensor c = x.contiguous();
  return c.as_strided(target, contiguous_strides(target), c.storage_offset());
}

// The dropout factors of the kernels' mask as a tensor [BH, Tq, Tk]: 1 / (1 - p) where the
// element is kept, 0 where dropped, drawn as the kernels draw them (ops/attention.h: element
// (row r, key j) of batch-head b is Philox index (b Tq + r) Tk + j; kept when its uniform is at
// least p), on the host and then moved to the device.
Tensor dropout_factors(const cpu::AttentionParams& p, int64_t bh, int64_t Tq, int64_t Tk, const Tensor& like) {
  Tensor m = empty({bh, Tq, Tk}, TensorOptions(DType::F64));
  double* d = m.data<double>();
  const double scale = 1.0 / (1.0 - p.dropout_p);
  const uint64_t n = static_cast<uint64_t>(bh * Tq * Tk);
  float u[4];
  for (uint64_t i = 0; i < n; ++i) {
    if (i % 4 == 0) philox::uniform_f32_block(p.rng.seed, p.rng.offset, i / 4, u);
    d[i] = u[i % 4] >= static_cast<float>(p.dropout_p) ? scale : 0.0;
  }
  return m.to(like.dtype()).to(like.device());
}

// NOTE [Higher-order gradients]: attention's gradients with recorded ops, for a create_graph
// backward: the probabilities P are recomputed from q and k, and with dropout the kernels' mask
// is drawn again as factors M (0 or 1 / (1 - p), dropout_factors), the output being (P M) V:
//   dV = (P M)^T dO, dP = (dO V^T) M, dS = P (dP - rowsum(dP P)), dQ = scale dS K,
//   dK = scale dS^T Q,
// and a floating mask's gradient is dS. Rows that see no key keep zero probabilities and
// gradients, as the kernels do. This path holds the T x T matrix; it is for differentiating
// again, not for speed.
TensorList attention_grads_recorded(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask_b,
                                    const Tensor& mask, bool mask_grad, const cpu::AttentionParams& p,
                                    const Shape& score_shape) {
  const int64_t Tq = q.size(-2), Tk = k.size(-2);
  const int64_t bh = shape_numel(Shape(q.sizes().begin(), q.sizes().end() - 2));
  const Tensor q3 = reshape(q, {bh, Tq, q.size(-1)}), k3 = reshape(k, {bh, Tk, k.size(-1)}),
               v3 = reshape(v, {bh, Tk, v.size(-1)});
  Tensor s = mul(matmul(q3, transpose(k3, 1, 2)), p.scale);
  if (mask_b.defined()) {
    if (mask_b.dtype() == DType::Bool) {
      s = masked_fill(s, logical_not(reshape(mask_b, {bh, Tq, Tk})), -INFINITY);
    } else {
      s = add(s, reshape(mask_grad ? expand(mask, score_shape) : mask_b, {bh, Tq, Tk}));
    }
  }
  if (p.causal) {
    const TensorOptions i64 = TensorOptions(kI64).device(q.device());
    s = masked_fill(s, gt(unsqueeze(arange(static_cast<double>(Tk), i64), 0), unsqueeze(arange(static_cast<double>(Tq), i64), 1)),
                    -INFINITY);
  }
  const Tensor dead = eq(amax(s.detach(), {2}, /*keepdim=*/true), -INFINITY);  // rows that see no key
  const Tensor prob = masked_fill(softmax(masked_fill(s, dead, 0.0), 2), dead, 0.0);
  const Tensor go = reshape(g, {bh, Tq, v.size(-1)});
  const Tensor drop = p.dropout_p > 0 ? dropout_factors(p, bh, Tq, Tk, s) : Tensor();
  const Tensor dv = matmul(transpose(drop.defined() ? mul(prob, drop) : prob, 1, 2), go);
  Tensor dp = matmul(go, transpose(v3, 1, 2));
  if (drop.defined()) dp = mul(dp, drop);
  const Tensor ds = mul(prob, sub(dp, sum(mul(dp, prob), {2}, /*keepdim=*/true)));
  TensorList r(4);
  r[0] = reshape(mul(matmul(ds, k3), p.scale), q.sizes());
  r[1] = reshape(mul(matmul(transpose(ds, 1, 2), q3), p.scale), k.sizes());
  r[2] = reshape(dv, v.sizes());
  if (mask_grad) r[3] = sum_to(reshape(ds, score_shape), mask.sizes());
  return r;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opts) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    AttentionOptions o = opts;
    if (o.attn_mask.defined() && o.attn_mask.dtype() != DType::Bool) o.attn_mask = autocast::lower(o.attn_mask);
    return scaled_dot_product_attention(autocast::lower(q), autocast::lower(k), autocast::lower(v), o);
  }
  const char* op = "scaled_dot_product_attention";
  check_floating_pair(op, q, "query", k, "key");
  check_defined(op, v, "value");
  check_same_dtype(op, q, v);
  check_same_device(op, q, v);
  TRIDENT_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op, ": query, key and value need the same rank >= 2, got ",
                q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  const Shape lead(q.sizes().begin(), q.sizes().end() - 2);
  TRIDENT_CHECK(Shape(k.sizes().begin(), k.sizes().end() - 2) == lead && Shape(v.sizes().begin(), v.sizes().end() - 2) == lead,
                op, ": query ", q.sizes(), ", key ", k.sizes(), " and value ", v.sizes(), " must share their leading dims");
  TRIDENT_CHECK(k.size(-1) == q.size(-1), op, ": key's last dim ", k.size(-1), " (shape ", k.sizes(),
                ") must equal query's ", q.size(-1), " (shape ", q.sizes(), ")");
  TRIDENT_CHECK(v.size(-2) == k.size(-2), op, ": value has ", v.size(-2), " positions (shape ", v.sizes(), ") but key has ",
                k.size(-2), " (shape ", k.sizes(), ")");
  TRIDENT_CHECK(opts.dropout_p >= 0 && opts.dropout_p < 1, op, ": dropout_p must be in [0, 1), got ", opts.dropout_p);
  const Tensor& mask = opts.attn_mask;
  if (mask.defined()) {
    check_same_device(op, q, mask);
    TRIDENT_CHECK(mask.dtype() == DType::Bool || mask.dtype() == q.dtype(), op, ": attn_mask must be bool or ", q.dtype(),
                  " like the query, got ", mask.dtype());
  }
  // The CUDA kernels read f16 and bf16 as they are and accumulate in f32; so does the CPU for
  // bf16 where it has a bf16 GEMM kernel (NOTE [bf16 attention on the CPU]). Otherwise the CPU
  // computes them in f32 (the casts carry the gradients).
  if (is_reduced_float(q.dtype()) && !q.device().is_cuda() &&
      !(q.dtype() == DType::BF16 && cpu::bf16_gemm_kernel() != cpu::Bf16Gemm::None)) {
    AttentionOptions o = opts;
    if (mask.defined() && mask.dtype() != DType::Bool) o.attn_mask = mask.to(DType::F32);
    return scaled_dot_product_attention(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), o).to(q.dtype());
  }

  const int64_t Tq = q.size(-2), Tk = k.size(-2), D = q.size(-1);
  const int64_t bh = shape_numel(lead);
  Shape score_shape = lead;
  score_shape.push_back(Tq);
  score_shape.push_back(Tk);
  Tensor mask_b;
  if (mask.defined()) {
    const Shape full = broadcast_shapes(mask.sizes(), score_shape, op);
    TRIDENT_CHECK(full == score_shape, op, ": attn_mask of shape ", mask.sizes(), " does not broadcast to the scores' shape ",
                  score_shape);
    mask_b = mask.detach().as_strided(score_shape, broadcast_strides(mask.sizes(), mask.strides(), score_shape),
                                      mask.storage_offset());
  }
  cpu::AttentionParams p;
  p.scale = opts.scale.value_or(D > 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0);
  p.dropout_p = opts.dropout_p;
  p.causal = opts.is_causal;
  if (p.dropout_p > 0) {
    Generator& g = opts.generator ? *opts.generator : default_generator();
    p.rng = g.reserve(philox::blocks_for(static_cast<uint64_t>(bh * Tq * Tk), false));
  }
  const Tensor q3 = as_bhtd(q.detach(), bh), k3 = as_bhtd(k.detach(), bh), v3 = as_bhtd(v.detach(), bh);
  Tensor lse;
  Tensor out3 = TRIDENT_KERNEL(attention_forward)(q3, k3, v3, mask_b, p, lse);
  Shape out_shape = lead;
  out_shape.push_back(Tq);
  out_shape.push_back(v.size(-1));
  // [B, H, Tq, Dv] in the heads' layout for such a query, else [BH, Tq, Dv] contiguous.
  Tensor out = out3.dim() == 4 ? out3 : out3.as_strided(out_shape, contiguous_strides(out_shape), 0);

  const bool mask_grad = mask.defined() && mask.requires_grad();
  if (autograd::any_requires_grad({q, k, v, mask})) {
    // q3, k3 and v3 are saved standing for q, k and v, so a create_graph backward differentiates
    // through them (NOTE [Higher-order gradients]); a dropout mask is drawn again from the
    // Philox state the kernels used.
    autograd::record("ScaledDotProductAttentionBackward", {q, k, v, mask_grad ? mask : Tensor()}, out,
                     [sq = SavedTensor(q3, q), sk = SavedTensor(k3, k), sv = SavedTensor(v3, v), sm = SavedTensor(mask_b),
                      smg = mask_grad ? SavedTensor(mask) : SavedTensor(), so = SavedTensor(out3), sl = SavedTensor(lse), p,
                      mask_grad, qs = q.sizes(), ks = k.sizes(), vs = v.sizes(), ms = mask.defined() ? mask.sizes() : Shape{},
                      score_shape](const TensorList& g) {
                       if (recording_backward())
                         return attention_grads_recorded(g[0], sq.unpack(), sk.unpack(), sv.unpack(), sm.unpack(), smg.unpack(),
                                                         mask_grad, p, score_shape);
                       const Tensor go = as_bhtd(g[0], shape_numel(Shape(qs.begin(), qs.end() - 2)));
                       cpu::AttentionGrads r = TRIDENT_KERNEL(attention_backward)(
                           go, sq.unpack(), sk.unpack(), sv.unpack(), sm.unpack(), so.unpack(), sl.unpack(), p, mask_grad);
                       TensorList out(4);
                       out[0] = reshape(r.dq, qs);
                       out[1] = reshape(r.dk, ks);
                       out[2] = reshape(r.dv, vs);
                       if (mask_grad) out[3] = sum_to(reshape(r.dmask, score_shape), ms);
                       return out;
                     },
                     kDifferentiable);
  }
  return out;
}

}  // namespace trident
