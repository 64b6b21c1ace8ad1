// GPT-2 training throughput on the CPU: vocabulary 50304, context 128, 4 layers, 4 heads, width
// 256, batch 8, AdamW, no dropout; random tokens. The same model written plainly in PyTorch is
// benchmarks/gpt2_train_torch.py; scripts/bench-gpt2-vs-torch.sh runs both with the same threads.
//
//   bench_gpt2_train [threads] [steps]   ->  {"tokens_per_s": ..., "step_ms": ..., "threads": ...}
// Prints the median step time of `steps` timed steps (after 3 warm-up steps).
//
//   bench_gpt2_train [threads] [steps] hvp   ->  {"grad_ms": ..., "hvp_ms": ..., "threads": ...}
//   bench_gpt2_train [threads] [steps] bf16   ->  as the first, the forward under autocast bf16
// (NOTE [Autocast]; its products on AMX where the CPU has it, NOTE [AMX bf16 GEMM]).
//   bench_gpt2_train [threads] [steps] bf16-logits, fp32-logits   ->  as bf16 and fp32 with the
// loss on materialized logits (GPT2Config::loss_without_logits off), to compare with the default
// (NOTE [Loss without logits]).
//
// The same model's gradient (forward + backward, no optimizer) and a Hessian-vector product over
// every parameter (forward, a create_graph backward, the dot with v, a second backward; NOTE
// [Higher-order gradients]), median of `steps` each after one warm-up; with TRIDENT_BENCH_PROFILE
// set, the op profile of one more product goes to stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/train_step_bench.h"
#include "core/parallel.h"
#include "trident.h"

using namespace trident;
using namespace trident::models;

namespace {

double median_ms(int runs, const std::function<void()>& f) {
  std::vector<double> ms;
  for (int i = 0; i < runs + 1; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 1) ms.push_back(dt);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int hvp_bench(GPT2LMHeadModel& model, const Tensor& x, const Tensor& y, int steps, Generator* gen) {
  const autograd::TensorList params = model.parameters();
  autograd::TensorList vs;
  for (const Tensor& p : params) vs.push_back(randn_like(p, gen));
  double checksum = 0;
  const double grad_ms = median_ms(steps, [&] {
    const autograd::TensorList g = autograd::grad({model.forward(x, y).loss}, params);
    checksum = sum(g.back()).item<double>();
  });
  const double hvp_ms = median_ms(steps, [&] {
    const autograd::TensorList g = autograd::grad({model.forward(x, y).loss}, params, {}, false, false, /*create_graph=*/true);
    Tensor dot = sum(mul(g[0], vs[0]));
    for (size_t i = 1; i < g.size(); ++i) dot = add(dot, sum(mul(g[i], vs[i])));
    const autograd::TensorList hv = autograd::grad({dot}, params);
    checksum = sum(hv.back()).item<double>();
  });
  if (std::getenv("TRIDENT_BENCH_PROFILE")) {  // where one more product's time goes, to stderr
    profiler::start();
    const autograd::TensorList g = autograd::grad({model.forward(x, y).loss}, params, {}, false, false, true);
    Tensor dot = sum(mul(g[0], vs[0]));
    for (size_t i = 1; i < g.size(); ++i) dot = add(dot, sum(mul(g[i], vs[i])));
    autograd::grad({dot}, params);
    std::fprintf(stderr, "%s\n", profiler::stop().table().c_str());
  }
  std::printf("{\"grad_ms\": %.2f, \"hvp_ms\": %.2f, \"threads\": %d, \"parameters\": %lld, \"checksum\": %.6g}\n", grad_ms,
              hvp_ms, get_num_threads(), static_cast<long long>(model.num_parameters()), checksum);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  if (threads > 0) set_num_threads(threads);
  const int64_t B = 8, T = 128, V = 50304;
  GPT2Config c = GPT2Config::preset("tiny");
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 256;
  c.vocab_size = V;
  c.padded_vocab_size = 0;
  c.n_positions = T;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  const std::string mode = argc > 3 ? argv[3] : "";
  c.loss_without_logits = mode.find("-logits") == std::string::npos;
  Generator g(1);
  GPT2LMHeadModel model(c, &g);
  nn::optim::AdamW opt(model.parameters(), {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  Generator data(2);
  const Tensor x = randint(0, V, {B, T}, DType::I64, &data), y = randint(0, V, {B, T}, DType::I64, &data);
  if (mode == "hvp") return hvp_bench(model, x, y, steps, &data);
  const bool bf16 = mode.rfind("bf16", 0) == 0;
  const bench::StepTiming t = bench::time_training_steps(steps, bf16, opt, [&] { return model.forward(x, y).loss; });
  const double med = t.median_ms;
  std::printf("{\"tokens_per_s\": %.1f, \"step_ms\": %.2f, \"threads\": %d, \"parameters\": %lld, \"last_loss\": %.4f, "
              "\"peak_step_mib\": %.1f}\n",
              static_cast<double>(B * T) / (med / 1e3), med, get_num_threads(), static_cast<long long>(model.num_parameters()),
              t.last_loss, static_cast<double>(t.peak_step_bytes) / (1 << 20));
  return 0;
}
