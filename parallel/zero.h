// ZeRO stage 1 (Rajbhandari et al., 2020): data parallelism whose optimizer state is sharded
// across the dp ranks, so each rank keeps 1/dp of it (Adam's two moments are 2x the parameters'
// size: the largest saving there is before sharding gradients or parameters).
//
//   parallel::ZeroOptimizer zero(*model, dp_group, [](const parallel::ParamGroups& g) {
//     return std::make_unique<nn::optim::AdamW>(std::vector<nn::optim::ParamGroup<nn::optim::AdamWOptions>>{
//         {g[0], {.lr = 1e-3}}});
//   });
//   for (...) { loss.backward(); zero.step(); zero.zero_grad(); }
//
// NOTE [ZeRO-1 layout]: the parameters are bucketed as for DataParallel (NOTE [Gradient
// buckets]), each bucket padded to a multiple of dp and split into dp equal shards; rank r owns
// shard r of every bucket. The parameters become views of their bucket's flat parameter buffer
// (Tensor::set_data: every handle to them, the model's included, sees the buffer). Backward
// reduce-scatters (average) each bucket's gradients as soon as the bucket is complete, leaving
// rank r the averaged gradient of its shards. step() runs an ordinary nn/optim optimizer, built by
// the caller's factory over the shard views (one leaf tensor per bucket, grouped like the
// parameters), so its state covers only this rank's shards; then all-gathers every bucket's
// parameters in place. The optimizer must update element-wise (SGD, RMSProp, Adam, AdamW): LAMB's
// per-parameter trust ratio would see shards, not parameters, and is refused.
// Gradients: each parameter's .grad is its slot of the bucket's gradient buffer (set at
// construction and kept by zero_grad(), which zeroes the buffers in place), so backward
// accumulates straight into the buckets and no second copy of the gradients exists: a rank holds
// the parameters, one gradient buffer and 1/dp of the optimizer state. After the reduction the
// buffer's shard r holds the averaged gradient of rank r's shard and the rest this rank's local
// sums; .grad is therefore a mix until zero_grad(). The shard gradients are the ones the update
// used; global gradient clipping is clip_grad_norm() here, not nn/optim's (which would see
// the mix). Someone replacing or dropping a .grad costs a copy into the bucket (the hook's), not
// correctness.
//
// NOTE [ZeRO-1 with loss scaling]: fp16's dynamic loss scaling (nn::GradScaler) over the shards.
// The gradients the scaler divides and checks are this rank's reduced shards, the ones the update
// uses. An inf or NaN reaches only the rank whose shard holds it (the reduce-scatter averages it
// into that shard alone), so the ranks must agree: `all_finite` is given whether this rank's
// shards are all finite and returns whether every rank's are, by default a reduction over the dp
// group; a caller whose model has other parts (a tp group, pipeline stages) passes one over all
// of them. Then every rank skips an overflowing step, leaves its parameters as they were (no
// update, no all-gather) and backs its scale off alike. unscale_() is the optional call before
// clipping (as GradScaler::unscale_); step(scaler) unscales if that was not done, then updates
// and all-gathers unless a gradient overflowed. scaler.update() follows, as in the serial loop:
//   scaler.scale(loss).backward();
//   zero.unscale_(scaler);  zero.clip_grad_norm(1.0);  // optional
//   zero.step(scaler);  scaler.update();  zero.zero_grad();
// A disabled scaler (bf16, fp32) makes step(scaler) plain step().
//
// NOTE [ZeRO-1 over pipeline stages]: under --pp each stage has its own ZeroOptimizer over the
// stage's parameters and the stage's dp group. The pipeline's micro-batches each run a backward
// pass, so they run under no_sync(); the pipeline leaves the gradients local
// (PipelineOptions::average_dp_gradients = false) after summing the tied parameters' over their
// stages, and reduce_gradients() then reduce-scatters the sum once per step. It can start
// earlier: ZeroOptions::reduce_last puts the stage's tied parameters in the last buckets, and
// reduce_gradients_async() from Pipeline::set_after_last_backward launches every other bucket once
// the stage's last backward pass ran, so that their reduce-scatter overlaps the other stages'
// backward passes; reduce_gradients() after the step launches the tied ones (summed by then) and
// waits (NOTE [Overlapped pipeline gradients] in apps/train_common.cpp). Clipping takes the
// whole model's norm (NormParts: pp, and the tied parameters counted once); a tied parameter's
// holders update it alike (the same summed gradient, the same state), as without ZeRO.
// Checkpoints gather the stage's unsharded state over dp, then the stages' over pp (NOTE
// [Pipeline checkpoints]): the file of a serial run.
//
// NOTE [ZeRO-1 on GPUs]: parameters on a CUDA device keep everything there (buckets, shards,
// optimizer state, the gathered state's buffers); the dp group may be NCCL's (the training
// programs give it the NCCL group their plain data parallelism uses), so the few host values ZeRO
// reduces over it (the clipping norm's squares, the overflow flag) travel as device scalars. The
// tp and pp groups of clip_grad_norm stay host groups.
//
// NOTE [ZeRO-1 checkpoints]: state_dict() gathers the sharded state into the state dict the
// *unsharded* optimizer would have (NOTE [Optimizer state dict]: per parameter, in registration
// order), and load_state_dict() takes such a state dict and keeps this rank's shards. So a ZeRO
// checkpoint is the same file a serial or plain data-parallel run writes (checkpoint.h: dp rank 0
// writes it), and resumes on any dp size, with or without ZeRO. The writing rank never holds the
// full optimizer state: the checkpoint takes each parameter's buffers from the shards as it
// writes them (gather_param_slot_to, NOTE [Streamed checkpoints] in checkpoint.h); loading
// takes each rank's shards straight from the mapped file. Per-rank shard files would avoid the
// single writer but tie the checkpoint to one dp size.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "nn/grad_scaler.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/grad_reducer.h"

namespace trident::parallel {

using ParamGroups = std::vector<std::vector<Tensor>>;
// The number of parameters in each group.
inline std::vector<size_t> group_sizes(const ParamGroups& groups) {
  std::vector<size_t> n;
  for (const auto& g : groups) n.push_back(g.size());
  return n;
}
// Builds the optimizer over the given parameter groups (the shard views, or the full parameters
// when a checkpoint is converted), with each group's hyperparameters.
using OptimizerFactory = std::function<std::unique_ptr<nn::optim::Optimizer>(const ParamGroups& groups)>;

struct ZeroOptions {
  int64_t bucket_bytes = 25 * 1024 * 1024;
  bool broadcast_from_rank0 = true;
  // Parameters whose gradients are complete after the others' (a pipeline stage's tied
  // parameters): bucketed after every other one, so that reduce_gradients_async() can start the
  // rest early (NOTE [ZeRO-1 over pipeline stages]).
  std::vector<Tensor> reduce_last{};
};

class ZeroOptimizer {
 public:
  // groups: the parameters per optimizer group (leaves requiring grad, f32 or f64, contiguous),
  // in registration order. Collective over dp.
  ZeroOptimizer(ParamGroups groups, std::shared_ptr<comm::Communicator> dp, OptimizerFactory factory,
                ZeroOptions options = {});
  // One group: the model's trainable parameters (its buffers are broadcast from rank 0 too).
  ZeroOptimizer(nn::Module& model, std::shared_ptr<comm::Communicator> dp, OptimizerFactory factory,
                ZeroOptions options = {});

  // Updates this rank's shards with the reduced gradients, then all-gathers the parameters.
  // Collective. Errors if no synchronized backward ran since the last step.
  void step();
  // NOTE [ZeRO-1 with loss scaling]. unscale_ returns whether every rank's shards are finite;
  // step(scaler) whether it stepped. Collective over dp (and whatever all_finite reduces over).
  bool unscale_(nn::GradScaler& scaler, const std::function<bool(bool)>& all_finite = {});
  bool step(nn::GradScaler& scaler, const std::function<bool(bool)>& all_finite = {});
  // Zeroes the gradient buffers in place, each parameter's .grad its slot again (NOTE [ZeRO-1
  // layout]).
  void zero_grad();
  // NOTE [ZeRO-1 over pipeline stages]: reduce-scatters the gradients the parameters hold now
  // (GradReducer::reduce), for a caller whose backward passes ran under no_sync(); after
  // reduce_gradients_async(), launches the held buckets and waits for every one.
  void reduce_gradients();
  // Launches the reduce-scatter of every bucket but those of options.reduce_last, not waited
  // for: a pipeline stage's, once its last backward pass of the step ran, while the other stages
  // run theirs. reduce_gradients() (or step(), zero_grad()) completes it. Collective.
  void reduce_gradients_async();
  // Scales the shard gradients so that the global gradient norm (over every parameter, the
  // p-norm with p = 2) is at most max_norm; returns the norm before scaling. Collective; call
  // between backward and step().
  double clip_grad_norm(double max_norm);
  // The same on a dp x tp mesh (this optimizer over the dp group of one tp index): the
  // parameters in `split` are this tp rank's shards of larger ones (NOTE [Parameter shards]), so
  // their squares are summed over `tp` as well; the others are whole and identical on every tp
  // rank and count once. The norm is the serial model's. Collective over dp, then tp.
  double clip_grad_norm(double max_norm, comm::Communicator& tp, const std::vector<Tensor>& split);
  // The general form: the model's other parts, each optional.
  struct NormParts {
    // The tp group, and the parameters that are this tp rank's shards of larger ones: their
    // squares are summed over tp too.
    comm::Communicator* tp = nullptr;
    std::vector<Tensor> split;
    // The pipeline's pp group (this optimizer holding one stage): the stages' totals are summed
    // over it, leaving out `elsewhere`, parameters another stage counts (a tied parameter's
    // later holders, pipeline::counted_here).
    comm::Communicator* pp = nullptr;
    std::vector<Tensor> elsewhere;
  };
  double clip_grad_norm(double max_norm, const NormParts& parts);

  [[nodiscard]] DataParallel::NoSync no_sync() { return DataParallel::NoSync(*reducer_); }

  // The optimizer over this rank's shards (its learning rates are what schedules set).
  nn::optim::Optimizer& shard_optimizer() { return *optimizer_; }
  const ParamGroups& param_groups() const { return reducer_->groups(); }
  const OptimizerFactory& factory() const { return factory_; }
  comm::Communicator& group() const { return reducer_->comm(); }
  const std::vector<GradReducer::Bucket>& buckets() const { return reducer_->buckets(); }

  // NOTE [ZeRO-1 checkpoints]. state_dict() is collective over the dp group (it all-gathers);
  // state_dict_to(root) gathers the state on dp rank `root` alone, in host memory (the others
  // send their shards and get nullopt, never holding more than their own), what a checkpoint
  // writer needs.
  // load_state_dict() is local: it takes the unsharded state (its tensors may view a mapped file)
  // and keeps this rank's shards, one bucket of the whole at a time; a state that does not fit the
  // parameters is an error before anything changes.
  nn::optim::OptimizerState state_dict();
  std::optional<nn::optim::OptimizerState> state_dict_to(int root);
  void load_state_dict(const nn::optim::OptimizerState& full);

  // Per parameter, for checkpoints streamed one tensor at a time (NOTE [Streamed checkpoints] in
  // parallel/checkpoint.h). param_state_info(): each parameter's (param_groups() order) step
  // count and the dtype of each buffer it has (indexed like the optimizer's slot_names()), from
  // this rank's shards, the same on every rank; no communication. gather_param_slot_to():
  // parameter i's buffer `slot`, shaped like the parameter, on dp rank `root` (host memory;
  // undefined on the others); each rank sends root the part of it its shard holds. Collective
  // over dp.
  struct ParamStateInfo {
    std::optional<double> step;
    std::vector<std::optional<DType>> slots;
  };
  std::vector<ParamStateInfo> param_state_info();
  Tensor gather_param_slot_to(size_t i, std::string_view slot, int root);

 private:
  void init(ParamGroups groups, std::shared_ptr<comm::Communicator> dp, ZeroOptions options);
  // Waits for the reduction, checks that a synchronized backward ran since the last step, and
  // gives the shard leaves their reduced gradients.
  void take_shard_grads();
  // Zeroes the buckets' gradient buffers and makes each parameter's .grad its slot.
  void use_bucket_grads();
  void gather_parameters();
  // A host value's tensor where the dp group's backend can carry it (the device under NCCL).
  Tensor for_group(const Tensor& host) const;
  bool unscale_with(nn::GradScaler& scaler, const std::function<bool(bool)>& all_finite);
  // Multiplies the shard gradients by min(1, max_norm / (norm + 1e-6)); returns norm.
  double scale_shard_grads(double max_norm, double norm);
  // Per bucket: the index of its shard in the shard optimizer's state-dict numbering.
  std::vector<size_t> shard_indices() const;
  // The unsharded state on every rank (no root) or on `root` alone (the others' has no tensors).
  nn::optim::OptimizerState gather_state(std::optional<int> root);
  // Errors, before load_state_dict changes anything: the state does not fit this optimizer's
  // groups and parameters (what the unsharded optimizer would refuse).
  void check_full_state(const nn::optim::OptimizerState& full) const;

  OptimizerFactory factory_;
  std::unique_ptr<GradReducer> reducer_;
  std::vector<Tensor> param_flats_;   // per bucket: the flat parameter buffer [padded]
  std::vector<Tensor> shard_params_;  // per bucket: this rank's shard of it, the optimizer's leaf
  std::vector<Tensor> shard_grads_;   // per bucket: this rank's shard of the gradient buffer
  std::unique_ptr<nn::optim::Optimizer> optimizer_;
  int64_t rounds_at_last_step_ = 0;
};

}  // namespace trident::parallel
