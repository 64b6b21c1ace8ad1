#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "nn/checkpoint.h"
#include "nn/training_checkpoint.h"
#include "test_util.h"

using namespace trident;
using namespace trident::nn;
using namespace trident::testing;
namespace fs = std::filesystem;

namespace {

// A small training run: MLP with dropout, AdamW, warm-up + cosine schedule, f16 loss scaling,
// data drawn from its own generator.
struct TrainingRun {
  Generator init_gen, data_gen{123};
  std::shared_ptr<Sequential> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<optim::LRScheduler> sched;
  GradScaler scaler{{.init_scale = 1024.0, .growth_interval = 3}};

  explicit TrainingRun(uint64_t init_seed) : init_gen(init_seed) {
    model = std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<UnaryModule>>{
        std::make_shared<Linear>(8, 32, true, kF32, &init_gen), std::make_shared<GELU>(), std::make_shared<Dropout>(0.2),
        std::make_shared<Linear>(32, 1, true, kF32, &init_gen)});
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 3e-3, .weight_decay = 0.1});
    sched = std::make_unique<optim::LRScheduler>(*opt, std::make_shared<optim::WarmupCosineLR>(3, 20, 0.1));
  }
  TrainingCheckpointParts parts() { return {model.get(), opt.get(), &scaler, {{"data", &data_gen}}, nullptr, {}}; }
  double step() {
    Tensor x = randn({16, 8}, kF32, &data_gen);
    Tensor y = sum(mul(x, x), {1}, true);
    Tensor loss;
    {
      autocast::Guard ac(kF16);
      loss = mse_loss(model->forward(x), y);
    }
    opt->zero_grad();
    scaler.scale(loss).backward();
    scaler.step(*opt);
    scaler.update();
    sched->step();
    return loss.item<double>();
  }
};

std::string scratch(const char* name) {
  const fs::path p = fs::temp_directory_path() / ("trident_resume_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

}  // namespace

TEST(TrainingCheckpoint, ResumedLossesEqualTheUninterruptedRunBitForBit) {
  const std::string dir = scratch("exact");
  manual_seed(42);
  TrainingRun a(7);
  std::vector<double> straight;
  for (int s = 1; s <= 12; ++s) {
    straight.push_back(a.step());
    if (s == 5) save_training_checkpoint(dir + "/step5", a.parts(), {5, {{"epoch", 0}, {"batch", 5}}, {{"note", "mid"}}});
  }
  // A fresh run with other weights and other random states resumes from step 5.
  manual_seed(1000);
  TrainingRun b(99);
  const TrainingProgress p = load_training_checkpoint(dir + "/step5", b.parts());
  EXPECT_EQ(p.step, 5);
  EXPECT_EQ(p.data_position["batch"].get<int>(), 5);
  EXPECT_EQ(p.extra["note"].get<std::string>(), "mid");
  b.sched->set_step(p.step);
  for (int s = 6; s <= 12; ++s) EXPECT_EQ(b.step(), straight[static_cast<size_t>(s - 1)]) << "step " << s;
  EXPECT_EQ(b.scaler.get_scale(), a.scaler.get_scale());
  for (const auto& [name, t] : a.model->state_dict()) EXPECT_TRUE(all_close(t, b.model->state_dict().at(name), 0, 0)) << name;
  fs::remove_all(dir);
}

TEST(TrainingCheckpoint, AnotherModelOrADamagedFileIsAClearError) {
  const std::string dir = scratch("errors");
  TrainingRun a(1);
  a.step();
  save_training_checkpoint(dir + "/ck", a.parts(), {1, {}, {}});
  // Another architecture: nothing changes, the message names the checkpoint and the mismatch.
  Sequential other({std::make_shared<Linear>(8, 16), std::make_shared<Linear>(16, 1)});
  const Tensor before = other.state_dict().at("0.weight").clone();
  TrainingCheckpointParts parts{&other, nullptr, nullptr, {}, nullptr, {}};
  const std::string m = error_message([&] { load_training_checkpoint(dir + "/ck", parts); });
  EXPECT_NE(m.find(dir + "/ck"), std::string::npos) << m;
  EXPECT_NE(m.find("0.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("3.weight"), std::string::npos) << m;
  EXPECT_TRUE(all_close(other.state_dict().at("0.weight"), before, 0, 0));
  // A flipped byte in the model file: caught by the manifest's checksum.
  {
    std::fstream f(dir + "/ck/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  TrainingRun b(2);
  const std::string c = error_message([&] { load_training_checkpoint(dir + "/ck", b.parts()); });
  EXPECT_NE(c.find("model.safetensors"), std::string::npos) << c;
  fs::remove_all(dir);
}

// A partial load (a pipeline stage's, parallel/checkpoint.h): only the named model entries are
// read, the others are checked but left alone, and the optimizer state goes to the callback
// instead of an optimizer. A name the model lacks is an error before anything changes.
TEST(TrainingCheckpoint, PartialLoadReadsOnlyTheNamedEntries) {
  const std::string dir = scratch("partial");
  TrainingRun a(1);
  a.step();
  a.step();
  save_training_checkpoint(dir + "/ck", a.parts(), {2, {}, {}});
  TrainingRun b(2);
  const auto before = b.model->state_dict();
  const std::set<std::string> only{"0.weight", "3.bias"};
  optim::OptimizerState got;
  TrainingCheckpointParts parts = b.parts();
  parts.optimizer = nullptr;
  parts.load_only = &only;
  parts.load_optimizer = [&](const optim::OptimizerState& s) { got = s; };
  EXPECT_EQ(load_training_checkpoint(dir + "/ck", parts).step, 2);
  const auto want = a.model->state_dict(), now = b.model->state_dict();
  for (const auto& [name, t] : now) {
    if (only.count(name) != 0)
      EXPECT_TRUE(all_close(t, want.at(name), 0, 0)) << name << " is read";
    else
      EXPECT_TRUE(all_close(t, before.at(name), 0, 0)) << name << " is left alone";
  }
  const optim::OptimizerState saved = a.opt->state_dict();
  EXPECT_EQ(got.optimizer, saved.optimizer);
  ASSERT_EQ(got.tensors.size(), saved.tensors.size());
  for (const auto& [key, t] : saved.tensors) EXPECT_TRUE(all_close(got.tensors.at(key), t, 0, 0)) << key;
  const std::set<std::string> unknown{"0.weight", "9.weight"};
  parts.load_only = &unknown;
  TrainingRun c(3);
  parts.model = c.model.get();
  const auto c_before = c.model->state_dict().at("0.weight").clone();
  const std::string m = error_message([&] { load_training_checkpoint(dir + "/ck", parts); });
  EXPECT_NE(m.find("9.weight"), std::string::npos) << m;
  EXPECT_TRUE(all_close(c.model->state_dict().at("0.weight"), c_before, 0, 0)) << "nothing changed";
  fs::remove_all(dir);
}

// Streamed parts (NOTE [Streamed safetensors]; what parallel/checkpoint.h gives the writer): the
// model's entries and the optimizer's tensors produced one at a time write the files the live
// model and optimizer write, and resume alike. An optimizer stream needs the state's name and
// scalars and no tensors beside it.
TEST(TrainingCheckpoint, StreamedPartsWriteTheSameFiles) {
  const std::string dir = scratch("streamed");
  TrainingRun a(1);
  a.step();
  a.step();
  save_training_checkpoint(dir + "/live", a.parts(), {2, {}, {}});
  auto stream_of = [](const std::map<std::string, Tensor>& tensors, int& calls) {
    TensorStream s;
    std::vector<Tensor> at;
    for (const auto& [name, t] : tensors) {
      s.specs.push_back({name, t.dtype(), t.sizes()});
      at.push_back(t);
    }
    s.produce = [at, &calls](size_t i) {
      ++calls;
      return at[i].clone();
    };
    return s;
  };
  int model_calls = 0, optimizer_calls = 0;
  const TensorStream model = stream_of(a.model->state_dict(), model_calls);
  optim::OptimizerState header = a.opt->state_dict();
  const TensorStream optimizer = stream_of(header.tensors, optimizer_calls);
  header.tensors.clear();
  TrainingCheckpointParts parts = a.parts();
  parts.model = nullptr;
  parts.optimizer = nullptr;
  parts.model_stream = &model;
  parts.optimizer_state = &header;
  parts.optimizer_stream = &optimizer;
  save_training_checkpoint(dir + "/streamed", parts, {2, {}, {}});
  EXPECT_EQ(model_calls, static_cast<int>(model.specs.size()));
  EXPECT_EQ(optimizer_calls, static_cast<int>(optimizer.specs.size()));
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "trainer.json"}) {
    std::ifstream x(dir + "/live/" + file, std::ios::binary), y(dir + "/streamed/" + file, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(x), {}), std::string(std::istreambuf_iterator<char>(y), {})) << file;
  }
  // Each load sets the default generator (dropout's) too, so the two resumed steps draw alike.
  TrainingRun b(2), c(3);
  load_training_checkpoint(dir + "/streamed", b.parts());
  const double from_streamed = b.step();
  load_training_checkpoint(dir + "/live", c.parts());
  EXPECT_EQ(from_streamed, c.step()) << "the streamed checkpoint resumes the run as the live one";

  optim::OptimizerState with_tensors = a.opt->state_dict();
  parts.optimizer_state = &with_tensors;
  expect_error([&] { save_training_checkpoint(dir + "/bad", parts, {2, {}, {}}); },
               {"an optimizer stream goes with an optimizer state without tensors"});
  EXPECT_FALSE(fs::exists(dir + "/bad"));
  fs::remove_all(dir);
}
