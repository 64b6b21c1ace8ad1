// LayerNorm and BatchNorm2d (PyTorch's defaults: weight 1, bias 0; batch norm keeps running
// mean and variance as buffers, updated in training with `momentum`, used in evaluation).
#pragma once

#include "nn/module.h"
#include "ops/norm.h"

namespace trident::nn {

class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, DType dtype = DType::F32);
  Tensor forward(const Tensor& x) override;
  // {x + residual, forward(x + residual)} as one op (add_layer_norm, NOTE [Fused residual layer
  // norm] in ops/norm.h): for the residual stream of a pre-LayerNorm transformer.
  virtual AddLayerNorm forward_add(const Tensor& x, const Tensor& residual);
  Shape normalized_shape;
  double eps;
  Tensor weight, bias;

 protected:
  std::string extra_repr() const override;
};

// NOTE [Deferred batch norm]: when a mini-batch runs as M micro-batches (a pipeline), training
// normalizes each micro-batch by its own statistics (as GPipe does), and by default each
// micro-batch also moves the running statistics, so they depend on M. With `deferred` set
// (torchgpipe's deferred batch norm), a training forward instead adds the micro-batch's
// per-channel sum and sum of squares (f64) to totals and leaves the running statistics alone;
// commit_deferred() then moves them once, by the mini-batch's mean and unbiased variance from the
// totals, and counts one batch in num_batches_tracked: the running statistics after a step are
// those of serial training on the whole mini-batch, whatever M. Whoever runs the micro-batches
// (Pipeline with deferred_batch_norm) calls commit_deferred() at the end of each step.
//
// Under re-materialization (autograd::checkpoint) a forward runs again in backward; that re-run
// (autograd::is_recomputing()) normalizes by the batch statistics as the first run did but
// updates nothing: neither the running statistics, nor num_batches_tracked, nor the totals.
class BatchNorm2d : public UnaryModule {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true, DType dtype = DType::F32);
  Tensor forward(const Tensor& x) override;
  int64_t num_features;
  double eps, momentum;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

  // NOTE [Deferred batch norm]. Without running statistics deferring has nothing to do.
  bool deferred = false;
  // Moves the running statistics by the totals gathered since the last commit and clears them;
  // nothing when no training forward ran. Errors: totals of one value per channel (no variance).
  void commit_deferred();
  // Elements per channel gathered since the last commit.
  int64_t deferred_count() const { return deferred_count_; }

 protected:
  std::string extra_repr() const override;

 private:
  Tensor deferred_sum_, deferred_sq_sum_;  // f64 [C]
  int64_t deferred_count_ = 0;
};

}  // namespace trident::nn
