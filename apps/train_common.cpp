#include "apps/train_common.h"

#include "apps/device.h"
#include "apps/evaluation.h"
#include "apps/mfu.h"
#include "apps/throughput.h"

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "core/allocator.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "nn/checkpoint.h"
#include "nn/grad_scaler.h"
#include "nn/optim/adam.h"
#include "nn/optim/rmsprop.h"
#include "nn/optim/sgd.h"
#include "ops/cpu/bgemm_amx.h"
#include "nn/normalization.h"
#include "nn/optim/clip_grad.h"
#include "parallel/tensor_parallel/checkpoint.h"
#include "parallel/tensor_parallel/grad_norm.h"
#include "nn/optim/schedule.h"
#include "nn/training_checkpoint.h"
#include "ops/autocast.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "parallel/checkpoint.h"
#include "trident_config.h"
#if TRIDENT_HAVE_CUDA
#include "core/cuda/stream.h"
#include "parallel/comm/nccl_communicator.h"
#endif
#include "parallel/data_parallel.h"
#include "parallel/launch.h"
#include "parallel/pipeline/grad_norm.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/zero.h"

namespace trident::apps {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

bool g_lead = true;  // make_mesh() sets it: world rank 0

// NOTE [Parallel training apps]: of every global batch of the shuffled order (the batches a
// serial loader with batch_size = global_batch and drop_last makes), the rows dp_batch_rows
// gives this dp rank; a loader over it with batch_size = global_batch / dp yields them as its
// batches, in step with the other ranks.
class GlobalBatchShardSampler final : public data::Sampler {
 public:
  GlobalBatchShardSampler(int64_t n, uint64_t seed, int64_t global_batch, const parallel::comm::Communicator& dp)
      : n_(n), seed_(seed), global_(global_batch), rows_(parallel::dp_batch_rows(global_batch, dp)) {}
  int64_t size() const override { return n_ / global_ * rows_.second; }
  std::vector<int64_t> indices(int64_t epoch) const override {
    const std::vector<int64_t> order = data::permutation(n_, seed_, epoch);
    std::vector<int64_t> mine;
    mine.reserve(static_cast<size_t>(size()));
    for (int64_t b = 0; b < n_ / global_; ++b)
      for (int64_t i = 0; i < rows_.second; ++i) mine.push_back(order[static_cast<size_t>(b * global_ + rows_.first + i)]);
    return mine;
  }

 private:
  int64_t n_;
  uint64_t seed_;
  int64_t global_;
  std::pair<int64_t, int64_t> rows_;
};

// The mean over the dp group (a no-op on one rank).
double dp_average(parallel::comm::Communicator& dp, double v) {
  if (dp.size() == 1) return v;
  Tensor t = scalar_tensor(v, kF64);
  dp.all_reduce(t, parallel::comm::ReduceOp::Average).wait();
  return t.item<double>();
}


std::string format_duration(double s) {
  char buf[32];
  const int64_t t = static_cast<int64_t>(std::max(0.0, s));
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(t / 3600), static_cast<long long>(t / 60 % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  return buf;
}

// Writes a gnuplot script plotting train loss (and val loss) from the metrics file; returns
// whether the PNG was made.
bool plot_losses(const std::string& metrics, const std::string& png, const std::string& title) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return false;
  const std::string dir = std::filesystem::path(png).parent_path().string();
  const std::string train_dat = png + ".train.dat", val_dat = png + ".val.dat";
  std::ifstream in(metrics);
  std::ofstream tr(train_dat), va(val_dat);
  std::string line;
  int64_t n_val = 0;
  while (std::getline(in, line)) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step")) continue;
    if (j.contains("loss")) tr << j["step"].get<int64_t>() << ' ' << j["loss"].get<double>() << '\n';
    if (j.contains("val_loss")) {
      va << j["step"].get<int64_t>() << ' ' << j["val_loss"].get<double>() << '\n';
      ++n_val;
    }
  }
  tr.close();
  va.close();
  const std::string script = png + ".gp";
  {
    std::ofstream gp(script);
    gp << "set terminal pngcairo size 900,540 noenhanced\n"
       << "set output '" << png << "'\n"
       << "set title '" << title << "'\n"
       << "set xlabel 'step'\nset ylabel 'loss'\nset grid\n"
       << "plot '" << train_dat << "' using 1:2 with lines title 'train loss'";
    if (n_val > 0) gp << ", '" << val_dat << "' using 1:2 with linespoints title 'validation loss'";
    gp << '\n';
  }
  int rc = std::system(("gnuplot '" + script + "' 2>/dev/null").c_str());
  if (rc != 0) {  // gnuplot-nox may lack pngcairo: the plain png terminal
    std::ifstream s(script);
    std::stringstream ss;
    ss << s.rdbuf();
    std::string text = ss.str();
    text.replace(text.find("pngcairo"), 8, "png");
    std::ofstream(script) << text;
    rc = std::system(("gnuplot '" + script + "' 2>/dev/null").c_str());
  }
  std::filesystem::remove(train_dat);
  std::filesystem::remove(val_dat);
  std::filesystem::remove(script);
  (void)dir;
  return rc == 0 && std::filesystem::exists(png);
}

}  // namespace

parallel::Mesh make_mesh(const TrainOptions& o) {
  parallel::Mesh mesh = parallel::launch_mesh({.dp = o.dp, .pp = o.pp, .tp = o.tp});
  g_lead = mesh.world_rank() == 0;
  return mesh;
}

Device run_device(const TrainOptions& o, const parallel::Mesh& mesh) {
  const Device dev = rank_device(resolve_device(o.device), o.device, static_cast<int>(mesh.world_rank()));
#if TRIDENT_HAVE_CUDA
  if (dev.is_cuda()) cuda::set_device(static_cast<int>(dev.index));  // NCCL joins the current device
#endif
  return dev;
}

std::shared_ptr<parallel::tp::TensorParallelLayers> tensor_parallel_layers(const TrainOptions& o,
                                                                           const parallel::Mesh& mesh) {
  if (o.tp <= 1) return nullptr;
  // NOTE [Model parallelism on GPUs]: the layers' collectives (on activations and their
  // gradients) over NCCL between the GPUs of the tp group.
  std::shared_ptr<parallel::comm::Communicator> group = mesh.group_ptr(parallel::Axis::TP);
#if TRIDENT_HAVE_CUDA
  if (run_device(o, mesh).is_cuda())
    group = parallel::comm::make_nccl_communicator(group, {.name = group->name() + ".nccl", .timeout = std::nullopt});
#endif
  return std::make_shared<parallel::tp::TensorParallelLayers>(
      group, parallel::tp::TensorParallelOptions{.seed = o.seed, .sequence_parallel = o.sequence_parallel});
}

bool is_lead() { return g_lead; }

void say(const char* format, ...) {
  if (!g_lead) return;
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
}

StageCut cut_for_stage(const TrainOptions& o, const parallel::Mesh& mesh, const std::function<std::vector<double>()>& costs) {
  StageCut cut;
  if (o.pp <= 1) return cut;
  const std::vector<double> per_layer = costs();
  const int64_t stages = o.pp * o.pp_chunks;
  TRIDENT_CHECK(stages <= static_cast<int64_t>(per_layer.size()), "--pp ", o.pp,
                o.pp_chunks > 1 ? " x --pp-chunks " + std::to_string(o.pp_chunks) : std::string(), ": ", stages,
                " stages but the model has only ", per_layer.size(), " layers (every ",
                o.pp_chunks > 1 ? "chunk" : "stage", " needs at least one)");
  cut.balance = parallel::pipeline::balance_by_costs(per_layer, stages);
  cut.keep = models::LayerSelection(
      parallel::pipeline::rank_layer_ranges(cut.balance, mesh.group(parallel::Axis::PP).rank(), o.pp_chunks));
  return cut;
}

models::MemoryOptions memory_options(const std::string& precision, const std::string& device) {
  models::MemoryOptions m;
  if (precision != "fp32") m.activation_bytes = 2;  // the products' outputs; master weights stay f32
  m.cuda = device.rfind("cuda", 0) == 0;
  m.logits_tiled = !m.cuda && precision == "bf16" && cpu::bf16_gemm_kernel() != cpu::Bf16Gemm::None;
  return m;
}

void print_dry_run(const std::string& description, int64_t parameters, const models::MemoryEstimate& memory) {
  std::printf("%s\n", description.c_str());
  std::printf("parameters: %lld (%.1fM)\n", static_cast<long long>(parameters), static_cast<double>(parameters) / 1e6);
  std::printf("memory estimate for training: %s\n", memory.str().c_str());
}

std::pair<std::string, std::string> checkpoint_model(const std::string& path) {
  TRIDENT_CHECK(std::filesystem::is_directory(path), "checkpoint '", path, "' is not a folder");
  const std::string trainer = path + "/trainer.json";
  std::ifstream f(trainer);
  TRIDENT_CHECK(f.good(), "checkpoint '", path, "' has no trainer.json: not a training checkpoint");
  const json j = json::parse(f, nullptr, false);
  TRIDENT_CHECK(!j.is_discarded() && j.is_object(), "checkpoint '", path, "': trainer.json is not valid JSON");
  const json extra = j.value("extra", json());
  TRIDENT_CHECK(extra.is_object() && extra.contains("model") && extra["model"].is_string() && extra.contains("config"),
                "checkpoint '", path, "' does not say which model it holds (no extra.model/extra.config in trainer.json)");
  return {extra["model"].get<std::string>(), extra["config"].dump()};
}

namespace {
// NOTE [Optimizer in the apps]: an optimizer Opt over two parameter groups, the first with the
// options' weight decay, the second without.
template <typename Opt, typename Options>
parallel::OptimizerFactory two_groups(const Options& with) {
  Options without = with;
  without.weight_decay = 0.0;
  return [with, without](const parallel::ParamGroups& g) {
    return std::make_unique<Opt>(std::vector<nn::optim::ParamGroup<Options>>{{g.at(0), with}, {g.at(1), without}});
  };
}

// The optimizer of --optimizer.
parallel::OptimizerFactory optimizer_factory(const TrainOptions& o) {
  if (o.optimizer == "sgd")
    return two_groups<nn::optim::SGD>(nn::optim::SGDOptions{
        .lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay, .nesterov = o.momentum > 0});
  if (o.optimizer == "rmsprop")
    return two_groups<nn::optim::RMSProp>(nn::optim::RMSPropOptions{
        .lr = o.lr, .alpha = o.rmsprop_alpha, .eps = o.eps, .weight_decay = o.weight_decay, .momentum = o.momentum});
  return two_groups<nn::optim::AdamW>(
      nn::optim::AdamWOptions{.lr = o.lr, .beta1 = 0.9, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay});
}

// The parameters tensor parallelism splits (each rank holds a shard), for ZeRO-1's clipping.
std::vector<Tensor> tp_split_parameters(nn::Module& model) {
  const auto split = parallel::tp::sharded_parameters(model);
  std::vector<Tensor> out;
  for (const auto& [name, p] : model.named_parameters())
    if (split.count(name) != 0) out.push_back(p);
  return out;
}
}  // namespace


DType autocast_dtype(const std::string& precision) { return precision == "fp16" ? DType::F16 : DType::BF16; }

std::string resolve_resume(const std::string& resume, const std::string& ckpt_dir) {
  if (resume != "latest") return resume;
  TRIDENT_CHECK(!ckpt_dir.empty(), "--resume latest needs --ckpt-dir");
  const auto latest = nn::latest_checkpoint(ckpt_dir);
  TRIDENT_CHECK(latest.has_value(), "--resume latest: no complete checkpoint in '", ckpt_dir, "'");
  return *latest;
}

int train(const TrainOptions& o, TrainTask& task) {
  models::LayeredModel& model = *task.model;
  std::optional<parallel::Mesh> own_mesh;
  if (task.mesh == nullptr) own_mesh.emplace(make_mesh(o));
  const parallel::Mesh& mesh = task.mesh != nullptr ? *task.mesh : *own_mesh;
  // NOTE [Device in the apps]: one GPU per rank; the model moves before the optimizer (and its
  // state) is made.
  const Device dev = run_device(o, mesh);
  if (!dev.is_cpu()) model.to(dev);
  const models::LayerList& layers = model.layers();
  const std::shared_ptr<parallel::comm::Communicator> dp = mesh.group_ptr(parallel::Axis::DP);
  const int64_t dp_size = dp->size();
  // The gradients' all-reduces: over the dp group itself on the CPU, over an NCCL communicator of
  // the same ranks (bootstrapped over it) when they live on GPUs. Host numbers (loss counts, the
  // logged loss) keep going over the dp group.
  std::shared_ptr<parallel::comm::Communicator> dp_grads = dp;
#if TRIDENT_HAVE_CUDA
  if (dev.is_cuda() && dp_size > 1) dp_grads = parallel::comm::make_nccl_communicator(dp, {.name = "dp.nccl", .timeout = std::nullopt});
#endif
  const std::shared_ptr<parallel::comm::Communicator> tp = mesh.group_ptr(parallel::Axis::TP);
  // NOTE [Pipeline training apps]: this rank's stage of the model; it averages the loss and the
  // batch norm totals over dp, DataParallel or ZeRO the gradients (below).
  std::unique_ptr<parallel::pipeline::Pipeline> pipe;
  if (mesh.size(parallel::Axis::PP) > 1) {
    // NOTE [Pipeline balance in the apps]
    TRIDENT_CHECK(o.pp_balance == "parameters" || !task.pp_balance.empty(), "--pp-balance ", o.pp_balance, ": ", task.app,
                  " has no per-layer compute counts; use --pp-balance parameters");
    pipe = std::make_unique<parallel::pipeline::Pipeline>(
        model, mesh.group_ptr(parallel::Axis::PP),
        parallel::pipeline::PipelineOptions{.micro_batches = o.micro_batches,
                                            .schedule = parallel::pipeline::parse_schedule(o.pp_schedule),
                                            .remat = parallel::pipeline::parse_remat(o.remat),
                                            .balance = task.pp_balance,
                                            .dp = dp,
                                            // NOTE [Model parallelism on GPUs]: DataParallel or
                                            // ZeRO (NOTE [ZeRO-1 over pipeline stages]) reduces
                                            // the gradients, over NCCL on GPUs.
                                            .average_dp_gradients = false,
                                            .deferred_batch_norm = true,  // NOTE [Batch norm in the apps]
                                            .timeline = true,
                                            .chunks = o.pp_chunks});
  }

  // NOTE [Optimizer in the apps]: no weight decay on biases and normalization parameters (1-D).
  // Under --pp, over this stage's parameters only.
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : pipe ? pipe->parameters() : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const parallel::OptimizerFactory make_optimizer = optimizer_factory(o);
  // NOTE [Parallel training apps]: ZeRO-1 owns the optimizer (over its shards); otherwise a plain
  // optimizer, with the model wrapped for data parallelism when there is more than one dp rank.
  std::unique_ptr<parallel::ZeroOptimizer> zero;
  std::unique_ptr<parallel::DataParallel> ddp;
  std::unique_ptr<nn::optim::Optimizer> plain;
  // NOTE [Overlapped pipeline gradients]: a stage's gradients are final once this rank's last
  // backward pass of the step has run, while the stages before it still run theirs; the
  // reduction over dp (all-reduce, or ZeRO-1's reduce-scatter) starts there
  // (Pipeline::set_after_last_backward: DataParallel::reduce_async, or
  // ZeroOptimizer::reduce_gradients_async) and is waited for after the step, so it overlaps the
  // rest of the pipeline's flush, as Megatron-LM's does. The tied parameters (GPT-2's and BERT's
  // word embedding) are summed over their stages at the end of the step first: they are bucketed
  // last (reduce_last), held back at the start, and reduced after the step with the wait.
  // (The pipeline broadcast the parameters over dp already.)
  std::vector<Tensor> tied_here;
  if (pipe) {
    for (const Tensor& p : pipe->parameters()) {
      const auto& tied = layers.tied();
      if (std::any_of(tied.begin(), tied.end(), [&](const models::TiedParameter& t) { return t.tensor.is_same(p); }))
        tied_here.push_back(p);
    }
  }
  if (o.zero) {
    // NOTE [ZeRO-1 on GPUs]: over the gradients' group (NCCL's on GPUs).
    zero = std::make_unique<parallel::ZeroOptimizer>(parallel::ParamGroups{decay, no_decay}, dp_grads, make_optimizer,
                                                     parallel::ZeroOptions{.reduce_last = tied_here});
    if (pipe) pipe->set_after_last_backward([&zero] { zero->reduce_gradients_async(); });
  } else if (dp_size > 1 && pipe) {
    ddp = std::make_unique<parallel::DataParallel>(
        pipe->parameters(), dp_grads, parallel::DataParallelOptions{.broadcast_from_rank0 = false, .reduce_last = tied_here});
    pipe->set_after_last_backward([&ddp] { ddp->reduce_async(/*hold_last=*/true); });
    plain = make_optimizer({decay, no_decay});
  } else {
    if (dp_size > 1) ddp = std::make_unique<parallel::DataParallel>(model, dp_grads);
    plain = make_optimizer({decay, no_decay});
  }
  nn::optim::Optimizer& opt = zero ? zero->shard_optimizer() : *plain;
  // ZeRO's clipping norm is the serial model's: under --tp split parameters' squares summed over
  // tp, under --pp the stages' summed, a tied parameter counted by its first stage only.
  parallel::ZeroOptimizer::NormParts zero_norm_parts;
  if (zero && tp->size() > 1) {
    zero_norm_parts.tp = tp.get();
    zero_norm_parts.split = tp_split_parameters(model);
  }
  if (zero && pipe) {
    zero_norm_parts.pp = pipe->pp().get();
    for (const Tensor& p : pipe->parameters())
      if (!parallel::pipeline::counted_here(*pipe, p)) zero_norm_parts.elsewhere.push_back(p);
  }
  // NOTE [Batch norm in the apps]: the pipeline defers its stage's batch norms itself.
  const std::vector<nn::BatchNorm2d*> batch_norms = pipe ? std::vector<nn::BatchNorm2d*>{} : nn::defer_batch_norms(model);
  nn::GradScaler scaler({.init_scale = o.initial_loss_scale > 0 ? o.initial_loss_scale : nn::GradScalerOptions{}.init_scale,
                         .enabled = o.precision == "fp16"});

  const int64_t per_step = o.batch * o.grad_accum;  // this rank's examples per step
  const int64_t global_batch = per_step * dp_size;
  std::shared_ptr<const data::Sampler> sampler;
  if (dp_size > 1)
    sampler = std::make_shared<GlobalBatchShardSampler>(task.train->size(), o.seed, global_batch, *dp);
  else
    sampler = std::make_shared<data::ShuffledSampler>(task.train->size(), o.seed);
  data::Loader loader(task.train, {.batch_size = per_step, .drop_last = true, .num_workers = o.workers, .seed = o.seed},
                      sampler);
  const int64_t per_epoch = loader.batches_per_epoch();
  TRIDENT_CHECK(per_epoch > 0, "the training set has ", task.train->size(), " examples, fewer than one step's batch of ",
                global_batch, " (--batch ", o.batch, " x --grad-accum ", o.grad_accum, " x --dp ", dp_size, ")");
  const int64_t total = o.steps > 0 ? o.steps : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(o.epochs * static_cast<double>(per_epoch))));

  std::shared_ptr<nn::optim::LRSchedule> schedule;
  if (o.schedule == "cosine") schedule = std::make_shared<nn::optim::WarmupCosineLR>(o.warmup, total, o.min_lr_fraction);
  if (o.schedule == "linear") schedule = std::make_shared<nn::optim::LinearLR>(o.warmup, total, o.min_lr_fraction);
  if (o.schedule == "constant") schedule = std::make_shared<nn::optim::ConstantLR>(o.warmup);

  // Under --zero the optimizer part of a checkpoint goes through the ZeroOptimizer
  // (parallel/checkpoint.h, NOTE [ZeRO-1 checkpoints]).
  nn::TrainingCheckpointParts parts{&model, zero ? nullptr : plain.get(), &scaler, {}, nullptr, {}};
  // NOTE [Model-parallel training checkpoints]: under --tp and --pp the checkpoint holds the
  // serial model's full tensors and optimizer state (the whole model's, grouped as above).
  parallel::ParamGroups whole_groups{{}, {}};
  for (const Tensor& p : model.parameters()) whole_groups[p.dim() >= 2 ? 0 : 1].push_back(p);
  const parallel::ModelParallelCheckpoint mp_ckpt{tp->size() > 1 ? tp.get() : nullptr, pipe.get(), whole_groups};
  const parallel::ModelParallelCheckpoint* mp_parts = tp->size() > 1 || pipe ? &mp_ckpt : nullptr;
  const int64_t pp_size = pipe ? pipe->num_stages() : 1;
  // Each stage's value of a generator offset (the same list on every rank; collective over pp).
  auto per_stage = [&](uint64_t offset) {
    if (!pipe) return std::vector<uint64_t>{offset};
    Tensor t = zeros({pp_size}, TensorOptions(kF64));
    t.data<double>()[pipe->stage()] = static_cast<double>(offset);  // exact below 2^53
    pipe->pp()->all_reduce(t, parallel::comm::ReduceOp::Sum).wait();
    std::vector<uint64_t> out;
    for (double v : t.to_vector<double>()) out.push_back(static_cast<uint64_t>(v));
    return out;
  };
  // global_batch: the loader position counts global batches, so a resumed run must use the same.
  const json extra = {{"model", task.model_name}, {"config", json::parse(task.config_json)}, {"global_batch", global_batch}};
  int64_t start = 0;
  if (!o.resume.empty()) {
    const std::string path = resolve_resume(o.resume, o.ckpt_dir);
    const auto [name, config] = checkpoint_model(path);
    TRIDENT_CHECK(name == task.model_name, "checkpoint '", path, "' holds a ", name, " model, not ", task.model_name);
    TRIDENT_CHECK(json::parse(config) == extra["config"], "checkpoint '", path, "' holds a ", name,
                  " model of another configuration: ", config, " (this run: ", extra["config"].dump(), ")");
    const nn::TrainingProgress p = parallel::load_training_checkpoint(path, parts, zero.get(), mp_parts);
    const int64_t saved_batch = p.extra.value("global_batch", global_batch);
    TRIDENT_CHECK(saved_batch == global_batch, "checkpoint '", path, "' was trained with a global batch of ", saved_batch,
                  " examples, this run's is ", global_batch, " (--batch ", o.batch, " x --grad-accum ", o.grad_accum,
                  " x --dp ", dp_size, ")");
    // NOTE [Model-parallel training checkpoints]: each stage's default stream (its layers'
    // dropout) and each rank's split-region stream continue where they were, at the layout that
    // saved them only.
    if (p.extra.value("tp", int64_t{1}) == tp->size() && p.extra.value("pp", int64_t{1}) == pp_size &&
        p.extra.value("pp_chunks", int64_t{1}) == o.pp_chunks) {
      const size_t stage = pipe ? static_cast<size_t>(pipe->stage()) : 0;
      auto restore = [&](Generator& g, const char* key) {
        if (!p.extra.contains(key)) return;
        PhiloxState st = g.state();
        st.offset = p.extra[key].at(stage).get<uint64_t>();
        g.set_state(st);
      };
      if (pipe) restore(default_generator(), "default_offsets");
      if (task.split_dropout != nullptr) restore(*task.split_dropout, "split_dropout_offsets");
    }
    start = p.step;
    loader.restore(p.data_position.get<data::LoaderPosition>());
    say("resumed from %s at step %lld\n", path.c_str(), static_cast<long long>(start));
  }
  nn::optim::LRScheduler scheduler(opt, schedule, start);
  if (!o.ckpt_dir.empty() && is_lead()) std::filesystem::create_directories(o.ckpt_dir);

  std::string metrics_path = o.metrics;
  if (metrics_path.empty() && !o.ckpt_dir.empty()) metrics_path = o.ckpt_dir + "/metrics.jsonl";
  std::ofstream metrics;
  if (!metrics_path.empty() && is_lead()) {
    if (const auto parent = std::filesystem::path(metrics_path).parent_path(); !parent.empty())
      std::filesystem::create_directories(parent);
    metrics.open(metrics_path, std::ios::app);
    TRIDENT_CHECK(metrics.good(), "cannot write the metrics file '", metrics_path, "'");
  }
  auto record = [&](const json& j) {
    if (metrics.is_open()) metrics << j.dump() << '\n' << std::flush;
  };

  auto evaluate = [&](int64_t step) -> std::map<std::string, double> {
    std::map<std::string, double> out;
    if (!task.val || !task.eval || o.eval_every < 0) return out;
    const MetricSums sums = evaluation_sums(o, task, *dp, pipe.get(), dev);
    json j = {{"step", step}};
    for (const auto& [k, v] : sums) j[k] = out[k] = v.second > 0 ? v.first / v.second : 0.0;
    for (const auto& [ppl, of] : task.perplexity_of)
      if (out.count(of)) j[ppl] = out[ppl] = std::exp(out[of]);
    record(j);
    return out;
  };
  auto print_eval = [&](const char* when, int64_t step, const std::map<std::string, double>& m) {
    if (m.empty()) return;
    say("%s (step %lld):", when, static_cast<long long>(step));
    for (const auto& [k, v] : m) say(" %s %.4f", k.c_str(), v);
    say("\n");
    std::fflush(stdout);
  };

  // mpirun gives the ranks a pseudo-terminal even when its own output goes to a file: the
  // progress line is for single-process runs only.
  const bool tty = ::isatty(1) != 0 && mesh.world().size() == 1;
  const auto before = evaluate(start);
  print_eval("validation before training", start, before);
  say("training %lld steps (%lld per epoch) of %lld examples (--batch %lld x --grad-accum %lld x --dp %lld%s), %s, %d threads\n",
      static_cast<long long>(total - start), static_cast<long long>(per_epoch), static_cast<long long>(global_batch),
      static_cast<long long>(o.batch), static_cast<long long>(o.grad_accum), static_cast<long long>(dp_size),
      zero ? ", ZeRO-1" : "", o.precision.c_str(), get_num_threads());
  if (mesh.world().size() > 1) say("%s\n", mesh.str().c_str());
  if (pipe)
    say("pipeline: %lld stages%s (layers per %sstage %s, by %s), %lld micro-batches of %lld rows, schedule %s%s, remat %s\n",
        static_cast<long long>(pipe->num_stages()),
        pipe->chunks() > 1 ? (" x " + std::to_string(pipe->chunks()) + " chunks").c_str() : "",
        pipe->chunks() > 1 ? "virtual " : "", parallel::pipeline::balance_str(pipe->balance()).c_str(), o.pp_balance.c_str(),
        static_cast<long long>(o.micro_batches), static_cast<long long>(per_step / o.micro_batches), o.pp_schedule.c_str(),
        pipe->chunks() > 1 ? " (interleaved)" : "", o.remat.c_str());
  if (pipe) {  // NOTE [Stage-only model]: what each rank holds (a tied parameter on each of its stages)
    say("parameters held per stage (of %lld):", static_cast<long long>(model.num_parameters()));
    for (int64_t s = 0; s < pipe->num_stages(); ++s) {
      int64_t held = 0;
      for (const auto& [b, e] : parallel::pipeline::rank_layer_ranges(pipe->balance(), s, pipe->chunks()))
        held += layers.num_parameters(b, e);
      say(" %lld", static_cast<long long>(held));
    }
    say("\n");
  }
  // NOTE [MFU]: the GPU's peak for this precision: --peak-tflops, TRIDENT_PEAK_TFLOPS, the table.
  Peak peak;
  if (!dev.is_cpu()) {
    // Every rank's GPU: the throughput counts every dp replica, whose model spans pp x tp GPUs.
    peak = run_peak(device_peak(dev.index, o.precision, matmul_allow_tf32(), o.peak_tflops), mesh.world().size());
    say("device: %s; MFU against %s\n", describe_device(dev).c_str(), peak.source.c_str());
  }
  const auto t0 = Clock::now();
  auto last_t = t0;
  int64_t skipped = 0;
  // Tokens and model FLOPs (NOTE [MFU]; GPU runs) since the last logged step, over the time spent
  // training (NOTE [Throughput accounting]).
  ThroughputMeter meter;
  double first_loss = NAN, last_loss = NAN;
  std::map<std::string, double> after = before;
  int64_t end = total;  // the last step run (earlier under --time-limit)
  if (o.profile) profiler::start();  // NOTE [Op profiler]
  for (int64_t step = start + 1; step <= end; ++step) {
    // A rank past the limit stops every rank, at the same step (one scalar all-reduce per step).
    if (o.time_limit > 0 && step < end &&
        dp_average(mesh.world(), std::chrono::duration<double>(Clock::now() - t0).count() >= o.time_limit ? 1.0 : 0.0) > 0)
      end = step;
    std::optional<data::Example> ex = loader.next();
    if (!ex) {
      loader.set_epoch(loader.position().epoch + 1);
      ex = loader.next();
    }
    // The counts from the host batch (NOTE [Device in the apps]); the micro-batches on the device.
    const models::Batch batch = task.to_batch(*ex);
    std::vector<double> counts = model.loss_counts(batch);
    const std::vector<double> local_counts = counts;  // this rank's, for task.flops
    if (dp_size > 1) {  // NOTE [Parallel training apps]: the global batch's counts, over dp
      Tensor c = from_vector<double>(counts, {static_cast<int64_t>(counts.size())});
      dp->all_reduce(c, parallel::comm::ReduceOp::Sum).wait();
      counts = c.to_vector<double>();
      for (double& n : counts) n /= static_cast<double>(dp_size);
    }
    if (zero)
      zero->zero_grad();
    else if (pipe)
      pipe->zero_grad();
    else
      plain->zero_grad();
    double loss = NAN;
    // NOTE [Pipeline training apps]: the pipeline cuts the step's batch into its micro-batches
    // and returns the global batch's mean loss (averaged over dp already; the gradients below).
    const std::vector<models::Batch> micro = pipe ? std::vector<models::Batch>{} : batch.to(dev).split(o.grad_accum);
    // The micro-batches' losses, kept where they were computed and read together when the step's
    // loss is needed (NOTE [Device in the apps]: on a GPU, at logged steps only).
    std::vector<Tensor> micro_losses;
    if (pipe) {
      autocast::Guard guard(autocast_dtype(o.precision), o.precision != "fp32");
      if (scaler.is_enabled()) pipe->set_loss_scale(scaler.get_scale());  // fp16: the last stage scales
      // NOTE [ZeRO-1 over pipeline stages], NOTE [Overlapped pipeline gradients]: the
      // micro-batches' backward passes accumulate locally; the step's sum is reduced once
      // (all-reduced from the last backward on, or reduce-scattered under ZeRO).
      std::vector<parallel::DataParallel::NoSync> no_sync;
      if (zero) no_sync.push_back(zero->no_sync());
      if (ddp) no_sync.push_back(ddp->no_sync());
      loss = pipe->step(batch, counts);
      no_sync.clear();
      // Launched after the last backward but the tied parameters', launched here; waited for.
      if (zero) zero->reduce_gradients();
      if (ddp) ddp->finish();
    }
    for (size_t i = 0; i < micro.size(); ++i) {
      const models::Batch& mb = micro[i];
      Tensor l;
      {
        autocast::Guard guard(autocast_dtype(o.precision), o.precision != "fp32");
        l = model.loss(layers.run(mb), mb, counts);
      }
      // All micro-batches but the last accumulate locally; the last one's backward reduces the sum.
      std::optional<parallel::DataParallel::NoSync> no_sync;
      if (i + 1 < micro.size()) {
        if (ddp) no_sync.emplace(ddp->no_sync());
        if (zero) no_sync.emplace(zero->no_sync());
      }
      scaler.scale(l).backward();
      micro_losses.push_back(l.detach());
    }
    if (!batch_norms.empty()) {  // NOTE [Batch norm in the apps]: the global batch's statistics
      std::function<void(Tensor&)> over_dp;
      if (dp_size > 1) over_dp = [&](Tensor& t) { dp->all_reduce(t, parallel::comm::ReduceOp::Sum).wait(); };
      nn::commit_deferred_batch_norms(batch_norms, over_dp);
    }
    if (zero) {
      // fp16 (NOTE [ZeRO-1 with loss scaling]): an overflow lands in one rank's shards, and every
      // rank of the world (dp and tp) skips the step with it.
      const auto all_finite = [&](bool finite) { return dp_average(mesh.world(), finite ? 0.0 : 1.0) == 0.0; };
      if (o.grad_clip > 0) {
        zero->unscale_(scaler, all_finite);
        zero->clip_grad_norm(o.grad_clip, zero_norm_parts);
      }
      zero->step(scaler, all_finite);
      skipped += scaler.last_step_skipped() ? 1 : 0;
    } else {
      // fp16 under --pp (and --tp): each rank holds a part of the gradient, and an overflow in one
      // part must skip the step on every rank, so the ranks agree on it over the world.
      if (pipe && scaler.is_enabled())
        scaler.unscale_(*plain, [&](bool finite) { return dp_average(mesh.world(), finite ? 0.0 : 1.0) == 0.0; });
      if (o.grad_clip > 0) {
        if (!pipe) scaler.unscale_(*plain);
        // Under --tp the norm is the serial model's: split parameters' squares summed over tp.
        if (pipe) {
          parallel::pipeline::clip_grad_norm_(*pipe, o.grad_clip, tp.get());
        } else if (tp->size() > 1) {
          parallel::tp::clip_grad_norm_(model, o.grad_clip, *tp);
        } else {
          // The norm is not read here: on a GPU it stays there (no synchronization per step);
          // the same kernels as clip_grad_norm_, so the same gradients.
          nn::clip_grad_norm_on_device_(model.parameters(), o.grad_clip);
        }
      }
      scaler.step(*plain);
      skipped += scaler.last_step_skipped() ? 1 : 0;
    }
    scaler.update();
    const double lr = opt.lr(0);
    scheduler.step();
    const bool log_now = step % o.log_every == 0 || step == end;
    const bool eval_now = o.eval_every > 0 && step % o.eval_every == 0 && step != end;
    const bool ckpt_now = !o.ckpt_dir.empty() && ((o.ckpt_every > 0 && step % o.ckpt_every == 0) || step == end);
    bool read = pipe != nullptr;
    // Before an evaluation or a checkpoint too: the read waits for the step's work on the GPU, so
    // that the pause timed below holds none of it (NOTE [Throughput accounting]).
    if (!pipe && (dev.is_cpu() || log_now || step == start + 1 || eval_now || ckpt_now)) {
      // One copy to the host for all micro-batches (a synchronization on a GPU), summed in f64 in
      // micro-batch order.
      const std::vector<double> v = stack(micro_losses).to_vector<double>();
      loss = 0;
      for (double x : v) loss += x;
      loss = dp_average(*dp, loss);
      read = true;
    }
    if (read) {
      TRIDENT_CHECK(std::isfinite(loss) || o.precision == "fp16", "the loss became ", loss, " at step ", step,
                    dev.is_cpu() ? "" : " (read at logged steps only on a GPU)", " (try a lower --lr)");
      if (std::isnan(first_loss)) first_loss = loss;
      last_loss = loss;
    }
    meter.add(static_cast<double>(task.tokens(batch) * dp_size),
              !dev.is_cpu() && task.flops ? task.flops(batch, local_counts) * static_cast<double>(dp_size) : 0.0);

    if (log_now) {
      const auto now = Clock::now();
      // NOTE [Throughput accounting]: the interval's rates over its training time (evaluations
      // and checkpoints taken out); the ETA over the wall clock.
      const ThroughputMeter::Rates rates = meter.take(std::chrono::duration<double>(now - last_t).count());
      const double tps = rates.tokens_per_s, flops_per_s = rates.flops_per_s;
      const double elapsed = std::chrono::duration<double>(now - t0).count();
      double eta = eta_seconds(elapsed, step - start, total - step);
      if (o.time_limit > 0) eta = std::min(eta, std::max(0.0, o.time_limit - elapsed));
      // NOTE [MFU]: on a GPU, with the app's model FLOPs; "n/a" when the peak is unknown.
      const bool count_mfu = !dev.is_cpu() && task.flops;
      const double mfu = count_mfu && peak.known() ? flops_per_s / peak.flops : 0.0;
      const std::string mfu_str = count_mfu ? " | MFU " + (peak.known() ? mfu_text(flops_per_s, peak) : std::string("n/a")) : "";
      // %.9g: any two f32 losses print differently (the resume test compares the lines).
      say("%sstep %6lld/%lld | loss %.9g | lr %.3e | %.0f %s%s | ETA %s%s", tty ? "\r" : "",
          static_cast<long long>(step), static_cast<long long>(total), loss, lr, tps, task.rate_unit.c_str(), mfu_str.c_str(),
          format_duration(eta).c_str(), tty ? "   " : "\n");
      std::fflush(stdout);
      json rec = {{"step", step}, {"loss", loss}, {"lr", lr}, {task.rate_key, tps}, {"elapsed_s", elapsed}};
      if (mfu > 0) rec["mfu"] = mfu;
      record(rec);
      last_t = now;
    }
    // The evaluation and the checkpoint are timed and taken out of the interval's throughput.
    const auto pause_start = Clock::now();
    if (eval_now) {
      if (tty) say("\n");
      print_eval("validation", step, evaluate(step));
    }
    if (ckpt_now) {
      json saved = extra;
      if (mp_parts != nullptr) {
        saved["tp"] = tp->size();
        saved["pp"] = pp_size;
        saved["pp_chunks"] = o.pp_chunks;
        if (pipe) saved["default_offsets"] = per_stage(default_generator().state().offset);
        if (task.split_dropout != nullptr) saved["split_dropout_offsets"] = per_stage(task.split_dropout->state().offset);
      }
      parallel::save_training_checkpoint(o.ckpt_dir + "/step-" + std::to_string(step), *dp, parts,
                                         {step, json(loader.position()), saved}, zero.get(), mp_parts);
    }
    if (eval_now || ckpt_now) meter.exclude(std::chrono::duration<double>(Clock::now() - pause_start).count());
  }
  if (tty && end > start) say("\n");
  if (o.profile) say("op profile of steps %lld-%lld (--profile):\n%s", static_cast<long long>(start + 1),
                     static_cast<long long>(end), profiler::stop().table().c_str());
  if (end < total) say("stopped at step %lld: --time-limit %.0f s reached\n", static_cast<long long>(end), o.time_limit);
  if (end > start) {
    after = evaluate(end);
    print_eval("validation after training", end, after);
    say("train loss %.4f -> %.4f in %s\n", first_loss, last_loss,
        format_duration(std::chrono::duration<double>(Clock::now() - t0).count()).c_str());
  }
  if (pipe && end > start) {  // collective over pp: every rank
    const parallel::pipeline::PipelineTrace trace = pipe->gather_trace();
    const std::vector<int64_t> peaks = pipe->gather_peak_activation_bytes();
    if (pipe->chunks() > 1)
      say("pipeline bubble (last step): %.1f%% measured, %.1f%% in theory ((K-1)/(VM+K-1), K = %lld, V = %lld, M = %lld)\n",
          100 * trace.bubble_fraction(),
          100 * parallel::pipeline::theoretical_bubble(pipe->num_stages(), o.micro_batches, pipe->chunks()),
          static_cast<long long>(pipe->num_stages()), static_cast<long long>(pipe->chunks()),
          static_cast<long long>(o.micro_batches));
    else
      say("pipeline bubble (last step): %.1f%% measured, %.1f%% in theory ((K-1)/(M+K-1), K = %lld, M = %lld)\n",
          100 * trace.bubble_fraction(), 100 * parallel::pipeline::theoretical_bubble(pipe->num_stages(), o.micro_batches),
          static_cast<long long>(pipe->num_stages()), static_cast<long long>(o.micro_batches));
    say("peak activation bytes per stage (last step):");
    for (size_t s = 0; s < peaks.size(); ++s) say(" stage %zu %lld", s, static_cast<long long>(peaks[s]));
    say("\n");
    if (!o.trace.empty() && is_lead()) {
      trace.write_chrome_trace(o.trace);
      say("pipeline trace: %s (chrome://tracing or ui.perfetto.dev)\n", o.trace.c_str());
      const std::string png = std::filesystem::path(o.trace).replace_extension(".png").string();
      if (trace.write_gantt_png(png)) say("pipeline Gantt chart: %s\n", png.c_str());
    }
  }
  if (end > start) {  // collective over the world: every rank
    // The most bytes tensors held at once on each rank's device since the start (parameters,
    // gradients, optimizer state, activations, transfer buffers; the allocator's statistics):
    // what --zero, --pp and --tp divide among the ranks.
    Tensor peaks = zeros({static_cast<int64_t>(mesh.world().size())}, kF64);
    peaks.data<double>()[mesh.world().rank()] = static_cast<double>(memory_stats(dev).peak_bytes);
    mesh.world().all_reduce(peaks, parallel::comm::ReduceOp::Sum).wait();
    say("peak tensor memory per rank (MiB):");
    for (double b : peaks.to_vector<double>()) say(" %.2f", b / (1 << 20));
    say("\n");
  }
  if (skipped > 0) say("fp16: %lld steps skipped for overflowing gradients\n", static_cast<long long>(skipped));
  for (const auto& [ppl, of] : task.perplexity_of)
    if (before.count(ppl) && after.count(ppl))
      say("validation perplexity: %.2f before, %.2f after\n", before.at(ppl), after.at(ppl));
  if (!o.ckpt_dir.empty()) say("checkpoint: %s/step-%lld\n", o.ckpt_dir.c_str(), static_cast<long long>(end));
  if (metrics.is_open()) {
    metrics.close();
    say("metrics: %s\n", metrics_path.c_str());
    const std::string png = o.plot.empty() ? std::filesystem::path(metrics_path).replace_extension(".png").string() : o.plot;
    if (plot_losses(metrics_path, png, task.app + " loss"))
      say("loss plot: %s\n", png.c_str());
    else
      say("loss plot: skipped (gnuplot not found: scripts/setup.sh installs gnuplot-nox)\n");
  }
  if (task.summary && is_lead()) task.summary(after, end);
  return 0;
}

}  // namespace trident::apps
