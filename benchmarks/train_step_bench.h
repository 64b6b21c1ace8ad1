// The training-step timing loop of the CPU model benchmarks (bench_gpt2_train, bench_bert_train):
// `step` is one optimizer step returning its loss (the forward under autocast bf16 when asked);
// the median of `steps` timed steps after 3 warm-up steps, and with TRIDENT_BENCH_PROFILE set the
// op profile of one more step on stderr. peak_step_bytes: the most the CPU allocator held during
// the timed steps above what it held before them (parameters, optimizer state): activations,
// gradients and temporaries.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "trident.h"

namespace trident::bench {

struct StepTiming {
  double median_ms = 0;
  double last_loss = 0;
  int64_t peak_step_bytes = 0;
};

// `loss_of_forward` runs the forward and returns the loss; the zero_grad, backward and optimizer
// step are done here, the forward inside autocast::Guard(bf16) when `bf16`.
inline StepTiming time_training_steps(int steps, bool bf16, nn::optim::Optimizer& opt,
                                      const std::function<Tensor()>& loss_of_forward) {
  const auto one_step = [&] {
    opt.zero_grad();
    Tensor l;
    {
      autocast::Guard guard(DType::BF16, bf16);
      l = loss_of_forward();
    }
    l.backward();
    opt.step();
    return l.item<double>();
  };
  StepTiming r;
  std::vector<double> ms;
  int64_t before = 0;
  for (int i = 0; i < steps + 3; ++i) {
    if (i == 3) {
      opt.zero_grad();  // gradients freed: the baseline is the parameters and the optimizer state
      before = memory_stats(kCPU).current_bytes;
      reset_peak_memory_stats(kCPU);
    }
    const auto t0 = std::chrono::steady_clock::now();
    r.last_loss = one_step();
    const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 3) ms.push_back(dt);
  }
  r.peak_step_bytes = memory_stats(kCPU).peak_bytes - before;
  if (std::getenv("TRIDENT_BENCH_PROFILE")) {  // where one more step's time goes, to stderr
    profiler::start();
    one_step();
    std::fprintf(stderr, "%s\n", profiler::stop().table().c_str());
  }
  std::sort(ms.begin(), ms.end());
  r.median_ms = ms[ms.size() / 2];
  return r;
}

}  // namespace trident::bench
