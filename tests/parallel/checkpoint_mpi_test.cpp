// NOTE [Streamed checkpoints] under mpirun -np 2 and -np 4: a training checkpoint of every
// parallel layout (ZeRO over dp, tp, pp, and their products) is written one entry at a time, and
//  - its model.safetensors and optimizer.safetensors are, byte for byte, what the whole state
//    gathered by the collective functions (ZeroOptimizer::state_dict_to, tp::full_state_dict and
//    full_optimizer_state, pipeline::gather_state_dict and gather_optimizer_state) serializes to,
//    that is the serial model's and optimizer's files;
//  - the writing rank's host memory never holds more than a few entries at once: the peak of its
//    CPU allocations while saving stays under four times the largest entry (plus 4 KiB), where
//    gathering first held the whole model and optimizer state of every other rank (tp's gather
//    of a split entry holds every rank's shard and the result, ZeRO's its dp pieces first);
//  - the checkpoint resumes on the same layout (every rank gets its shards back, bit for bit);
//  - a write that fails on the writer (its directory cannot be created) fails on every rank,
//    naming the path, after the others have been through every entry with it: nobody hangs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/allocator.h"
#include "core/copy.h"
#include "models/gpt2.h"
#include "nn/checkpoint.h"
#include "nn/optim/adam.h"
#include "nn/safetensors.h"
#include "parallel/checkpoint.h"
#include "parallel/mesh.h"
#include "parallel/pipeline/checkpoint.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/tensor_parallel/checkpoint.h"
#include "parallel/tensor_parallel/tp_layers.h"
#include "parallel/zero.h"
#include "pipeline_reference.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel;

namespace {

namespace fs = std::filesystem;
using trident::testing::make_pipeline_batch;
using trident::testing::pipeline_reference::kBatch;
using trident::testing::pipeline_reference::kSeq;

struct Case {
  MeshShape shape;
  bool zero = false;
  std::string name() const {
    return "dp" + std::to_string(shape.dp) + "_pp" + std::to_string(shape.pp) + "_tp" + std::to_string(shape.tp) +
           (zero ? "_zero" : "");
  }
};

// Matrices decay, vectors do not: two groups, as the training programs make them.
ParamGroups by_decay(const std::vector<Tensor>& params) {
  ParamGroups g{{}, {}};
  for (const Tensor& p : params) g[p.dim() >= 2 ? 0 : 1].push_back(p);
  return g;
}

std::unique_ptr<nn::optim::Optimizer> adamw(const ParamGroups& g) {
  return std::make_unique<nn::optim::AdamW>(std::vector<nn::optim::ParamGroup<nn::optim::AdamWOptions>>{
      {g.at(0), {.lr = 1e-2, .weight_decay = 0.1}}, {g.at(1), {.lr = 1e-2, .weight_decay = 0.0}}});
}

// A GPT-2 of 8 blocks, width 32, trained two steps with AdamW on the case's layout.
struct Trained {
  explicit Trained(const Case& c) : mesh(comm::Communicator::world(), c.shape) {
    models::GPT2Config config = trident::testing::pipeline_gpt2_config(8, 32);
    if (c.shape.tp > 1) config.layers = std::make_shared<tp::TensorParallelLayers>(mesh);
    Generator g(1234);
    model = std::make_shared<models::GPT2LMHeadModel>(config, &g);
    dp = mesh.group_ptr(Axis::DP);
    if (c.shape.pp > 1)
      pipe = std::make_unique<pipeline::Pipeline>(
          *model, mesh.group_ptr(Axis::PP),
          pipeline::PipelineOptions{.micro_batches = 2, .dp = c.shape.dp > 1 ? dp : nullptr, .average_dp_gradients = !c.zero});
    const std::vector<Tensor> params = pipe ? pipe->parameters() : model->parameters();
    if (c.zero)
      zero = std::make_unique<ZeroOptimizer>(by_decay(params), dp, adamw, ZeroOptions{.bucket_bytes = 4096});
    else
      opt = adamw(by_decay(params));
    whole_groups = by_decay(model->parameters());
    const int64_t per = kBatch / c.shape.dp, row = mesh.index(Axis::DP) * per;
    for (int s = 0; s < 2; ++s) {
      const models::Batch b = make_pipeline_batch("gpt2", kBatch, kSeq, 40 + static_cast<uint64_t>(s)).slice(row, row + per);
      if (pipe && zero) {
        {
          auto local = zero->no_sync();
          pipe->step(b);
        }
        zero->reduce_gradients();
      } else if (pipe) {
        pipe->step(b);
      } else {
        model->loss(model->layers().run(b), b).backward();
      }
      if (zero) {
        zero->step();
        zero->zero_grad();
      } else {
        opt->step();
        opt->zero_grad();
      }
    }
    mp = ModelParallelCheckpoint{c.shape.tp > 1 ? &mesh.group(Axis::TP) : nullptr, pipe.get(), whole_groups};
  }
  bool writer() const { return mesh.index(Axis::DP) == 0 && mesh.index(Axis::PP) == 0 && mesh.index(Axis::TP) == 0; }
  const ModelParallelCheckpoint* model_parallel() const { return mp.tp || mp.pipe ? &mp : nullptr; }
  nn::TrainingCheckpointParts parts() {
    nn::TrainingCheckpointParts p;
    p.model = model.get();
    p.optimizer = opt.get();
    return p;
  }

  // The whole model's and optimizer's state gathered by the collective functions: on the writer,
  // the bytes the serial model's and optimizer's files hold; empty elsewhere.
  std::pair<std::string, std::string> gathered_files() {
    NoGradGuard no_grad;
    nn::optim::OptimizerState full;
    if (zero) {
      if (auto s = zero->state_dict_to(0)) full = std::move(*s);
    }
    if (mesh.index(Axis::DP) != 0) return {};
    ParamGroups groups = zero ? zero->param_groups() : ParamGroups{};
    if (opt) {
      full = opt->state_dict();
      for (size_t i = 0; i < opt->num_groups(); ++i) groups.push_back(opt->params(i));
    }
    std::vector<Tensor> flat;
    for (const auto& g : groups) flat.insert(flat.end(), g.begin(), g.end());
    nn::StateDict state = pipe ? pipe->state_dict() : model->state_dict();
    if (mp.tp) {
      full = tp::full_optimizer_state(full, *model, flat, *mp.tp);
      state = tp::full_state_dict(state, *model, *mp.tp);
    }
    if (pipe && mesh.index(Axis::TP) == 0) {
      state = pipeline::gather_state_dict(*pipe, state);
      full = pipeline::gather_optimizer_state(*pipe, full, groups, whole_groups,
                                              (zero ? zero->shard_optimizer() : *opt).slot_names());
    }
    if (!writer()) return {};
    auto bytes = [](const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); };
    return {bytes(nn::serialize_safetensors(state, {{"format", "trident"}})),
            bytes(nn::serialize_safetensors(nn::StateDict(full.tensors.begin(), full.tensors.end()),
                                            {{"optimizer_state", full.to_json()}}))};
  }

  // This rank's part of the state: its model entries (its stage's, its tp shards) and its
  // optimizer's state dict.
  std::pair<nn::StateDict, nn::optim::OptimizerState> own_state() {
    nn::StateDict s;
    for (const auto& [name, t] : pipe ? pipe->state_dict() : model->state_dict()) s[name] = t.clone();
    nn::optim::OptimizerState o = zero ? zero->shard_optimizer().state_dict() : opt->state_dict();
    for (auto& [k, t] : o.tensors) t = t.clone();
    return {s, o};
  }

  Mesh mesh;
  std::shared_ptr<models::GPT2LMHeadModel> model;
  std::shared_ptr<comm::Communicator> dp;
  std::unique_ptr<pipeline::Pipeline> pipe;
  std::unique_ptr<ZeroOptimizer> zero;
  std::unique_ptr<nn::optim::Optimizer> opt;
  ParamGroups whole_groups;
  ModelParallelCheckpoint mp;
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A directory every rank names alike (world rank 0 makes it).
std::string shared_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("trident_ckpt_mpi_" + std::to_string(::getppid()) + "_" + name);
  auto w = comm::Communicator::world();
  if (w->rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  w->barrier().wait();
  return dir.string();
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

class StreamedCheckpoint : public ::testing::TestWithParam<Case> {};

TEST_P(StreamedCheckpoint, WritesTheGatheredBytesHoldingOneEntryAtATime) {
  const Case c = GetParam();
  if (comm::Communicator::world()->size() != c.shape.dp * c.shape.pp * c.shape.tp)
    GTEST_SKIP() << c.name() << " needs " << c.shape.dp * c.shape.pp * c.shape.tp << " ranks";
  Trained run(c);
  const std::string dir = shared_dir(c.name());
  const std::string path = dir + "/step-2";
  const MemoryStats before = memory_stats(Device::cpu());
  reset_peak_memory_stats(Device::cpu());
  save_training_checkpoint(path, *run.dp, run.parts(), nn::TrainingProgress{.step = 2, .data_position = {}, .extra = {}}, run.zero.get(), run.model_parallel());
  const int64_t peak = memory_stats(Device::cpu()).peak_bytes - before.current_bytes;
  const auto [model_bytes, optimizer_bytes] = run.gathered_files();
  if (run.writer()) {
    EXPECT_EQ(read_file(fs::path(path) / "model.safetensors"), model_bytes) << "model.safetensors";
    EXPECT_EQ(read_file(fs::path(path) / "optimizer.safetensors"), optimizer_bytes) << "optimizer.safetensors";
    int64_t largest = 0, total = 0;
    for (const std::string part : {"model", "optimizer"})
      for (const nn::SafetensorsEntry& e : nn::read_safetensors_header(path + "/" + part + ".safetensors").entries) {
        largest = std::max(largest, static_cast<int64_t>(e.end - e.begin));
        total += static_cast<int64_t>(e.end - e.begin);
      }
    const int64_t bound = 4 * largest + 4 * 1024;
    // Gathering first held at least half of the checkpoint on the writer in every layout here
    // (the other stage's half, the other dp rank's optimizer shards, or tp's full tensors).
    ASSERT_GT(total / 2, 2 * bound) << "the model is too small for the bound to tell streaming from gathering";
    EXPECT_LE(peak, bound) << "largest entry " << largest << " bytes, checkpoint " << total << " bytes";
    std::printf("%s: checkpoint %lld bytes, largest entry %lld, the writer's peak while saving %lld\n", c.name().c_str(),
                static_cast<long long>(total), static_cast<long long>(largest), static_cast<long long>(peak));
  }
  // Every rank resumes its own part from it, bit for bit.
  const auto [state, optimizer] = run.own_state();
  {
    NoGradGuard no_grad;
    for (const auto& [name, t] : run.pipe ? run.pipe->state_dict() : run.model->state_dict()) fill_(t, 0.0);
  }
  load_training_checkpoint(path, run.parts(), run.zero.get(), run.model_parallel());
  for (const auto& [name, t] : run.pipe ? run.pipe->state_dict() : run.model->state_dict())
    EXPECT_TRUE(trident::testing::all_close(t, state.at(name), 0, 0)) << name;
  const nn::optim::OptimizerState back = run.zero ? run.zero->shard_optimizer().state_dict() : run.opt->state_dict();
  EXPECT_EQ(back.scalars, optimizer.scalars);
  ASSERT_EQ(back.tensors.size(), optimizer.tensors.size());
  for (const auto& [k, t] : optimizer.tensors) EXPECT_TRUE(trident::testing::all_close(back.tensors.at(k), t, 0, 0)) << k;
}

TEST_P(StreamedCheckpoint, AFailedWriteFailsOnEveryRankWithoutHanging) {
  const Case c = GetParam();
  if (comm::Communicator::world()->size() != c.shape.dp * c.shape.pp * c.shape.tp)
    GTEST_SKIP() << c.name() << " needs " << c.shape.dp * c.shape.pp * c.shape.tp << " ranks";
  Trained run(c);
  const std::string path = shared_dir(c.name() + "_fail") + "/no/such/parent/step-2";
  trident::testing::expect_error(
      [&] { save_training_checkpoint(path, *run.dp, run.parts(), nn::TrainingProgress{.step = 2, .data_position = {}, .extra = {}}, run.zero.get(), run.model_parallel()); },
      {run.writer() ? "no/such/parent" : "the writing rank (dp, pp and tp rank 0) failed to write the checkpoint"});
  // The ranks still agree on what comes next: a collective after the failure completes.
  Tensor one = scalar_tensor(1.0, DType::F64);
  comm::Communicator::world()->all_reduce(one, comm::ReduceOp::Sum).wait();
  EXPECT_EQ(one.item<double>(), comm::Communicator::world()->size());
}

INSTANTIATE_TEST_SUITE_P(Layouts, StreamedCheckpoint,
                         ::testing::Values(Case{{.dp = 2}, true}, Case{{.dp = 1, .pp = 2}}, Case{{.dp = 1, .tp = 2}},
                                           Case{{.dp = 2, .pp = 2}, true}, Case{{.dp = 2, .pp = 2}},
                                           Case{{.dp = 1, .pp = 2, .tp = 2}}, Case{{.dp = 2, .tp = 2}, true}),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
