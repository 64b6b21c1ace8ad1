#include "parallel/pipeline/pipeline.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "autograd/checkpoint.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/allocator.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/index.h"

namespace trident::parallel::pipeline {

using autograd::TensorList;
using comm::Communicator;
using comm::P2POp;
using comm::Work;
using models::Batch;

std::string_view remat_name(Remat r) {
  switch (r) {
    case Remat::Always: return "always";
    case Remat::ExceptLast: return "except_last";
    case Remat::Never: return "never";
  }
  return "?";
}

Remat parse_remat(std::string_view name) {
  if (name == "always") return Remat::Always;
  if (name == "except_last") return Remat::ExceptLast;
  if (name == "never") return Remat::Never;
  TRIDENT_CHECK(false, "unknown re-materialization mode '", name, "'; choose always, except_last or never");
  return Remat::Never;
}

namespace {

// NOTE [Pipeline step]: a header is at most this many i64: count, then per tensor dtype, rank,
// sizes; an undefined activation (AmoebaNet's prev or aux before they exist) is dtype
// kUndefined with no rank or sizes, and nothing is transferred for it.
constexpr int64_t kUndefined = -1;
constexpr int64_t kHeaderLen = 64;

// The shapes of a micro-batch's tensors: both ends of a link see the same batch, so both know
// when the activation shapes may have changed.
std::string shape_key(const Batch& b) {
  std::string k;
  for (const auto& [name, t] : b.tensors()) {
    k += name + ':' + std::to_string(static_cast<int>(t.dtype()));
    for (int64_t d : t.sizes()) k += ',' + std::to_string(d);
    k += ';';
  }
  return k;
}

// NOTE [Pipeline on GPUs]: the device the model was moved to, placeholders included (Module::to
// moves them too), so that a stage whose layers hold no tensor still knows it.
Device model_device(const models::LayeredModel& model) {
  for (const Tensor& p : model.parameters()) return p.device();
  for (const Tensor& b : model.buffers()) return b.device();
  return Device::cpu();
}

// The micro-batches of `batch` on `dev`.
std::vector<Batch> split_to(const Batch& batch, int64_t parts, Device dev) {
  std::vector<Batch> micro = batch.split(parts);
  for (Batch& mb : micro) mb = mb.to(dev);
  return micro;
}

// NOTE [Stage-only model]: what stage `stage` of `balance` keeps of `model`, which it releases.
struct StageCut {
  std::map<std::string, int64_t> owners;                  // every state-dict entry: its first stage's rank
  std::vector<std::pair<std::string, Tensor>> held_state;  // this stage's state-dict entries
  int64_t released_bytes = 0;                              // released here (not already placeholders)
};

// `balance` has stages x chunks virtual stages; virtual stage vs runs on rank vs mod stages
// (NOTE [Interleaved schedule]).
StageCut cut_model(models::LayeredModel& model, const Balance& balance, int64_t stage, int64_t stages) {
  NoGradGuard no_grad;
  const auto& layers = model.layers();
  const auto ranges = stage_ranges(balance);
  // Each tensor of a layer with the first rank holding it, and whether this rank holds it.
  std::map<const TensorImpl*, int64_t> first;
  std::set<const TensorImpl*> mine;
  for (size_t vs = 0; vs < ranges.size(); ++vs) {
    const int64_t rank = static_cast<int64_t>(vs) % stages;
    for (int64_t i = ranges[vs].first; i < ranges[vs].second; ++i) {
      const nn::Module& layer = *layers[static_cast<size_t>(i)];
      std::vector<Tensor> tensors = layer.parameters();
      for (const Tensor& b : layer.buffers()) tensors.push_back(b);
      for (const Tensor& t : tensors) {
        first.emplace(t.impl(), rank);
        if (rank == stage) mine.insert(t.impl());
      }
    }
  }
  StageCut cut;
  std::set<std::string> state;  // the persistent entries' names (not their tensors: they would stay alive)
  for (const auto& [name, t] : model.state_dict()) state.insert(name);
  std::set<const TensorImpl*> released;
  std::set<std::string> devices;  // where tensors were released
  std::vector<std::pair<std::string, Tensor>> named = model.named_parameters();
  for (auto& nb : model.named_buffers()) named.push_back(std::move(nb));
  for (auto& [name, t] : named) {
    const auto f = first.find(t.impl());
    const bool held = f == first.end() || mine.count(t.impl()) != 0;  // no layer's: every rank keeps it
    if (state.count(name) != 0) {
      cut.owners[name] = f == first.end() ? 0 : f->second;
      if (held) cut.held_state.emplace_back(name, t);
    }
    // A tensor of one element or none is as small as its placeholder: kept.
    if (held || t.numel() <= 1 || is_broadcast_scalar(t) || !released.insert(t.impl()).second) continue;
    devices.insert(t.device().str());
    cut.released_bytes += release_to_placeholder(t);
  }
  // The caching allocators would keep the released blocks for this rank: give them back, so the
  // other ranks on the host (or GPU) can use them.
  for (const std::string& d : devices) empty_cache(Device::parse(d));
  return cut;
}

}  // namespace

Balance plan_balance(const models::LayerList& layers, int64_t ranks, const PipelineOptions& options) {
  const auto L = static_cast<int64_t>(layers.size());
  TRIDENT_CHECK(options.chunks >= 1, "pipeline: ", options.chunks, " chunks per stage; at least one is needed");
  const int64_t stages = ranks * options.chunks;  // virtual stages (NOTE [Interleaved schedule])
  TRIDENT_CHECK(ranks >= 1 && stages <= L, "pipeline: ", ranks, " stages",
                options.chunks > 1 ? " of " + std::to_string(options.chunks) + " chunks each" : std::string(),
                " but the model has only ", L, " layers (every ", options.chunks > 1 ? "chunk" : "stage",
                " needs at least one)");
  if (!options.balance.empty()) {
    TRIDENT_CHECK(static_cast<int64_t>(options.balance.size()) == stages, "pipeline: the balance ",
                  balance_str(options.balance), " has ", options.balance.size(), " stages, not ", stages,
                  options.chunks > 1 ? " (" + std::to_string(ranks) + " ranks x " + std::to_string(options.chunks) + " chunks)"
                                     : std::string());
    check_balance(options.balance, L);
    return options.balance;
  }
  TRIDENT_CHECK(options.balance_by == BalanceBy::Parameters,
                "pipeline: a balance by time is profiled by the pipeline itself; plan_balance cuts by parameters or "
                "takes an explicit balance");
  std::vector<double> costs;
  for (int64_t i = 0; i < L; ++i)
    costs.push_back(static_cast<double>(layers.num_parameters(static_cast<size_t>(i), static_cast<size_t>(i) + 1)));
  return balance_by_costs(costs, stages);
}

void keep_stage(models::LayeredModel& model, const Balance& balance, int64_t stage, int64_t chunks) {
  check_balance(balance, static_cast<int64_t>(model.layers().size()));
  rank_layer_ranges(balance, stage, chunks);  // checks the stage and the chunks
  cut_model(model, balance, stage, static_cast<int64_t>(balance.size()) / chunks);
}

Pipeline::Pipeline(models::LayeredModel& model, std::shared_ptr<Communicator> pp, PipelineOptions options)
    : model_(model), pp_(std::move(pp)), options_(std::move(options)) {
  TRIDENT_CHECK(pp_ != nullptr, "pipeline: no pp communicator given");
  // NOTE [Pipeline on GPUs]: headers, losses and counts travel as host tensors.
  for (const Communicator* g : {pp_.get(), options_.dp.get()})
    TRIDENT_CHECK(g == nullptr || g->backend() != comm::Backend::NCCL, "pipeline: group '", g->name(),
                  "' is an NCCL communicator; the pipeline's pp and dp groups must carry host tensors too (MPI or local: ",
                  "CUDA activations are staged through pinned host memory); reduce the gradients over NCCL yourself ",
                  "(PipelineOptions::average_dp_gradients = false)");
  device_ = model_device(model_);
  const auto& layers = model_.layers();
  const auto K = static_cast<int64_t>(pp_->size());
  const auto L = static_cast<int64_t>(layers.size());
  const int64_t V = options_.chunks;
  TRIDENT_CHECK(options_.micro_batches >= 1, "pipeline: ", options_.micro_batches,
                " micro-batches; at least one is needed");
  TRIDENT_CHECK(V >= 1, "pipeline: ", V, " chunks per stage; at least one is needed");
  // NOTE [Interleaved schedule]
  TRIDENT_CHECK(V == 1 || K >= 2, "pipeline: ", V, " chunks per stage need at least two stages (group '", pp_->name(),
                "' has one rank)");
  TRIDENT_CHECK(V == 1 || options_.micro_batches % K == 0, "pipeline: ", V, " chunks per stage (the interleaved schedule) ",
                "take the micro-batches in groups of the ", K, " stages; ", options_.micro_batches,
                " micro-batches is not a multiple of ", K);
  TRIDENT_CHECK(K * V <= L, "pipeline: ", K, " stages (the ranks of group '", pp_->name(), "')",
                V > 1 ? " of " + std::to_string(V) + " chunks each" : std::string(), " but the model has only ", L,
                " layers (every ", V > 1 ? "chunk" : "stage", " needs at least one)");
  if (!options_.balance.empty()) {
    TRIDENT_CHECK(static_cast<int64_t>(options_.balance.size()) == K * V, "pipeline: the balance ",
                  balance_str(options_.balance), " has ", options_.balance.size(), " stages but group '", pp_->name(),
                  "' has ", K, " ranks (one stage per rank",
                  V > 1 ? ", " + std::to_string(V) + " chunks each: " + std::to_string(K * V) + " entries" : std::string(), ")");
    check_balance(options_.balance, L);
    balance_ = options_.balance;
  } else if (options_.balance_by == BalanceBy::Time) {
    TRIDENT_CHECK(options_.profile_batch.has_value(), "pipeline: balance by time needs options.profile_batch");
    balance_ = profile_balance(model_);
  } else {
    balance_ = plan_balance(layers, K, options_);
  }
  stage_ = pp_->rank();
  ranges_ = rank_layer_ranges(balance_, stage_, V);
  std::set<const TensorImpl*> seen;  // a tied parameter in two of this rank's chunks: once
  for (const auto& [b, e] : ranges_)
    for (auto& [name, p] : layers.named_parameters(b, e))
      if (seen.insert(p.impl()).second) params_.emplace_back(name, p);
  in_specs_.resize(static_cast<size_t>(V));
  out_specs_.resize(static_cast<size_t>(V));
  if (options_.deferred_batch_norm)
    for (const auto& [b, e] : ranges_)
      for (size_t i = b; i < e; ++i)
        for (nn::BatchNorm2d* bn : nn::defer_batch_norms(*layers[i]))
          if (std::find(deferred_bns_.begin(), deferred_bns_.end(), bn) == deferred_bns_.end()) deferred_bns_.push_back(bn);
  check_not_released();
  setup_tied_and_dp();
  release_other_stages();
  // NOTE [Interleaved schedule]: gradients on a communicator of their own.
  if (V > 1) pp_back_ = pp_->split(0, pp_->rank(), pp_->name() + "-back");
  std::vector<std::shared_ptr<Communicator>> keep{pp_};
  if (pp_back_) keep.push_back(pp_back_);
  if (options_.dp) keep.push_back(options_.dp);
  for (const Tied& t : tied_) keep.push_back(t.group);
  failures_ = std::make_unique<FailureChannel>(pp_, std::move(keep));
}

Pipeline::~Pipeline() = default;

Balance Pipeline::profile_balance(models::LayeredModel& model) {
  // torchgpipe's balance_by_time: each layer's forward and backward timed alone on the profile
  // batch (the second of two runs, the first warming caches up), by pp rank 0 only, so that
  // every rank cuts at the same places.
  const auto& layers = model.layers();
  const size_t L = layers.size();
  Tensor costs = zeros({static_cast<int64_t>(L)}, DType::F64);
  if (pp_->rank() == 0) {
    const Batch& batch = *options_.profile_batch;
    std::vector<double> t(L, 0.0);
    for (int rep = 0; rep < 2; ++rep) {
      TensorList x;
      for (size_t i = 0; i < L; ++i) {
        TensorList in;
        for (const Tensor& a : x) {
          Tensor d = a.detach();
          if (is_floating(d.dtype())) d.set_requires_grad(true);
          in.push_back(d);
        }
        const double start = timeline_now();
        TensorList out = layers.run(batch, in, i, i + 1);
        if (i + 1 == L) {
          model.loss(out, batch).backward();
        } else {
          TensorList roots, grads;
          for (const Tensor& o : out)
            if (o.defined() && o.requires_grad()) {
              roots.push_back(o);
              grads.push_back(ones_like(o));
            }
          if (!roots.empty()) autograd::backward(roots, grads);
        }
        t[i] = timeline_now() - start;
        x.clear();
        for (const Tensor& o : out) x.push_back(o.detach());
      }
    }
    model.zero_grad();
    auto* p = static_cast<double*>(costs.data_ptr());
    for (size_t i = 0; i < L; ++i) p[i] = t[i];
  }
  pp_->broadcast(costs, 0).wait();
  return balance_by_costs(costs.to_vector<double>(), pp_->size() * options_.chunks);
}

void Pipeline::setup_tied_and_dp() {
  NoGradGuard no_grad;
  const auto ranges = stage_ranges(balance_);
  // The rank holding a layer (its virtual stage's, NOTE [Interleaved schedule]).
  auto stage_of = [&](size_t layer) {
    for (size_t s = 0; s < ranges.size(); ++s)
      if (static_cast<int64_t>(layer) < ranges[s].second) return static_cast<int64_t>(s) % pp_->size();
    return (static_cast<int64_t>(ranges.size()) - 1) % pp_->size();
  };
  std::vector<Work> works;
  for (const models::TiedParameter& tp : model_.layers().tied()) {
    std::set<int64_t> holders;
    for (size_t l : tp.layers) holders.insert(stage_of(l));
    if (holders.size() < 2) continue;  // the same on every rank: no split
    const bool member = holders.count(stage_) != 0;
    auto group = pp_->split(member ? 0 : 1, pp_->rank(), pp_->name() + "-tied-" + tp.name);
    if (!member) continue;
    tied_.push_back({tp.tensor, group});
    // The first holder's values, so the copies start (and, with equal gradients, stay) equal.
    works.push_back(group->broadcast(tp.tensor, 0));
  }
  if (options_.dp && options_.dp->size() > 1)
    for (const auto& [name, p] : params_) works.push_back(options_.dp->broadcast(p, 0));
  comm::wait_all(works);
}

void Pipeline::check_not_released() {
  // NOTE [Stage-only model]: a model an earlier pipeline cut holds placeholders where that
  // pipeline's other stages were; a new cut may need them. Agreed over pp, so every rank fails.
  std::string mine;
  for (size_t i = 0; i < model_.layers().size() && mine.empty(); ++i) {
    if (!holds_layer(i)) continue;
    std::vector<std::pair<std::string, Tensor>> named = model_.layers()[i]->named_parameters();
    for (auto& nb : model_.layers()[i]->named_buffers()) named.push_back(std::move(nb));
    for (const auto& [name, t] : named)
      if (is_broadcast_scalar(t)) {
        mine = model_.layers().name(i) + "." + name;
        break;
      }
  }
  Tensor any = scalar_tensor(mine.empty() ? 0.0 : 1.0, DType::F64);
  pp_->all_reduce(any, comm::ReduceOp::Max).wait();
  TRIDENT_CHECK(any.item<double>() == 0, "pipeline: ",
                mine.empty() ? "another stage's layers hold" : "stage " + std::to_string(stage_) + "'s " + mine + " is",
                " a tensor an earlier pipeline over this model released (NOTE [Stage-only model]: a pipeline keeps only "
                "its stage's tensors); build the model again for another pipeline, or cut it the same way");
}

void Pipeline::release_other_stages() {
  StageCut cut = cut_model(model_, balance_, stage_, pp_->size());
  owners_ = std::move(cut.owners);
  held_state_ = std::move(cut.held_state);
  released_bytes_ = cut.released_bytes;
}

std::map<std::string, Tensor> Pipeline::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : held_state_) out.emplace(name, t.detach());
  return out;
}

void Pipeline::set_loss_scale(double scale) {
  TRIDENT_CHECK(scale > 0 && std::isfinite(scale), where(), ": the loss scale must be positive and finite, got ", scale);
  loss_scale_ = scale;
}

std::vector<Tensor> Pipeline::parameters() const {
  std::vector<Tensor> v;
  for (const auto& [name, p] : params_) v.push_back(p);
  return v;
}

void Pipeline::zero_grad() {
  for (auto& [name, p] : params_) p.zero_grad(/*set_to_none=*/false);
}

bool Pipeline::holds_layer(size_t i) const {
  return std::any_of(ranges_.begin(), ranges_.end(), [i](const auto& r) { return i >= r.first && i < r.second; });
}

std::string Pipeline::where() const {
  const auto& layers = model_.layers();
  std::string held;
  for (const auto& [b, e] : ranges_) held += (held.empty() ? "" : ", ") + layers.name(b) + " .. " + layers.name(e - 1);
  return "pipeline stage " + std::to_string(stage_) + " of " + std::to_string(num_stages()) + " (rank " +
         std::to_string(pp_->rank()) + " of '" + pp_->name() + "', layers " + held + ")";
}

void Pipeline::record(EventKind kind, int64_t m, double start, int64_t chunk) {
  // forward_only()'s transfers are not part of a step's timeline.
  if (options_.timeline && !forward_only_) events_.push_back({kind, m, start, timeline_now(), chunk});
}

double Pipeline::step(const Batch& batch) { return step_with(batch, nullptr); }

double Pipeline::step(const Batch& batch, const std::vector<double>& counts) { return step_with(batch, &counts); }

double Pipeline::step_with(const Batch& batch, const std::vector<double>* given_counts) {
  TRIDENT_CHECK(failures_ && !failures_->failed(), where(), ": the pipeline failed in an earlier step and cannot be used again");
  const int64_t M = options_.micro_batches;
  const int64_t B = batch.size();
  TRIDENT_CHECK(B % M == 0, "pipeline: ", M, " micro-batches do not divide the batch of ", B, " rows");
  const std::vector<Batch> micro = split_to(batch, M, device_);
  const std::string key = shape_key(micro.front());
  const bool new_shapes = key != shape_key_;
  shape_key_ = key;

  const int64_t base = memory_stats(device_).current_bytes;
  reset_peak_memory_stats(device_);
  events_.clear();
  step_loss_ = 0;
  try {
    std::vector<double> counts;
    if (stage_ + 1 == num_stages()) counts = given_counts != nullptr ? *given_counts : model_.loss_counts(batch);
    run_step(micro, counts, new_shapes);
    peak_activation_bytes_ = memory_stats(device_).peak_bytes - base;
    finish_step();
  } catch (const std::exception& e) {
    fail(e);
  }
  return step_loss_;
}

void Pipeline::fail(const std::exception& e) {
  in_flight_.clear();
  in_backward_ = false;
  forward_only_ = false;
  if (failures_->failed()) throw;  // another rank's failure (or this rank's, already reported)
  const auto* te = dynamic_cast<const Error*>(&e);
  failures_->fail(where() + " failed: " + (te ? te->message() : std::string(e.what())));
  TRIDENT_FAIL(where(), " failed");  // fail() throws; never reached
}

models::Activations Pipeline::forward_only(const Batch& batch) {
  TRIDENT_CHECK(failures_ && !failures_->failed(), where(), ": the pipeline failed in an earlier step and cannot be used again");
  const int64_t B = batch.size(), M = options_.micro_batches;
  NoGradGuard no_grad;
  forward_only_ = true;
  try {
    models::Activations out = run_forward_only(split_to(batch, B >= M && B % M == 0 ? M : 1, device_));
    forward_only_ = false;
    return out;
  } catch (const std::exception& e) {
    fail(e);
  }
}

models::Activations Pipeline::run_forward_only(const std::vector<Batch>& micro) {
  std::vector<TensorList> outs, sent;  // the last virtual stage's outputs; the others', being sent
  std::vector<Work> sends;
  // Chunk after chunk (NOTE [Interleaved schedule]: the order the next rank receives in).
  for (int64_t c = 0; c < chunks(); ++c) {
    const bool first = is_first(c), last = is_last(c);
    std::vector<Spec> in_specs, out_specs;
    const auto [begin, end] = ranges_[static_cast<size_t>(c)];
    for (size_t m = 0; m < micro.size(); ++m) {
      TensorList in;
      const auto mi = static_cast<int64_t>(m);
      if (!first) {
        if (m == 0) in_specs = recv_header(mi, c);
        in = recv_activations(in_specs, mi, c);
      }
      TensorList out = model_.layers().run(micro[m], in, begin, end);
      if (!last) {
        if (m == 0) sends.push_back(pp_->send(header_of(out, out_specs), next_rank()));
        sends.push_back(send_activations(out, out_specs, mi, c));
      }
      (last ? outs : sent).push_back(std::move(out));  // alive until their sends are done
      for (Work& w : sends) w.test();
      failures_->check();
    }
  }
  for (Work& w : sends) failures_->wait(w);
  if (!is_last(chunks() - 1)) return {};
  if (outs.size() == 1) return outs.front();
  TensorList whole;
  for (size_t i = 0; i < outs.front().size(); ++i) {
    if (!outs.front()[i].defined()) {
      whole.emplace_back();
      continue;
    }
    std::vector<Tensor> parts;
    for (const TensorList& o : outs) parts.push_back(o[i]);
    whole.push_back(cat(parts, 0));
  }
  return whole;
}

Tensor Pipeline::header_of(const TensorList& outputs, std::vector<Spec>& specs) const {
  specs.clear();
  std::vector<int64_t> h{static_cast<int64_t>(outputs.size())};
  for (const Tensor& o : outputs) {
    if (!o.defined()) {
      specs.push_back({DType::F32, {}, false});
      h.push_back(kUndefined);
      continue;
    }
    specs.push_back({o.dtype(), o.sizes(), true});
    h.push_back(static_cast<int64_t>(o.dtype()));
    h.push_back(static_cast<int64_t>(o.sizes().size()));
    for (int64_t d : o.sizes()) h.push_back(d);
  }
  TRIDENT_CHECK(static_cast<int64_t>(h.size()) <= kHeaderLen, where(), ": ", outputs.size(), " activations need a header of ",
                h.size(), " numbers; at most ", kHeaderLen, " fit");
  h.resize(kHeaderLen, 0);
  return from_vector<int64_t>(h, {kHeaderLen});
}

std::vector<Pipeline::Spec> Pipeline::specs_of(const Tensor& header) {
  const std::vector<int64_t> v = header.to_vector<int64_t>();
  std::vector<Spec> specs;
  size_t i = 1;
  for (int64_t t = 0; t < v[0]; ++t) {
    if (v[i] == kUndefined) {
      specs.push_back({DType::F32, {}, false});
      i += 1;
      continue;
    }
    Spec s{static_cast<DType>(v[i]), {}, true};
    const auto rank = static_cast<size_t>(v[i + 1]);
    s.sizes.assign(v.begin() + static_cast<std::ptrdiff_t>(i + 2), v.begin() + static_cast<std::ptrdiff_t>(i + 2 + rank));
    i += 2 + rank;
    specs.push_back(std::move(s));
  }
  return specs;
}

std::vector<Pipeline::Spec> Pipeline::recv_header(int64_t m, int64_t chunk) {
  Tensor h = zeros({kHeaderLen}, DType::I64);
  const double start = timeline_now();
  Work w = pp_->recv(h, prev_rank());
  failures_->wait(w);
  record(EventKind::Recv, m, start, chunk);
  return specs_of(h);
}

Work Pipeline::send_activations(const TensorList& outputs, const std::vector<Spec>& specs, int64_t m, int64_t chunk) {
  TRIDENT_CHECK(outputs.size() == specs.size(), where(), ": micro-batch ", m, " gave ", outputs.size(),
                " activations but micro-batch 0 gave ", specs.size());
  std::vector<P2POp> ops;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    const Spec& spec = specs[i];
    TRIDENT_CHECK(o.defined() == spec.defined && (!o.defined() || (o.dtype() == spec.dtype && o.sizes() == spec.sizes)),
                  where(), ": activation ", i, " of micro-batch ", m,
                  " differs in shape, dtype or definedness from micro-batch 0's");
    if (o.defined()) ops.push_back(comm::send_op(o.detach(), next_rank()));
  }
  const double start = timeline_now();
  Work w = pp_->batch_send_recv(ops);
  record(EventKind::Send, m, start, chunk);
  return w;
}

TensorList Pipeline::recv_activations(const std::vector<Spec>& specs, int64_t m, int64_t chunk) {
  TensorList in;
  std::vector<P2POp> ops;
  for (const Spec& s : specs) {
    if (!s.defined) {
      in.emplace_back();
      continue;
    }
    in.push_back(empty(s.sizes, TensorOptions(s.dtype).device(device_)));
    ops.push_back(comm::recv_op(in.back(), prev_rank()));
  }
  const double start = timeline_now();
  Work w = pp_->batch_send_recv(ops);
  failures_->wait(w);
  record(EventKind::Recv, m, start, chunk);
  return in;
}

void Pipeline::run_step(const std::vector<Batch>& micro, const std::vector<double>& counts, bool new_shapes) {
  const std::vector<Action> actions = schedule_actions(options_.schedule, stage_, num_stages(), options_.micro_batches, chunks());
  size_t last_backward = 0;
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].kind == Action::Kind::Backward) last_backward = i;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const auto m = a.micro_batch;
    if (a.kind == Action::Kind::Forward) {
      forward(m, a.chunk, micro[static_cast<size_t>(m)], counts, new_shapes && m == 0);
    } else {
      backward(m, a.chunk);
      if (i == last_backward && after_last_backward_) after_last_backward_();
    }
    // Let the sends progress, and learn early of another stage's failure.
    for (Work& w : sends_) w.test();
    failures_->check();
  }
}

void Pipeline::forward(int64_t m, int64_t chunk, const Batch& mb, const std::vector<double>& counts, bool exchange_header) {
  const bool first = is_first(chunk), last = is_last(chunk);
  const auto c = static_cast<size_t>(chunk);
  std::vector<Spec>& in_specs = in_specs_[c];
  std::vector<Spec>& out_specs = out_specs_[c];
  MicroState st;
  if (!first) {
    if (exchange_header) in_specs = recv_header(m, chunk);
    st.inputs = recv_activations(in_specs, m, chunk);
    for (Tensor& x : st.inputs)
      if (x.defined() && is_floating(x.dtype())) x.set_requires_grad(true);
  }

  const bool remat = options_.remat == Remat::Always ||
                     (options_.remat == Remat::ExceptLast && m + 1 != options_.micro_batches);
  const auto [begin, end] = ranges_[c];
  const autograd::CheckpointFn fn = [this, mb, m, chunk, begin = begin, end = end](const TensorList& in) {
    const double start = timeline_now();
    TensorList out = model_.layers().run(mb, in, begin, end);
    if (in_backward_) record(EventKind::Recompute, m, start, chunk);  // checkpoint's re-run
    return out;
  };
  const double start = timeline_now();
  st.outputs = remat ? autograd::checkpoint(fn, st.inputs) : fn(st.inputs);
  if (last) {
    st.loss = model_.loss(st.outputs, mb, counts);
    step_loss_ += st.loss.detach().to(DType::F64).item<double>();
  }
  record(EventKind::Forward, m, start, chunk);

  if (!last) {
    if (exchange_header) sends_.push_back(pp_->send(header_of(st.outputs, out_specs), next_rank()));
    sends_.push_back(send_activations(st.outputs, out_specs, m, chunk));
  }
  in_flight_[{chunk, m}] = std::move(st);
}

void Pipeline::backward(int64_t m, int64_t chunk) {
  const bool first = is_first(chunk), last = is_last(chunk);
  auto it = in_flight_.find({chunk, m});
  TRIDENT_ASSERT(it != in_flight_.end(), "backward of micro-batch ", m, " (chunk ", chunk, ") before its forward");
  MicroState st = std::move(it->second);
  in_flight_.erase(it);
  TensorList roots, grads;
  if (last) {
    // set_loss_scale: GradScaler::scale's product, so the gradients are the serial scaled ones.
    roots.push_back(loss_scale_ == 1.0 ? st.loss : mul(st.loss, loss_scale_));
  } else {
    std::vector<P2POp> ops;
    for (const Tensor& o : st.outputs) {
      if (!o.defined() || !is_floating(o.dtype())) continue;
      Tensor g = empty(o.sizes(), TensorOptions(o.dtype()).device(o.device()));
      ops.push_back(comm::recv_op(g, next_rank()));
      if (o.requires_grad()) {
        roots.push_back(o);
        grads.push_back(g);
      }
    }
    const double s = timeline_now();
    Work w = grads_comm().batch_send_recv(ops);
    failures_->wait(w);
    record(EventKind::Recv, m, s, chunk);
  }
  const double start = timeline_now();
  in_backward_ = true;
  if (!roots.empty()) autograd::backward(roots, grads);
  in_backward_ = false;
  record(EventKind::Backward, m, start, chunk);
  st.outputs.clear();
  st.loss = Tensor();

  if (!first) {
    std::vector<P2POp> ops;
    for (const Tensor& x : st.inputs) {
      if (!x.defined() || !is_floating(x.dtype())) continue;
      ops.push_back(comm::send_op(x.grad().defined() ? x.grad() : zeros_like(x), prev_rank()));
    }
    const double s = timeline_now();
    sends_.push_back(grads_comm().batch_send_recv(ops));
    record(EventKind::Send, m, s, chunk);
  }
}

void Pipeline::finish_step() {
  // NOTE [Deferred batch norm]: every micro-batch's forward ran; the running statistics move once,
  // by the whole global batch's statistics (every dp rank's rows) under dp.
  if (options_.dp && options_.dp->size() > 1)
    nn::commit_deferred_batch_norms(deferred_bns_, [this](Tensor& t) {
      Work w = options_.dp->all_reduce(t);
      failures_->wait(w);
    });
  else
    nn::commit_deferred_batch_norms(deferred_bns_);
  for (Work& w : sends_) failures_->wait(w);
  sends_.clear();
  std::vector<Work> works;
  // Tied parameters: the sum of every holder's part of the gradient.
  for (Tied& t : tied_) {
    if (!t.tensor.grad().defined()) t.tensor.set_grad(zeros_like(t.tensor));
    works.push_back(t.group->all_reduce(t.tensor.grad()));
  }
  for (Work& w : works) failures_->wait(w);
  works.clear();
  if (options_.dp && options_.dp->size() > 1 && options_.average_dp_gradients) {
    for (auto& [name, p] : params_) {
      if (!p.grad().defined()) p.set_grad(zeros_like(p));
      works.push_back(options_.dp->all_reduce(p.grad(), comm::ReduceOp::Average));
    }
  }
  // The mini-batch loss, from the last stage to every rank (and averaged over dp).
  Tensor loss = scalar_tensor(step_loss_, DType::F64);
  works.push_back(pp_->broadcast(loss, pp_->size() - 1));
  for (Work& w : works) failures_->wait(w);
  if (options_.dp && options_.dp->size() > 1) {
    Work w = options_.dp->all_reduce(loss, comm::ReduceOp::Average);
    failures_->wait(w);
  }
  step_loss_ = loss.item<double>();
}

PipelineTrace Pipeline::gather_trace() const {
  const int K = pp_->size();
  constexpr size_t kPer = 5;  // numbers per event
  Tensor count = full({1}, static_cast<double>(events_.size() * kPer), DType::I64);
  Tensor counts = zeros({K}, DType::I64);
  pp_->all_gather(counts, count).wait();
  const std::vector<int64_t> c = counts.to_vector<int64_t>();
  int64_t total = 0;
  for (int64_t x : c) total += x;
  std::vector<double> mine;
  for (const Event& e : events_) {
    mine.insert(mine.end(), {static_cast<double>(e.kind), static_cast<double>(e.micro_batch), e.start, e.end,
                             static_cast<double>(e.chunk)});
  }
  Tensor all = zeros({total}, DType::F64);
  pp_->all_gather(all, from_vector<double>(mine, {static_cast<int64_t>(mine.size())}), c).wait();
  const std::vector<double> v = all.to_vector<double>();
  PipelineTrace trace;
  trace.micro_batches = options_.micro_batches;
  trace.chunks = chunks();
  trace.stages.resize(static_cast<size_t>(K));
  double t0 = 0;
  bool any = false;
  size_t i = 0;
  for (int s = 0; s < K; ++s)
    for (int64_t j = 0; j < c[static_cast<size_t>(s)]; j += kPer, i += kPer) {
      trace.stages[static_cast<size_t>(s)].push_back({static_cast<EventKind>(static_cast<int>(v[i])),
                                                      static_cast<int64_t>(v[i + 1]), v[i + 2], v[i + 3],
                                                      static_cast<int64_t>(v[i + 4])});
      t0 = any ? std::min(t0, v[i + 2]) : v[i + 2];
      any = true;
    }
  for (auto& s : trace.stages)
    for (Event& e : s) {
      e.start -= t0;
      e.end -= t0;
    }
  return trace;
}

std::vector<int64_t> Pipeline::gather_peak_activation_bytes() const {
  Tensor mine = full({1}, static_cast<double>(peak_activation_bytes_), DType::I64);
  Tensor all = zeros({pp_->size()}, DType::I64);
  pp_->all_gather(all, mine).wait();
  return all.to_vector<int64_t>();
}

}  // namespace trident::parallel::pipeline
