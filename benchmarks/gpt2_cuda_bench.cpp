// GPT-2 training throughput on one GPU (issue 7's GPU benchmark): the 124M preset, context 1024,
// batch 8, bf16 autocast with f32 master weights, AdamW, no dropout, random tokens. Its PyTorch
// twin is benchmarks/gpt2_cuda_torch.py; scripts/gpu-check.sh runs both and prints them together.
//
//   gpt2_cuda_bench [batch] [steps] [preset] [--profile FILE]
//     -> {"tokens_per_s", "step_ms", "mfu", "peak_tflops", "peak", "parameters", "last_loss"}
// --profile FILE: after the timed steps, three more under the op profiler (NOTE [Op profiler]),
// its table written to FILE: where the step's device time goes.
// The median step time of `steps` timed steps after 3 warm-up steps, each step ended by reading
// the loss (a synchronization). MFU: the model FLOPs of apps/mfu.h (NOTE [MFU]) against this GPU's
// dense bf16 peak (apps::device_peak: TRIDENT_PEAK_TFLOPS, else the data-sheet table); "mfu" and
// "peak_tflops" are null when the GPU is not in the table, and "peak" says which peak was used
// (scripts/gpu-check.sh passes peak_tflops to the PyTorch twin, so both use the same).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/mfu.h"
#include "core/profiler.h"
#include "trident.h"

using namespace trident;
using namespace trident::models;

int main(int argc, char** argv) {
  std::vector<std::string> args;
  std::string profile_file;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--profile" && i + 1 < argc) profile_file = argv[++i];
    else args.push_back(argv[i]);
  }
  const int64_t B = args.size() > 0 ? std::atoi(args[0].c_str()) : 8;
  const int steps = args.size() > 1 ? std::atoi(args[1].c_str()) : 10;
  const std::string preset = args.size() > 2 ? args[2] : "124M";
  try {
    GPT2Config c = GPT2Config::preset(preset);
    c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
    const int64_t T = c.n_positions, V = c.vocab_size;
    const Device gpu = Device::cuda(0);
    const apps::Peak peak = apps::device_peak(0, "bf16", false);  // before the run: a bad TRIDENT_PEAK_TFLOPS fails fast
    Generator g(1);
    GPT2LMHeadModel model(c, &g);
    model.to(gpu);
    nn::optim::AdamW opt(model.parameters(), {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
    Generator data(2);
    const Tensor x = randint(0, V, {B, T}, DType::I64, &data).to(gpu);
    const Tensor y = randint(0, V, {B, T}, DType::I64, &data).to(gpu);
    std::vector<double> ms;
    double loss = 0;
    const int profiled = profile_file.empty() ? 0 : 3;
    for (int i = 0; i < steps + 3 + profiled; ++i) {
      if (profiled && i == steps + 3) profiler::start();
      const auto t0 = std::chrono::steady_clock::now();
      opt.zero_grad();
      Tensor l;
      {
        autocast::Guard bf16(DType::BF16);
        l = model.forward(x, y).loss;
      }
      l.backward();
      opt.step();
      loss = l.item<double>();
      const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i >= 3 && i < steps + 3) ms.push_back(dt);
    }
    if (profiled) {
      const profiler::Report r = profiler::stop();
      FILE* f = std::fopen(profile_file.c_str(), "w");
      if (f == nullptr) throw std::runtime_error("cannot write the profile to '" + profile_file + "'");
      std::fprintf(f, "GPT-2 %s, batch %lld x %lld tokens, bf16: op profile of %d steps (device time)\n%s", preset.c_str(),
                   static_cast<long long>(B), static_cast<long long>(T), profiled, r.table(30).c_str());
      std::fclose(f);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double n = static_cast<double>(model.num_parameters());
    const double tokens_per_s = static_cast<double>(B * T) / (med / 1e3);
    // NOTE [MFU]: one sequence of T positions, every position predicted (the output layer counted in gpt2_flop_model).
    const double flops_per_token = apps::training_flops(apps::gpt2_flop_model(model), 1, T, 0) / static_cast<double>(T);
    // JSON: a number, or null when the peak is unknown; the source as a string (its quotes and
    // backslashes, if any, made harmless).
    char mfu_text[32] = "null", peak_text[32] = "null";
    if (peak.known()) {
      std::snprintf(mfu_text, sizeof mfu_text, "%.4f", tokens_per_s * flops_per_token / peak.flops);
      std::snprintf(peak_text, sizeof peak_text, "%.3f", peak.flops / 1e12);
    }
    std::string source;
    for (char ch : peak.source) source += ch == '"' || ch == '\\' ? '\'' : ch;
    // printf spells a NaN "nan" and an infinity "inf", which no JSON reader takes; Python's json
    // reads NaN and Infinity (and then the summary in scripts/gpu-check.sh fails the row on them).
    char loss_text[32];
    if (std::isfinite(loss)) std::snprintf(loss_text, sizeof loss_text, "%.4f", loss);
    else std::snprintf(loss_text, sizeof loss_text, "%s", std::isnan(loss) ? "NaN" : loss > 0 ? "Infinity" : "-Infinity");
    std::printf(
        "{\"tokens_per_s\": %.1f, \"step_ms\": %.2f, \"mfu\": %s, \"peak_tflops\": %s, \"peak\": \"%s\", \"parameters\": %lld, "
        "\"last_loss\": %s}\n",
        tokens_per_s, med, mfu_text, peak_text, source.c_str(), static_cast<long long>(n), loss_text);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2_cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
