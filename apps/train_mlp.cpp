// Smoke training: a two-hidden-layer MLP learns a synthetic 2-D task (is x0 * x1 > 0?) with
// plain SGD, printing the loss as it falls. It exercises the tensor core, the autograd engine
// and the first op set end to end; the models issue replaces it with GPT-2 as the main job.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>

#include "trident.h"

using namespace trident;

namespace {

struct Mlp {
  std::vector<Tensor> params;  // W1, b1, W2, b2, W3, b3

  Mlp(int64_t in, int64_t hidden, Generator& gen) {
    auto layer = [&](int64_t fan_in, int64_t fan_out) {
      // Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's default for Linear.
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      Tensor w = sub(mul(rand({fan_in, fan_out}, kF32, &gen), 2 * bound), bound);
      Tensor b = sub(mul(rand({fan_out}, kF32, &gen), 2 * bound), bound);
      params.push_back(w.set_requires_grad());
      params.push_back(b.set_requires_grad());
    };
    layer(in, hidden);
    layer(hidden, hidden);
    layer(hidden, 1);
  }

  Tensor forward(const Tensor& x) const {
    Tensor h = tanh(add(matmul(x, params[0]), params[1]));
    h = tanh(add(matmul(h, params[2]), params[3]));
    return add(matmul(h, params[4]), params[5]);
  }
};

// Inputs uniform in [-1, 1]^2, target +1 when x0 * x1 > 0 else -1.
void make_batch(int64_t n, Generator& gen, Tensor& x, Tensor& y) {
  x = sub(mul(rand({n, 2}, kF32, &gen), 2.0), 1.0);
  std::vector<float> xs = x.to_vector<float>(), ys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ys[static_cast<size_t>(i)] = xs[static_cast<size_t>(2 * i)] * xs[static_cast<size_t>(2 * i + 1)] > 0 ? 1.f : -1.f;
  y = from_vector(ys, {n, 1});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trident smoke training: an MLP on a synthetic task"};
  int steps = 600, hidden = 32, batch = 128, log_every = 50;
  double lr = 0.1;
  uint64_t seed = 1234;
  app.add_option("--steps", steps, "training steps")->check(CLI::PositiveNumber);
  app.add_option("--hidden", hidden, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "SGD learning rate")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "random seed");
  app.add_option("--log-every", log_every, "print the loss every N steps")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    Generator gen(seed);
    Mlp model(2, hidden, gen);
    Tensor xt, yt;
    make_batch(2048, gen, xt, yt);  // held-out set
    std::printf("%6s  %10s  %10s\n", "step", "train loss", "test acc");
    double first = 0, last = 0;
    for (int step = 0; step <= steps; ++step) {
      Tensor x, y;
      make_batch(batch, gen, x, y);
      Tensor diff = sub(model.forward(x), y);
      Tensor loss = mean(mul(diff, diff));
      for (Tensor& p : model.params) p.zero_grad();
      loss.backward();
      {
        NoGradGuard no_grad;
        for (Tensor& p : model.params) sub_(p, mul(p.grad(), lr));
      }
      const double l = loss.item<double>();
      if (step == 0) first = l;
      last = l;
      if (step % log_every == 0 || step == steps) {
        NoGradGuard no_grad;
        const std::vector<float> pred = model.forward(xt).to_vector<float>(), truth = yt.to_vector<float>();
        int correct = 0;
        for (size_t i = 0; i < pred.size(); ++i) correct += (pred[i] > 0) == (truth[i] > 0);
        std::printf("%6d  %10.4f  %9.1f%%\n", step, l, 100.0 * correct / static_cast<double>(pred.size()));
      }
    }
    std::printf("loss %.4f -> %.4f\n", first, last);
    return last < first ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
