// LayerNorm and BatchNorm2d (PyTorch's defaults: weight 1, bias 0; batch norm keeps running
// mean and variance as buffers, updated in training with `momentum`, used in evaluation).
#pragma once

#include <functional>
#include <vector>

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
// per-channel sum and sum of squares to totals (f64; f32 on a GPU, which has no f64 kernels),
// from the mean and variance the batch norm op computes for its own normalization (no second
// pass over the input), and leaves the running statistics alone; commit_deferred() then moves them once, by the
// mini-batch's mean and unbiased variance from the totals, and counts one batch in
// num_batches_tracked: the running statistics after a step are those of serial training on the
// whole mini-batch, whatever M. Whoever runs the micro-batches (Pipeline with
// deferred_batch_norm, the training apps: NOTE [Batch norm in the apps]) commits at the end of
// each step.
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
  // The totals gathered since the last commit: [2C] on the module's device (f64; f32 on a GPU),
  // the per-channel sums then the sums of squares (zeros when nothing was gathered), over
  // deferred_count() elements per channel. And the commit of totals given that way (with other processes' added
  // in: commit_deferred_batch_norms), which also clears this module's own; no synchronization
  // with a GPU. Errors: a shape other than [2C]; a count of 1.
  Tensor deferred_sums() const;
  void commit_deferred(const Tensor& sums, int64_t count);

 protected:
  std::string extra_repr() const override;

 private:
  Tensor deferred_sum_, deferred_sq_sum_;  // [C], f64 (f32 on a GPU)
  int64_t deferred_count_ = 0;
};

// NOTE [Deferred batch norm]: sets `deferred` on every BatchNorm2d with running statistics in
// `module` (each module once) and returns them.
std::vector<BatchNorm2d*> defer_batch_norms(Module& module);

// Commits the deferred statistics of `bns`. With `all_reduce_sum` (data parallelism: every rank
// holds the same modules and ran its own rows), their totals are first packed into one f64 host
// tensor that it sums over the ranks, so that every rank's running statistics move by the whole
// global batch's mean and variance: those of serial training on it, on every rank alike. Every
// rank must pass the same modules (none: no communication).
void commit_deferred_batch_norms(const std::vector<BatchNorm2d*>& bns,
                                 const std::function<void(Tensor& totals)>& all_reduce_sum = {});

}  // namespace trident::nn
