// GradReducer: the gradient buckets shared by DataParallel (all-reduce) and ZeroOptimizer
// (reduce-scatter). Users go through those two; this header documents the mechanism.
//
// NOTE [Gradient buckets]: parameters are grouped into buckets in reverse registration order (the
// order backward produces their gradients, NOTE [Engine order]), each bucket holding parameters of
// one dtype and one optimizer group, up to `bucket_bytes` (a larger parameter gets a bucket of its
// own). A bucket is one flat gradient buffer, each parameter a contiguous slot in it; with
// `pad_to` = the dp size (ZeRO) its length is rounded up so that it splits into equal shards.
// Each parameter has a post-accumulate-grad hook (autograd/engine.h). When it fires, the
// parameter's .grad is final for this backward: the hook copies it into its slot (unless .grad
// already is that slot) and, once every slot of a bucket is filled, launches the bucket's
// collective (all-reduce average, or reduce-scatter average) asynchronously, so that it overlaps
// the rest of backward. Buckets are launched strictly in index order, on every rank alike (MPI
// and NCCL match collectives by order): a bucket that fills early waits for the ones before it.
// The first hook of a backward also queues finish() to run when the outermost backward ends
// (NOTE [Backward callbacks]): finish() launches the buckets not launched yet (a parameter whose
// hook did not fire, because it had no part in the loss, contributes its current .grad or zeros)
// and waits for all of them, so when backward() returns the gradients are synchronized: no
// optimizer step can see unsynchronized gradients, whatever the user forgets. Each hook also
// polls the buckets in flight, which is what advances MPI transfers during backward (OpenMPI
// progresses non-blocking collectives only inside MPI calls).
// A parameter's hook firing twice in one backward (it is used by two checkpointed segments, each
// of which backpropagates separately) is an error naming it: its first gradient was not final.
// With sync off (no_sync) hooks do nothing and gradients accumulate locally in .grad; the next
// backward with sync on reduces the accumulated sum.
// Parameters given as `last` (whose gradients are completed after the others': a pipeline stage's
// tied parameters, summed over their stages at the end of the step) are bucketed after all the
// others, in buckets of their own, so that reduce_async(hold_last) can launch every other bucket
// while they are still being summed (NOTE [Overlapped pipeline gradients] in
// apps/train_common.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"

namespace trident::parallel {

class GradReducer {
 public:
  enum class Mode { AllReduce, ReduceScatter };

  struct Slot {
    Tensor param;
    size_t index = 0;     // position in registration order (all groups, in order)
    int64_t offset = 0;   // in the bucket, in elements
    int64_t numel = 0;
  };
  struct Bucket {
    size_t group = 0;
    DType dtype = DType::F32;
    std::vector<Slot> slots;
    int64_t numel = 0;   // sum of the slots
    int64_t padded = 0;  // numel rounded up to a multiple of pad_to
    Tensor grads;        // flat [padded]: the collective's buffer
    // Round state.
    int pending = 0;
    bool launched = false;
    comm::Work work;
    // The shard of rank r: elements [r * shard, (r + 1) * shard) of the padded buffer.
    int64_t shard_numel(int ranks) const { return padded / ranks; }
  };

  // groups: the parameters (leaves requiring grad, f32/f64/f16/bf16, each once overall) per
  // optimizer group, in registration order. pad_to: the multiple each bucket is padded to.
  // last: some of those parameters, bucketed after all the others (NOTE [Gradient buckets]).
  GradReducer(std::vector<std::vector<Tensor>> groups, std::shared_ptr<comm::Communicator> group, Mode mode,
              int64_t bucket_bytes, int pad_to, const std::vector<Tensor>& last = {});
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  void set_sync(bool on);
  bool sync() const;
  // Launches what is not launched and waits for every bucket; a no-op when no reduction is in
  // progress. Runs by itself at the end of backward (NOTE [Gradient buckets]).
  void finish();
  // Reduces the gradients the parameters hold now, outside any backward: every bucket filled from
  // .grad (zeros where undefined), launched in order and waited for. For a caller whose backward
  // passes all ran with sync off and who decides when the sum is complete (a pipeline stage after
  // its micro-batches, NOTE [ZeRO-1 over pipeline stages] in zero.h). Collective; counts as a
  // synchronized backward. Errors inside a backward's reduction.
  void reduce();
  // reduce() without the wait: every bucket filled from .grad and launched, in order; finish()
  // waits for them (and makes .grad the slots). For a caller that has other work before it needs
  // the gradients: a pipeline stage after its last backward pass while the other stages finish
  // theirs (NOTE [Overlapped pipeline gradients] in apps/train_common.cpp). Until finish(), .grad
  // must not change, and a backward with sync on is an error. Collective.
  // hold_last: the buckets of the `last` parameters are neither filled nor launched here but by
  // finish(), from the .grad they hold then (which may change until then: they are being summed).
  void reduce_async(bool hold_last = false);
  // Whether a reduce_async() round waits for finish().
  bool async_in_flight() const;
  // The index of the first bucket of the `last` parameters (buckets().size() without them).
  size_t first_last_bucket() const;
  // Counts synchronized backwards; ZeroOptimizer::step() checks it moved.
  int64_t rounds_finished() const;

  const std::vector<Bucket>& buckets() const;
  const std::vector<std::vector<Tensor>>& groups() const;
  comm::Communicator& comm() const;

  // A slot's part of a flat buffer laid out as its bucket (the gradient buffer, ZeRO-1's
  // parameter buffer), shaped like the parameter; and whether `g` is exactly that view.
  static Tensor slot_view(const Tensor& flat, const Slot& s);
  static bool is_slot_view(const Tensor& g, const Tensor& flat, const Slot& s);

  struct State;  // shared with the hooks, which hold it weakly

 private:
  std::shared_ptr<State> state_;
};

struct GradReducer::State : std::enable_shared_from_this<GradReducer::State> {
  std::shared_ptr<comm::Communicator> comm;
  Mode mode = Mode::AllReduce;
  std::vector<std::vector<Tensor>> groups;
  std::vector<Bucket> buckets;
  // Per parameter (registration order): its bucket and slot, and whether its hook fired.
  std::vector<std::pair<size_t, size_t>> where;
  std::vector<bool> ready;
  bool sync = true;
  bool round_open = false;
  uint64_t round_backward = 0;
  size_t next_launch = 0;
  int64_t rounds_finished = 0;
  size_t first_last_bucket = 0;

  void on_grad_ready(size_t index);
  void open_round(uint64_t backward_id);
  void reset_round();
  void abandon_round();
  void fill_slot(Bucket& b, const Slot& s);
  void launch_ready();
  void launch(Bucket& b);
  // Fills and launches buckets [0, end) that are not launched yet.
  void launch_all(size_t end);
  void poll_in_flight();
  void finish();
  // round_backward of a round reduce_async() opened (no backward's).
  static constexpr uint64_t kAsyncRound = ~uint64_t{0};
};

inline void GradReducer::set_sync(bool on) { state_->sync = on; }
inline bool GradReducer::sync() const { return state_->sync; }
inline int64_t GradReducer::rounds_finished() const { return state_->rounds_finished; }
inline bool GradReducer::async_in_flight() const {
  return state_->round_open && state_->round_backward == State::kAsyncRound;
}
inline size_t GradReducer::first_last_bucket() const { return state_->first_last_bucket; }
inline const std::vector<GradReducer::Bucket>& GradReducer::buckets() const { return state_->buckets; }
inline const std::vector<std::vector<Tensor>>& GradReducer::groups() const { return state_->groups; }
inline comm::Communicator& GradReducer::comm() const { return *state_->comm; }

}  // namespace trident::parallel
