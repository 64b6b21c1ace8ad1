// Tensor-parallel GPT-2 training on CPU ranks: tokens/s at tp = the number of ranks, and the tp
// group's communication per step beside Megatron's formula (parallel/tensor_parallel/). Not Google
// Benchmark: every rank must run exactly the same iterations (collectives), as in
// allreduce_bench. scripts/bench-tp.sh runs it at tp = 1 and 2.
//   mpirun -np N tp_bench [--layers L] [--width C] [--heads H] [--vocab V] [--batch B] [--seq T] [--steps S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/factory.h"
#include "models/gpt2.h"
#include "nn/optim/sgd.h"
#include "parallel/tensor_parallel/tp_layers.h"

using namespace trident;

int main(int argc, char** argv) {
  int64_t L = 4, C = 256, H = 8, V = 50257, B = 4, T = 128, steps = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int64_t v = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--layers")) L = v;
    else if (!std::strcmp(argv[i], "--width")) C = v;
    else if (!std::strcmp(argv[i], "--heads")) H = v;
    else if (!std::strcmp(argv[i], "--vocab")) V = v;
    else if (!std::strcmp(argv[i], "--batch")) B = v;
    else if (!std::strcmp(argv[i], "--seq")) T = v;
    else if (!std::strcmp(argv[i], "--steps")) steps = v;
    else {
      std::fprintf(stderr, "tp_bench: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  try {
    const auto world = parallel::comm::Communicator::world();
    const int tp = world->size();
    auto layers = parallel::tp::tensor_parallel_layers_for(tp);
    models::GPT2Config c = models::GPT2Config::preset("tiny");
    c.n_layer = L;
    c.n_embd = C;
    c.n_head = H;
    c.vocab_size = V;
    c.padded_vocab_size = 0;
    c.n_positions = T;
    c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
    c.layers = layers;
    Generator init(1);
    models::GPT2LMHeadModel model(c, &init);
    nn::optim::SGD opt(model.parameters(), nn::optim::SGDOptions{.lr = 1e-3});
    Generator data(2);
    const Tensor x = randint(0, V, {B, T}, DType::I64, &data), y = randint(0, V, {B, T}, DType::I64, &data);
    std::vector<double> secs;
    parallel::comm::CommStats one_step;
    for (int64_t s = 0; s < steps; ++s) {
      world->barrier().wait();
      if (layers) layers->group()->reset_stats();
      const auto t0 = std::chrono::steady_clock::now();
      model.forward(x, y).loss.backward();
      opt.step();
      opt.zero_grad();
      world->barrier().wait();
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (layers) one_step = layers->group()->stats();
    }
    std::vector<double> timed(secs.begin() + 1, secs.end());  // the first step warms up
    std::sort(timed.begin(), timed.end());
    const double median = timed[timed.size() / 2];
    if (world->rank() == 0) {
      std::printf("GPT-2 L=%lld C=%lld heads=%lld V=%lld, batch %lld x %lld tokens, tp = %d (%d OpenMP threads per rank)\n",
                  (long long)L, (long long)C, (long long)H, (long long)V, (long long)B, (long long)T, tp,
                  std::getenv("OMP_NUM_THREADS") ? std::atoi(std::getenv("OMP_NUM_THREADS")) : 0);
      std::printf("step %.1f ms (median of %zu), %.0f tokens/s\n", median * 1e3, timed.size(), double(B * T) / median);
      // Megatron's count, f32: (4 L + 2) all-reduces of B T C (2 per block forward, 2 backward,
      // the embedding's sum, the logits' input gradient) and 3 of B T (the loss's max, target
      // logit, sum of exponentials).
      const int64_t formula = tp > 1 ? ((4 * L + 2) * B * T * C + 3 * B * T) * 4 : 0;
      const auto& ar = one_step[parallel::comm::CommOp::AllReduce];
      std::printf("| per step (tp group) | calls | bytes measured | bytes by formula ((4L+2) B T C + 3 B T) x 4 |\n");
      std::printf("|---|---|---|---|\n");
      std::printf("| all_reduce | %lld | %lld | %lld |\n", (long long)ar.calls, (long long)ar.bytes, (long long)formula);
      std::printf("| everything | %lld | %lld | |\n", (long long)one_step.total_calls(), (long long)one_step.total_bytes());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "tp_bench: %s\n", e.message().c_str());
    return 2;
  }
  return 0;
}
