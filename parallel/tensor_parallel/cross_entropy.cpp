#include "parallel/tensor_parallel/cross_entropy.h"

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/compare.h"
#include "ops/index.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/unary.h"
#include "parallel/tensor_parallel/mappings.h"

namespace trident::parallel::tp {

using autograd::TensorList;

namespace {

struct VocabParallelCrossEntropy : autograd::Function<VocabParallelCrossEntropy> {
  static constexpr const char* name = "VocabParallelCrossEntropy";

  static Tensor forward(FunctionCtx& ctx, const Tensor& logits, const Tensor& targets, const CommPtr& g, int64_t ignore_index,
                        Reduction reduction) {
    const int64_t N = logits.size(0), Vl = logits.size(1), start = g->rank() * Vl;
    // Row max over the whole vocabulary: shifts every rank's exponentials alike.
    Tensor m = amax(logits, {1}).contiguous().clone();
    g->all_reduce(m, comm::ReduceOp::Max).wait();
    const Tensor shifted = sub(logits, unsqueeze(m, 1));
    const Tensor ignored = eq(targets, static_cast<double>(ignore_index));
    const Tensor local_t = sub(targets, static_cast<double>(start));
    const Tensor mine = logical_and(logical_and(ge(local_t, 0.0), lt(local_t, static_cast<double>(Vl))), logical_not(ignored));
    const Tensor idx = unsqueeze(masked_fill(local_t, logical_not(mine), 0.0), 1);  // [N, 1], valid everywhere
    Tensor predicted = where(mine, squeeze(gather(shifted, 1, idx), 1), 0.0).contiguous().clone();
    const Tensor e = exp(shifted);
    Tensor sum_exp = sum(e, {1}).contiguous().clone();
    g->all_reduce(predicted).wait();
    g->all_reduce(sum_exp).wait();
    const Tensor loss = masked_fill(sub(log(sum_exp), predicted), ignored, 0.0);  // [N]
    const double count = static_cast<double>(N) - sum(ignored.to(DType::F64)).item<double>();
    // The logits rather than their exponentials (the same memory): a create_graph backward needs
    // the softmax as a function of them (NOTE [Tensor-parallel regions and higher-order gradients]).
    ctx.save_for_backward({logits, m, sum_exp, idx, mine, ignored});
    ctx.set_differentiable_backward();
    ctx.save("reduction", reduction);
    ctx.save("group", g);
    ctx.save("count", count);
    if (reduction == Reduction::None) return loss;
    const Tensor total = sum(loss);
    return reduction == Reduction::Sum ? total : div(total, count);
  }

  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    const TensorList s = ctx.saved_tensors();
    const Tensor &logits = s[0], &m = s[1], &idx = s[3], &mine = s[4], &ignored = s[5];
    // Recorded (a create_graph backward), the sum over the vocabulary is a function of the logits
    // and a true sum over the ranks, all-reduced forward and backward, since each rank's softmax
    // uses it differently; otherwise the forward's sum (m: a constant shift either way).
    const CommPtr& group = ctx.get<CommPtr>("group");
    const Tensor sum_exp = autograd::GradMode::is_enabled()
                               ? reduce_from_region(copy_to_region(sum(exp(sub(logits, unsqueeze(m, 1))), {1}), group), group)
                               : s[2];
    // The softmax on this rank's columns in one exponential, minus onehot(target) where this rank
    // owns the target (one value per row), then each row's factor: 0 where the target is ignored,
    // the incoming gradient (over the count for a mean) elsewhere.
    Tensor g = exp(sub(logits, unsqueeze(add(m, log(sum_exp)), 1)));
    g = scatter_add(g, 1, idx, unsqueeze(neg(mine.to(g.dtype())), 1));
    const Tensor valid = logical_not(ignored).to(g.dtype());
    const auto reduction = ctx.get<Reduction>("reduction");
    Tensor row = mul(valid, grads[0]);  // [N] x [N] or [N] x scalar
    if (reduction == Reduction::Mean) row = div(row, ctx.get<double>("count"));
    return {mul(g, unsqueeze(row, 1)), Tensor()};
  }
};

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const CommPtr& group, int64_t ignore_index,
                                    Reduction reduction) {
  TRIDENT_CHECK(group != nullptr, "vocab_parallel_cross_entropy: no tensor-parallel group");
  TRIDENT_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
                "vocab_parallel_cross_entropy: expected logits [N, V / tp] and targets [N], got ", logits.sizes(), " and ",
                targets.sizes());
  TRIDENT_CHECK(targets.dtype() == DType::I64, "vocab_parallel_cross_entropy: targets must be i64, got ", targets.dtype());
  TRIDENT_CHECK(is_floating(logits.dtype()), "vocab_parallel_cross_entropy: logits must be floating, got ", logits.dtype());
  const int64_t V = logits.size(1) * group->size();
  // Every rank checks the same targets, so a bad one fails everywhere before any collective.
  const Tensor valid = logical_or(eq(targets, static_cast<double>(ignore_index)),
                                  logical_and(ge(targets, 0.0), lt(targets, static_cast<double>(V))));
  TRIDENT_CHECK(sum(logical_not(valid).to(DType::I64)).item<int64_t>() == 0, "vocab_parallel_cross_entropy: a target is outside [0, ",
                V, ") and not ignore_index ", ignore_index);
  return VocabParallelCrossEntropy::apply(logits, targets, group, ignore_index, reduction);
}

}  // namespace trident::parallel::tp
