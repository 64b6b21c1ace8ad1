// Smoke training: an MLP learns a synthetic 2-D task (is x0 * x1 > 0?) with AdamW, printing the
// loss as it falls. It exercises the tensor core, autograd, nn and training checkpoints end to
// end (--ckpt-dir / --resume continue a run exactly, NOTE [Exact resume]); the models issue
// replaces it with GPT-2 as the main job.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include "nn/checkpoint.h"
#include "nn/training_checkpoint.h"
#include "trident.h"

using namespace trident;

namespace {

// Inputs uniform in [-1, 1]^2, target 1 when x0 * x1 > 0 else 0.
void make_batch(int64_t n, Generator& gen, Tensor& x, Tensor& y) {
  x = sub(mul(rand({n, 2}, kF32, &gen), 2.0), 1.0);
  std::vector<float> xs = x.to_vector<float>(), ys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ys[static_cast<size_t>(i)] = xs[static_cast<size_t>(2 * i)] * xs[static_cast<size_t>(2 * i + 1)] > 0 ? 1.f : 0.f;
  y = from_vector(ys, {n, 1});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trident smoke training: an MLP on a synthetic task"};
  int steps = 600, hidden = 32, batch = 128, log_every = 50, ckpt_every = 0;
  double lr = 1e-2;
  uint64_t seed = 1234;
  std::string ckpt_dir, resume;
  app.add_option("--steps", steps, "train until this step")->check(CLI::PositiveNumber);
  app.add_option("--hidden", hidden, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "AdamW learning rate")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "random seed");
  app.add_option("--log-every", log_every, "print the loss every N steps")->check(CLI::PositiveNumber);
  app.add_option("--ckpt-dir", ckpt_dir, "folder for checkpoints (step-N subfolders)");
  app.add_option("--ckpt-every", ckpt_every, "write a checkpoint every N steps (needs --ckpt-dir)")->check(CLI::NonNegativeNumber);
  app.add_option("--resume", resume, "a checkpoint folder to continue from, or 'latest' (the newest in --ckpt-dir)");
  CLI11_PARSE(app, argc, argv);

  try {
    manual_seed(seed);  // dropout draws from the default generator
    Generator init_gen(seed), data_gen(seed + 1);
    nn::Sequential model({std::make_shared<nn::Linear>(2, hidden, true, kF32, &init_gen), std::make_shared<nn::GELU>(),
                          std::make_shared<nn::Dropout>(0.05), std::make_shared<nn::Linear>(hidden, hidden, true, kF32, &init_gen),
                          std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(hidden, 1, true, kF32, &init_gen)});
    nn::optim::AdamW opt(model.parameters(), {.lr = lr, .weight_decay = 0.01});
    nn::TrainingCheckpointParts parts{&model, &opt, nullptr, {{"data", &data_gen}}, nullptr, {}};

    Generator eval_gen(seed + 2);
    Tensor xt, yt;
    make_batch(2048, eval_gen, xt, yt);  // held-out set

    int start = 0;
    if (!resume.empty()) {
      if (resume == "latest") {
        TRIDENT_CHECK(!ckpt_dir.empty(), "--resume latest needs --ckpt-dir");
        const auto latest = nn::latest_checkpoint(ckpt_dir);
        TRIDENT_CHECK(latest.has_value(), "--resume latest: no complete checkpoint in ", ckpt_dir);
        resume = *latest;
      }
      start = static_cast<int>(nn::load_training_checkpoint(resume, parts).step);
      std::printf("resumed from %s at step %d\n", resume.c_str(), start);
    }
    TRIDENT_CHECK(ckpt_every == 0 || !ckpt_dir.empty(), "--ckpt-every needs --ckpt-dir");
    if (!ckpt_dir.empty()) std::filesystem::create_directories(ckpt_dir);

    std::printf("%6s  %12s  %10s\n", "step", "train loss", "test acc");
    double first = -1, last = 0;
    for (int step = start + 1; step <= steps; ++step) {
      Tensor x, y;
      make_batch(batch, data_gen, x, y);
      Tensor loss = binary_cross_entropy_with_logits(model.forward(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      const double l = loss.item<double>();
      if (first < 0) first = l;
      last = l;
      if (step % log_every == 0 || step == steps) {
        NoGradGuard no_grad;
        model.eval();
        const std::vector<float> pred = model.forward(xt).to_vector<float>(), truth = yt.to_vector<float>();
        model.train();
        int correct = 0;
        for (size_t i = 0; i < pred.size(); ++i) correct += (pred[i] > 0) == (truth[i] > 0.5f);
        // %.9g: enough digits to tell any two f32 losses apart (the resume test compares them).
        std::printf("%6d  %12.9g  %9.1f%%\n", step, l, 100.0 * correct / static_cast<double>(pred.size()));
      }
      if (ckpt_every > 0 && step % ckpt_every == 0) {
        const std::string path = ckpt_dir + "/step-" + std::to_string(step);
        nn::save_training_checkpoint(path, parts, {step, {}, {}});
      }
    }
    if (first >= 0) std::printf("loss %.4f -> %.4f\n", first, last);
    return first < 0 || last < first ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.message().c_str());
    return 2;
  }
}
