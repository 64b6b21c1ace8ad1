#include "parallel/grad_reducer.h"

#include <cstring>
#include <unordered_set>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"

namespace trident::parallel {
Tensor GradReducer::slot_view(const Tensor& flat, const Slot& s) {
  return flat.as_strided(s.param.sizes(), contiguous_strides(s.param.sizes()), flat.storage_offset() + s.offset);
}

bool GradReducer::is_slot_view(const Tensor& g, const Tensor& flat, const Slot& s) {
  return g.defined() && g.storage() == flat.storage() && g.storage_offset() == flat.storage_offset() + s.offset &&
         g.is_contiguous();
}

GradReducer::GradReducer(std::vector<std::vector<Tensor>> groups, std::shared_ptr<comm::Communicator> group, Mode mode,
                         int64_t bucket_bytes, int pad_to, const std::vector<Tensor>& last)
    : state_(std::make_shared<State>()) {
  TRIDENT_CHECK(group != nullptr, "data parallelism: the dp communicator is null");
  TRIDENT_CHECK(bucket_bytes > 0, "data parallelism: bucket_bytes must be positive, got ", bucket_bytes);
  TRIDENT_CHECK(pad_to >= 1, "data parallelism: pad_to must be >= 1, got ", pad_to);
  State& st = *state_;
  st.comm = std::move(group);
  st.mode = mode;
  st.groups = std::move(groups);

  // Registration order over all groups; every parameter once.
  struct Param {
    Tensor t;
    size_t group;
  };
  std::vector<Param> params;
  std::unordered_set<const TensorImpl*> seen;
  for (size_t g = 0; g < st.groups.size(); ++g) {
    for (size_t j = 0; j < st.groups[g].size(); ++j) {
      const Tensor& p = st.groups[g][j];
      TRIDENT_CHECK(p.defined(), "data parallelism: parameter ", j, " of group ", g, " is undefined");
      TRIDENT_CHECK(p.is_leaf() && p.requires_grad(), "data parallelism: parameter ", params.size(), " (shape ",
                    p.sizes(), ") must be a leaf that requires grad");
      TRIDENT_CHECK(is_floating(p.dtype()), "data parallelism: parameter ", params.size(), " has dtype ", p.dtype());
      // MPI and Local carry CPU tensors and stage CUDA ones through pinned memory (NOTE [Host
      // staging]); NCCL carries CUDA tensors only.
      TRIDENT_CHECK(p.device().is_cuda() || st.comm->backend() != comm::Backend::NCCL, "data parallelism: parameter ",
                    params.size(), " is on ", p.device(), " but the dp group's backend (NCCL) carries CUDA tensors");
      TRIDENT_CHECK(seen.insert(p.impl()).second, "data parallelism: parameter ", params.size(), " (shape ", p.sizes(),
                    ") is listed twice");
      params.push_back({p, g});
    }
  }
  TRIDENT_CHECK(!params.empty(), "data parallelism: no parameters");

  std::unordered_set<const TensorImpl*> held;
  for (size_t j = 0; j < last.size(); ++j) {
    TRIDENT_CHECK(last[j].defined() && seen.count(last[j].impl()) != 0, "data parallelism: parameter ", j,
                  " of those to reduce last (shape ", last[j].defined() ? last[j].sizes() : Shape{},
                  ") is not one of the parameters");
    held.insert(last[j].impl());
  }

  // NOTE [Gradient buckets]: reverse registration order, one dtype and group per bucket; the
  // `last` parameters after all the others, from a bucket of their own on.
  st.where.resize(params.size());
  st.ready.assign(params.size(), false);
  for (const bool held_pass : {false, true}) {
    bool fresh = held_pass;  // the first held parameter opens a bucket
    if (held_pass) st.first_last_bucket = st.buckets.size();
    for (size_t k = params.size(); k-- > 0;) {
      const Param& p = params[k];
      if ((held.count(p.t.impl()) != 0) != held_pass) continue;
      const int64_t bytes = static_cast<int64_t>(p.t.nbytes());
      Bucket* b = st.buckets.empty() ? nullptr : &st.buckets.back();
      if (fresh || !b || b->dtype != p.t.dtype() || b->group != p.group ||
          (b->numel > 0 && (b->numel * static_cast<int64_t>(itemsize(b->dtype)) + bytes > bucket_bytes))) {
        st.buckets.push_back(Bucket{});
        b = &st.buckets.back();
        b->group = p.group;
        b->dtype = p.t.dtype();
        fresh = false;
      }
      b->slots.push_back({p.t, k, b->numel, p.t.numel()});
      b->numel += p.t.numel();
      st.where[k] = {st.buckets.size() - 1, b->slots.size() - 1};
    }
  }
  for (Bucket& b : st.buckets) {
    b.padded = (b.numel + pad_to - 1) / pad_to * pad_to;
    if (b.padded == 0) b.padded = pad_to;  // a bucket of empty parameters still has a shard per rank
    b.grads = zeros({b.padded}, TensorOptions(b.dtype).device(b.slots.front().param.device()));
  }

  std::weak_ptr<State> weak = state_;
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor p = params[k].t;
    p.register_post_accumulate_grad_hook([weak, k](const Tensor&) {
      if (auto s = weak.lock()) s->on_grad_ready(k);
    });
  }
}

GradReducer::~GradReducer() {
  // Hooks hold the state weakly and turn into no-ops; transfers in flight finish on their own.
  try {
    if (state_->round_open) state_->finish();
  } catch (const Error&) {
  }
}

void GradReducer::finish() { state_->finish(); }

void GradReducer::reduce() {
  State& st = *state_;
  TRIDENT_CHECK(!st.round_open, "data parallelism: reduce() while a backward's reduction is in progress");
  st.reset_round();
  st.finish();  // every slot from .grad, every bucket launched in order and waited for
}

void GradReducer::reduce_async(bool hold_last) {
  State& st = *state_;
  TRIDENT_CHECK(!st.round_open, "data parallelism: reduce_async() while a reduction is in progress");
  st.reset_round();
  st.round_backward = State::kAsyncRound;
  st.launch_all(hold_last ? st.first_last_bucket : st.buckets.size());
}

void GradReducer::State::reset_round() {
  round_open = true;
  next_launch = 0;
  std::fill(ready.begin(), ready.end(), false);
  for (Bucket& b : buckets) {
    b.pending = static_cast<int>(b.slots.size());
    b.launched = false;
    b.work = comm::Work();
  }
}

void GradReducer::State::open_round(uint64_t backward_id) {
  reset_round();
  round_backward = backward_id;
  // Weak: the callback must not keep a destroyed reducer alive (nor touch it).
  autograd::queue_callback([weak = weak_from_this()] {
    if (auto self = weak.lock()) self->finish();
  });
}

void GradReducer::State::abandon_round() {
  // The backward that opened this round failed before its end. Its launched collectives stay
  // with the communicator, which completes them (they were issued in the same order on every
  // rank, if the failure was everywhere); the next round starts clean.
  round_open = false;
}

void GradReducer::State::on_grad_ready(size_t index) {
  if (!sync) return;
  TRIDENT_CHECK(!(round_open && round_backward == kAsyncRound), "data parallelism: a backward with sync on while ",
                "reduce_async()'s reduction is in flight; call finish() first");
  const uint64_t id = autograd::current_backward_id();
  if (round_open && id != round_backward) abandon_round();
  if (!round_open) open_round(id);
  const auto [bi, si] = where[index];
  Bucket& b = buckets[bi];
  const Slot& s = b.slots[si];
  TRIDENT_CHECK(!ready[index], "data parallelism: parameter ", index, " (shape ", s.param.sizes(),
                ") received its gradient twice in one backward (used by two checkpointed segments, or backward ran "
                "again before the reduction finished); its first gradient was not final (NOTE [Gradient buckets])");
  TRIDENT_CHECK(!b.launched, "data parallelism: parameter ", index, " became ready after its bucket was launched");
  ready[index] = true;
  fill_slot(b, s);
  --b.pending;
  launch_ready();
  poll_in_flight();
}

void GradReducer::State::fill_slot(Bucket& b, const Slot& s) {
  NoGradGuard no_grad;
  const Tensor& g = s.param.grad();
  if (is_slot_view(g, b.grads, s)) return;  // accumulated straight into the bucket
  Tensor view = slot_view(b.grads, s);
  if (g.defined()) {
    copy_(view, g);
  } else {
    fill_(view, 0.0);
  }
}

void GradReducer::State::launch_ready() {
  while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(buckets[next_launch++]);
}

void GradReducer::State::launch(Bucket& b) {
  b.launched = true;
  if (mode == Mode::AllReduce) {
    b.work = comm->all_reduce(b.grads, comm::ReduceOp::Average);
  } else {
    const int64_t shard = b.shard_numel(comm->size());
    const Tensor mine = b.grads.as_strided({shard}, {1}, b.grads.storage_offset() + comm->rank() * shard);
    b.work = comm->reduce_scatter(mine, b.grads, comm::ReduceOp::Average);
  }
}

void GradReducer::State::poll_in_flight() {
  for (size_t i = 0; i < next_launch; ++i) {
    if (!buckets[i].work.completed()) buckets[i].work.test();
  }
}

void GradReducer::State::launch_all(size_t end) {
  // Parameters whose hook did not fire contribute what they have (NOTE [Gradient buckets]).
  for (size_t i = 0; i < end; ++i) {
    Bucket& b = buckets[i];
    if (b.launched) continue;
    for (const Slot& s : b.slots) {
      if (ready[s.index]) continue;
      ready[s.index] = true;
      fill_slot(b, s);
      --b.pending;
    }
  }
  launch_ready();
  TRIDENT_ASSERT(next_launch == end, "data parallelism: ", end - next_launch, " buckets were not launched");
}

void GradReducer::State::finish() {
  if (!round_open) return;
  launch_all(buckets.size());
  round_open = false;  // even if a wait throws: the next backward starts a new round
  NoGradGuard no_grad;
  for (Bucket& b : buckets) {
    b.work.wait();
    if (mode != Mode::AllReduce) continue;
    for (const Slot& s : b.slots) {
      // .grad becomes the slot itself, so the next backward accumulates straight into the
      // bucket (unless someone replaces or drops it: then the hook copies).
      if (!is_slot_view(s.param.grad(), b.grads, s)) Tensor(s.param).set_grad(slot_view(b.grads, s));
    }
  }
  ++rounds_finished;
}

}  // namespace trident::parallel
