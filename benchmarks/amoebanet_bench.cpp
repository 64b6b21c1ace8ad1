// Training throughput of AmoebaNet on the CPU: images per second of SGD-with-momentum steps
// (forward, cross-entropy, backward, update) on random images, median over steps after three
// warm-up steps (benchmarks/train_step_bench.h; TRIDENT_BENCH_PROFILE prints an op profile); the
// forward under bf16 autocast with --precision bf16. Prints JSON like its PyTorch twin, benchmarks/amoebanet_torch_bench.py, which
// trains the same network; scripts/bench-amoebanet-vs-torch.sh runs both and prints the ratio.
//
//   OMP_NUM_THREADS=T bench_amoebanet [--genotype D] [--cells 6] [--filters 32] [--image 32]
//                                     [--batch 32] [--classes 10] [--steps 6] [--precision fp32|bf16]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "train_step_bench.h"
#include "trident.h"

using namespace trident;
using namespace trident::models;

int main(int argc, char** argv) {
  std::string genotype = "D", precision = "fp32";
  int64_t cells = 6, filters = 32, image = 32, batch = 32, classes = 10, steps = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--genotype") genotype = v;
    else if (k == "--cells") cells = std::atoll(v);
    else if (k == "--filters") filters = std::atoll(v);
    else if (k == "--image") image = std::atoll(v);
    else if (k == "--batch") batch = std::atoll(v);
    else if (k == "--classes") classes = std::atoll(v);
    else if (k == "--steps") steps = std::atoll(v);
    else if (k == "--precision") precision = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    const std::string name = "amoebanet-" + genotype + "(" + std::to_string(cells) + "," + std::to_string(filters) + ")";
    AmoebaNet model(AmoebaNetConfig::from_name(name, classes, image));
    nn::optim::SGDOptions o;
    o.lr = 0.01;
    o.momentum = 0.9;
    nn::optim::SGD opt(model.parameters(), o);
    Generator g(0);
    const Tensor x = randn({batch, 3, image, image}, kF32, &g);
    const Tensor y = randint(0, classes, {batch}, DType::I64, &g);
    if (precision != "fp32" && precision != "bf16") {
      std::fprintf(stderr, "--precision must be fp32 or bf16, got %s\n", precision.c_str());
      return 2;
    }
    const bench::StepTiming t = bench::time_training_steps(static_cast<int>(steps), precision == "bf16", opt,
                                                           [&] { return cross_entropy(model.forward(x), y); });
    const double med = t.median_ms / 1e3, loss = t.last_loss;
    std::printf("{\"images_per_s\": %.3f, \"parameters\": %lld, \"step_ms\": %.3f, \"loss\": %.6f, \"finite\": %s}\n",
                static_cast<double>(batch) / med, static_cast<long long>(model.num_parameters()), med * 1e3, loss,
                std::isfinite(loss) ? "true" : "false");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
