// Pipeline parallelism as in GPipe (Huang et al. 2019): a model's ordered layer list (NOTE
// [Layer list], models/layer_list.h) cut into K stages, one per rank of the pp group, and each
// mini-batch cut into M micro-batches that flow through the stages.
//
// NOTE [Pipeline step]: Pipeline::step(batch) runs the forward and backward passes of one
// mini-batch on this rank's stage, following the schedule (NOTE [Pipeline schedules]):
//  - every rank is given the whole mini-batch (every pp rank loads the same data; under dp the
//    dp group's share): stage 0 reads the inputs, the last stage the targets, any stage the side
//    inputs (BERT's attention mask). Checks on the batch therefore fail alike on every rank.
//  - micro-batch m's activations go from stage s to s + 1, and their gradients back, by
//    point-to-point transfers on the pp group (with options.chunks > 1, from virtual stage to
//    virtual stage, the last rank's chunk c to rank 0's chunk c + 1, and the gradients on a
//    communicator split from pp: NOTE [Interleaved schedule]). The shapes and dtypes of what a stage sends are
//    sent once ahead of the first micro-batch whenever the shapes of the batch's tensors change
//    (both ends see the same batch, so both know when a header comes), not with every tensor.
//    An activation may be undefined (AmoebaNet's state before its prev or aux exist): it keeps
//    its place in the list on the receiving side, and nothing is sent for it either way.
//  - the last stage computes each micro-batch's loss with the counts of the whole mini-batch
//    (LayeredModel::loss), so the micro-batch losses sum to the mini-batch loss and, since the
//    gradients of all micro-batches accumulate in .grad, the gradients are exactly the mini-batch
//    gradients (up to rounding): M = 1 and M = 8 give the same update.
//  - re-materialization (Remat) wraps the stage's forward of a micro-batch in
//    autograd::checkpoint: only the stage's inputs and outputs stay alive until its backward,
//    which re-runs the forward with the same random draws (dropout masks match).
//  - parameters used by several stages (GPT-2's tied word embedding, LayerList::tied()) are
//    broadcast from the first of those stages at construction and their gradients summed among
//    them after each step; with a dp group, the stage's gradients are then averaged over it.
// step() returns the mini-batch loss on every rank. .grad then holds the gradients of the
// stage's parameters (accumulated onto what was there: call zero_grad() between steps), ready for
// an optimizer over parameters().
//
// NOTE [Stage-only model]: every rank builds the model from the same seed (so the stages'
// initial values are the serial model's, whatever the partitioning): whole, or only its stage
// (NOTE [Stage-only build] in models/layer_list.h: the same result without the whole model in
// memory). The constructor then releases every parameter and buffer that no layer of this rank's stage holds (but those of one
// element, as small as a placeholder, like batch norm's num_batches_tracked): each becomes a
// placeholder of the same shape and dtype that broadcasts one element (NaN for floating types,
// 0 otherwise; every stride 0), and the freed blocks go back to the system (empty_cache). A
// rank's memory so holds its stage's tensors only, as in GPipe, while names, shapes and
// parameter counts still describe the whole model. Module::to keeps a
// placeholder one element, so moving the model afterwards moves the stage only. What needs
// another stage's values goes through the pipeline: evaluation through forward_only(),
// checkpoints through gather_state_dict() and gather_optimizer_state() (NOTE [Pipeline
// checkpoints]), the gradient norm through clip_grad_norm_ (grad_norm.h). Running the model's
// own forward on a pp rank after this gives NaN, never plausible numbers. state_owners() says
// which stage holds each state-dict entry. Failures: NOTE [Pipeline failures].
// tp x pp: a model built by parallel::tp::TensorParallelLayers over a mesh's tp group gives each
// stage tensor-parallel layers; pass the mesh's pp group here. The ranks of a pp group share a tp
// index, so the activations they exchange (full hidden states) and the tied shards match; the
// tp collectives run inside the stages' forward and backward, in the same order on every tp rank
// of a stage. A failure is only broadcast over the pp group: the other tp indices' pipelines end
// at the communicator timeout instead.
// Mixed precision: step() may run inside an autocast scope (NOTE [Autocast state]); fp16's loss
// scale: set_loss_scale.
// NOTE [Pipeline on GPUs]: a model moved to a GPU (Module::to, before the pipeline is built) runs
// its stage there: step() and forward_only() take the batch wherever it is (a loader's host
// batch) and move each micro-batch to the model's device; the activations and gradients a stage
// receives are allocated there. The pp group also carries host tensors (the shape headers, the
// loss, the trace), so it must be MPI or local, which stage CUDA tensors through pinned host
// memory (NOTE [Host staging] in comm/communicator.h); so must options.dp (losses, batch norm
// totals). An NCCL group there is refused at construction. A GPU stage's data-parallel gradients
// go best over NCCL outside the pipeline: average_dp_gradients = false, the step under the
// reducer's no_sync, then DataParallel::reduce() (or ZeroOptimizer::reduce_gradients()) over an
// NCCL group after it, or DataParallel::reduce_async() from set_after_last_backward and finish()
// after it, as the training programs do (NOTE [Overlapped pipeline gradients]).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/layer_list.h"
#include "nn/normalization.h"
#include "parallel/comm/communicator.h"
#include "parallel/pipeline/failure_channel.h"
#include "parallel/pipeline/partition.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/timeline.h"

namespace trident::parallel::pipeline {

// torchgpipe's checkpoint modes: re-materialize every micro-batch, every one but the last
// (whose backward follows its forward under GPipe's schedule), or none.
enum class Remat : uint8_t { Always, ExceptLast, Never };
std::string_view remat_name(Remat r);  // "always", "except_last", "never"
Remat parse_remat(std::string_view name);

// How the layers are cut when no explicit balance is given.
enum class BalanceBy : uint8_t { Parameters, Time };

struct PipelineOptions {
  int64_t micro_batches = 1;
  Schedule schedule = Schedule::GPipe;
  Remat remat = Remat::ExceptLast;
  // Layers per stage (partition.h); empty: computed by `balance_by`.
  Balance balance{};
  BalanceBy balance_by = BalanceBy::Parameters;
  // BalanceBy::Time: the batch each layer's forward and backward is timed on (by pp rank 0,
  // which broadcasts the times so every rank cuts alike).
  std::optional<models::Batch> profile_batch{};
  // Optional data-parallel group: every stage's gradients are averaged over it after each step
  // (and its parameters broadcast from dp rank 0 at construction).
  std::shared_ptr<comm::Communicator> dp{};
  // With `dp`: false leaves the stage's gradients this rank's after step() (tied parameters' still
  // summed over their stages), for a caller that reduces them itself: ZeRO-1's reduce-scatter
  // (NOTE [ZeRO-1 over pipeline stages], parallel/zero.h). The loss and the batch norm statistics
  // are still the dp group's.
  bool average_dp_gradients = true;
  // Batch norm statistics over the whole mini-batch (NOTE [Deferred batch norm],
  // nn/normalization.h): the stage's BatchNorm2d modules are set to defer at construction and
  // commit their running statistics once at the end of each step, so that they do not depend
  // on micro_batches. Each micro-batch is still normalized by its own statistics. With `dp`, the
  // totals are summed over it first (nn::commit_deferred_batch_norms): the statistics of the
  // global batch, the same on every dp rank.
  bool deferred_batch_norm = false;
  // Record the timeline of every step (NOTE [Pipeline timeline]).
  bool timeline = false;
  // Model chunks per rank (NOTE [Interleaved schedule] in schedule.h): the layers are cut into
  // pp size x chunks virtual stages (`balance` then has that many entries), rank s holding
  // virtual stages s, s + K, ...; micro_batches must be a multiple of the pp size when > 1.
  int64_t chunks = 1;
};

// The balance a Pipeline over `stages` ranks uses with `options` when that needs no
// communication: options.balance (checked), else the cut by parameter count; stages x
// options.chunks entries. Errors: a balance by time (only the pipeline profiles it), more
// virtual stages than layers, a bad explicit balance.
Balance plan_balance(const models::LayerList& layers, int64_t stages, const PipelineOptions& options = {});

// NOTE [Stage-only model]: releases what stage `stage` of `balance` does not hold, as the
// Pipeline constructor does, but alone (no communication): a model built whole, cut as the
// Pipeline built afterwards with the same balance would (it then finds its stage whole). A
// stage-only build (NOTE [Stage-only build]) gives the same without the whole model in memory.
// With `chunks` per stage the balance has stages x chunks entries (NOTE [Interleaved schedule]).
void keep_stage(models::LayeredModel& model, const Balance& balance, int64_t stage, int64_t chunks = 1);


class Pipeline {
 public:
  // Collective over `pp` (and `dp`): stage i runs on pp rank i, so the pipeline has pp->size()
  // stages. Errors, raised alike on every rank before any communication: more stages than layers,
  // a balance that does not sum to the layer count or has a stage without layers, a balance with
  // another number of stages than pp ranks, micro_batches < 1, BalanceBy::Time without a
  // profile batch. Afterwards, over every rank: this stage holding a tensor an earlier pipeline
  // over the same model released (NOTE [Stage-only model]).
  Pipeline(models::LayeredModel& model, std::shared_ptr<comm::Communicator> pp, PipelineOptions options = {});
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // NOTE [Pipeline step]. Errors on every rank alike: micro_batches not dividing the batch size.
  // A failure inside any stage ends the step with that stage's message on every rank (NOTE
  // [Pipeline failures]); the pipeline cannot be used afterwards.
  double step(const models::Batch& batch);
  // As step(batch), but the last stage weights the micro-batch losses by `counts` (the
  // LayeredModel::loss_counts of the mini-batch, as LayeredModel::loss takes them) instead of
  // the batch's own: a data-parallel caller passes the global batch's counts over dp (NOTE
  // [Parallel training apps]), so that ranks with different counts (BERT's masked tokens) still
  // average to the global batch's mean loss and gradient.
  double step(const models::Batch& batch, const std::vector<double>& counts);

  // Collective over pp: the forward pass of `batch` through every stage, for evaluation (no
  // autograd graph: it runs under its own NoGradGuard; set eval mode on the model first), cut into
  // options().micro_batches micro-batches when that divides the batch, else run whole, so the
  // stages overlap. Returns the last layer's outputs for the whole batch (each output the
  // micro-batches' outputs concatenated on dim 0) on the last stage, an empty list on the
  // others. The shapes are exchanged on every call (evaluation batches may differ in size), and
  // the training step's cached shapes are left alone. Failures: as step().
  models::Activations forward_only(const models::Batch& batch);

  // fp16's dynamic loss scaling (nn::GradScaler) across the stages: the last stage starts each
  // micro-batch's backward from its loss times `scale` (what GradScaler::scale(loss).backward()
  // does serially), so every stage's gradients come out scaled; step() still returns the
  // unscaled loss. Set it to the scaler's get_scale() before each step, and unscale with
  // GradScaler::unscale_(opt, all_finite) agreeing over every rank holding a part of the model,
  // so that the stages skip an overflowing step together. 1 (the default): no scaling.
  void set_loss_scale(double scale);
  double loss_scale() const { return loss_scale_; }

  // Called in every step on this rank right after its last backward pass, when the gradients of
  // its stage are final but for the tied parameters' sum over stages, while other stages may
  // still run theirs: a data-parallel reduction started there (DataParallel::reduce_async)
  // overlaps the rest of the pipeline's flush (NOTE [Overlapped pipeline gradients] in
  // apps/train_common.cpp). Empty: nothing.
  void set_after_last_backward(std::function<void()> f) { after_last_backward_ = std::move(f); }

  // This rank's stage (its pp rank), of num_stages() (the pp size).
  int64_t stage() const { return stage_; }
  int64_t num_stages() const { return static_cast<int64_t>(balance_.size()) / options_.chunks; }
  int64_t chunks() const { return options_.chunks; }
  // Layers per virtual stage: num_stages() x chunks() entries (NOTE [Interleaved schedule]).
  const Balance& balance() const { return balance_; }
  // This stage's layers: [first, second) of each of its chunks, in chunk order.
  const std::vector<std::pair<size_t, size_t>>& layer_ranges() const { return ranges_; }
  bool holds_layer(size_t i) const;
  const PipelineOptions& options() const { return options_; }
  models::LayeredModel& model() const { return model_; }
  const std::shared_ptr<comm::Communicator>& pp() const { return pp_; }

  // This stage's parameters, each once, with their names in the model's state dict.
  const std::vector<std::pair<std::string, Tensor>>& named_parameters() const { return params_; }
  // NOTE [Stage-only model]: the entries of the model's state dict (parameters and persistent
  // buffers) that this stage holds, sharing storage with the model, by name.
  std::map<std::string, Tensor> state_dict() const;
  // Every entry of the model's state dict with the first stage whose layers hold it (0 for an
  // entry no layer holds, which every rank keeps). The same on every rank.
  const std::map<std::string, int64_t>& state_owners() const { return owners_; }
  // Bytes of parameters and buffers this pipeline released (0 with one stage, or when
  // keep_stage already cut the model).
  int64_t released_bytes() const { return released_bytes_; }
  std::vector<Tensor> parameters() const;
  // Zeroes the stage's gradients in place (keeping their memory, so that the next step's memory
  // statistics see activations only).
  void zero_grad();

  // This rank's events of the last step (empty unless options.timeline).
  const std::vector<Event>& events() const { return events_; }
  // The most memory the last step held on this rank above what it held when it began
  // (parameters, gradients and optimizer state are there before): activations, their
  // gradients, and transfer buffers. From core's memory statistics (core/allocator.h).
  int64_t peak_activation_bytes() const { return peak_activation_bytes_; }

  // Collective over pp: every stage's events of the last step.
  PipelineTrace gather_trace() const;
  // Collective over pp: every stage's peak_activation_bytes().
  std::vector<int64_t> gather_peak_activation_bytes() const;

 private:
  struct Spec {
    DType dtype;
    std::vector<int64_t> sizes;
    bool defined = true;  // an undefined activation: a place in the list, nothing sent
  };
  struct MicroState {
    autograd::TensorList inputs;   // received activations (leaves), empty on stage 0
    autograd::TensorList outputs;  // this stage's outputs
    Tensor loss;                   // last stage only
  };

  double step_with(const models::Batch& batch, const std::vector<double>* counts);
  void check_not_released();
  void release_other_stages();
  [[noreturn]] void fail(const std::exception& e);
  models::Activations run_forward_only(const std::vector<models::Batch>& micro);
  // A header of the activations' shapes (NOTE [Pipeline step]) and its inverse.
  Tensor header_of(const autograd::TensorList& outputs, std::vector<Spec>& specs) const;
  static std::vector<Spec> specs_of(const Tensor& header);
  // The activations' transfers of micro-batch m: the header from the previous stage, the
  // tensors from it, and the tensors to the next stage (checked against micro-batch 0's specs).
  std::vector<Spec> recv_header(int64_t m, int64_t chunk);
  autograd::TensorList recv_activations(const std::vector<Spec>& specs, int64_t m, int64_t chunk);
  comm::Work send_activations(const autograd::TensorList& outputs, const std::vector<Spec>& specs, int64_t m,
                              int64_t chunk);
  void run_step(const std::vector<models::Batch>& micro, const std::vector<double>& counts, bool new_shapes);
  void forward(int64_t m, int64_t chunk, const models::Batch& mb, const std::vector<double>& counts, bool new_shapes);
  void backward(int64_t m, int64_t chunk);
  void finish_step();
  std::string where() const;
  void record(EventKind kind, int64_t m, double start, int64_t chunk = 0);
  // NOTE [Interleaved schedule]: chunk c of this rank is virtual stage c K + stage(); activations go
  // to the next rank (the last rank's to rank 0), gradients back.
  bool is_first(int64_t chunk) const { return chunk == 0 && stage_ == 0; }
  bool is_last(int64_t chunk) const { return chunk + 1 == chunks() && stage_ + 1 == num_stages(); }
  int next_rank() const { return static_cast<int>((stage_ + 1) % num_stages()); }
  int prev_rank() const { return static_cast<int>((stage_ + num_stages() - 1) % num_stages()); }
  comm::Communicator& grads_comm() const { return pp_back_ ? *pp_back_ : *pp_; }
  void setup_tied_and_dp();
  Balance profile_balance(models::LayeredModel& model);

  models::LayeredModel& model_;
  std::shared_ptr<comm::Communicator> pp_;
  PipelineOptions options_;
  Balance balance_;
  int64_t stage_ = 0;
  std::vector<std::pair<size_t, size_t>> ranges_;  // this rank's layers, per chunk
  std::shared_ptr<comm::Communicator> pp_back_;     // gradients, with chunks > 1
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> held_state_;  // NOTE [Stage-only model]
  std::map<std::string, int64_t> owners_;
  int64_t released_bytes_ = 0;
  Device device_;  // NOTE [Pipeline on GPUs]

  // Tied parameters this stage shares with other stages, and the group of those stages.
  struct Tied {
    Tensor tensor;
    std::shared_ptr<comm::Communicator> group;
  };
  std::vector<Tied> tied_;
  std::vector<nn::BatchNorm2d*> deferred_bns_;  // options.deferred_batch_norm: the stage's BatchNorm2d
  std::unique_ptr<FailureChannel> failures_;

  std::string shape_key_;          // the batch shapes the specs below were exchanged for
  std::vector<std::vector<Spec>> in_specs_, out_specs_;  // per chunk
  std::map<std::pair<int64_t, int64_t>, MicroState> in_flight_;  // by (chunk, micro-batch)
  std::vector<comm::Work> sends_;
  double step_loss_ = 0;
  double loss_scale_ = 1.0;
  std::function<void()> after_last_backward_;
  bool in_backward_ = false;
  bool forward_only_ = false;  // inside forward_only(): nothing goes to the timeline
  int64_t current_micro_ = 0;
  std::vector<Event> events_;
  int64_t peak_activation_bytes_ = 0;
};

}  // namespace trident::parallel::pipeline
