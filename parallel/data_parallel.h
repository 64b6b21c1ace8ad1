// Data parallelism: every rank of the dp group holds the whole model and trains on its own part
// of the global batch; gradients are averaged over the group, so every replica takes the same
// step as serial training on the global batch would (with the loss a mean over the batch).
//
//   auto mesh = parallel::Mesh({.dp = -1});
//   parallel::DataParallel ddp(*model, mesh.group_ptr(parallel::Axis::DP));   // broadcasts rank 0's weights
//   nn::optim::AdamW opt(model->parameters(), {...});
//   for (...) {
//     Tensor loss = loss_fn(model->forward(local_batch));   // this rank's rows only
//     loss.backward();        // buckets all-reduced during backward; averaged when it returns
//     opt.step();             // any optimizer, gradient clipping, GradScaler: gradients are final
//     opt.zero_grad();
//   }
//
// Gradient accumulation: `{ auto scope = ddp.no_sync(); for micro-batches but the last: backward; }`
// then the last backward outside the scope reduces the accumulated sum.
//
// Mechanism: NOTE [Gradient buckets] (grad_reducer.h). After a synchronized backward each
// parameter's .grad is a view of its slot in the bucket buffer (so the next backward accumulates
// in place, without a copy); a .grad kept across steps is therefore overwritten by the next
// reduction (clone it to keep it). Parameters that took no part in the loss on a rank contribute
// zeros (or their current .grad) and receive the average like the others.
// Move or cast the model (Module::to) before wrapping it: the wrapper holds its parameters.
// Batch-norm running statistics are buffers: broadcast from rank 0 at construction, then each
// rank keeps its own (as PyTorch's DistributedDataParallel with broadcast_buffers=false).
// For ZeRO stage 1 (sharded optimizer state) see zero.h.
#pragma once

#include <memory>
#include <vector>

#include "nn/module.h"
#include "parallel/comm/communicator.h"
#include "parallel/grad_reducer.h"

namespace trident::parallel {

struct DataParallelOptions {
  // Bucket capacity (PyTorch's bucket_cap_mb = 25).
  int64_t bucket_bytes = 25 * 1024 * 1024;
  // Copy dp rank 0's parameters (and the module's buffers) to every rank at construction.
  bool broadcast_from_rank0 = true;
  // Parameters whose gradients are complete after the others' (a pipeline stage's tied
  // parameters, summed over their stages at the end of a step): bucketed after every other
  // parameter, so that reduce_async(/*hold_last=*/true) reduces the rest while they are summed
  // and finish() reduces them (NOTE [Overlapped pipeline gradients] in apps/train_common.cpp).
  std::vector<Tensor> reduce_last{};
};

// Copies rank 0's values of `tensors` to every rank of `group`, coalesced per dtype (a
// collective: every rank passes tensors of the same shapes and dtypes, in the same order).
void broadcast_tensors(comm::Communicator& group, const std::vector<Tensor>& tensors, int64_t bucket_bytes);

class DataParallel {
 public:
  DataParallel(nn::Module& model, std::shared_ptr<comm::Communicator> dp, DataParallelOptions options = {});
  // Parameters in registration order (the order backward's hooks are bucketed by).
  DataParallel(std::vector<Tensor> params, std::shared_ptr<comm::Communicator> dp, DataParallelOptions options = {});

  // A scope in which backward accumulates gradients locally, without communicating.
  class NoSync {
   public:
    explicit NoSync(GradReducer& r) : r_(&r), prev_(r.sync()) { r.set_sync(false); }
    ~NoSync() {
      if (r_) r_->set_sync(prev_);
    }
    NoSync(NoSync&& o) noexcept : r_(o.r_), prev_(o.prev_) { o.r_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    GradReducer* r_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*reducer_); }

  // Waits for the reduction in progress; runs by itself when backward ends, so calling it is
  // never needed (and harmless) but after reduce_async().
  void finish() { reducer_->finish(); }
  // Reduces (averages) the gradients the parameters hold now, after backward passes that all ran
  // under no_sync, when the caller decides the sum is complete: a pipeline stage after its
  // micro-batches (NOTE [Pipeline on GPUs]). Collective over the group.
  void reduce() { reducer_->reduce(); }
  // reduce() started, not waited for: finish() waits (GradReducer::reduce_async). hold_last:
  // the buckets of options.reduce_last are filled and launched by finish() instead.
  void reduce_async(bool hold_last = false) { reducer_->reduce_async(hold_last); }

  comm::Communicator& group() const { return reducer_->comm(); }
  const std::vector<GradReducer::Bucket>& buckets() const { return reducer_->buckets(); }

 private:
  std::unique_ptr<GradReducer> reducer_;
};

}  // namespace trident::parallel
