// Communication benchmarks, run under mpirun (scripts/bench-allreduce.sh):
//
//   allreduce [--min-bytes 8] [--max-bytes 64M] [--seconds 0.2]
//     An all-reduce (sum, f32) bandwidth table over message sizes, as nccl-tests prints it: time
//     per operation (the slowest rank's mean), algorithm bandwidth = bytes / time, and bus
//     bandwidth = algbw * 2 (n - 1) / n, the rate each link of a ring all-reduce carries, which
//     is comparable across rank counts.
//   dp-step [--batch 64] [--width 1024] [--depth 4] [--steps 10]
//     The step time (forward, backward with the bucketed all-reduce, SGD step) of an MLP at a
//     fixed per-rank batch, with 25 MB buckets (launched as the hooks fill them) and with one
//     bucket holding every gradient (launched only when backward ends: no overlap). Running it
//     with -np 1 and -np 2 gives dp = 1 against dp = 2.
//
// Plain program (not Google Benchmark): every rank must run the same iterations in step, and
// rank 0 prints the table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "trident.h"

using namespace trident;
using namespace trident::parallel;
using namespace trident::parallel::comm;

namespace {

using Clock = std::chrono::steady_clock;

int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const std::string unit = end ? end : "";
  if (unit == "K" || unit == "k") v *= 1024;
  else if (unit == "M") v *= 1024 * 1024;
  else if (unit == "G") v *= 1024.0 * 1024 * 1024;
  else TRIDENT_CHECK(unit.empty(), "bad size \"", s, "\" (a number with an optional K, M or G)");
  return static_cast<int64_t>(v);
}

// The slowest rank's value.
double max_over(Communicator& c, double v) {
  Tensor t = scalar_tensor(v, DType::F64);
  c.all_reduce(t, ReduceOp::Max).wait();
  return t.item<double>();
}

int run_allreduce(Communicator& world, int64_t min_bytes, int64_t max_bytes, double seconds) {
  const int n = world.size();
  if (world.rank() == 0) {
    std::printf("# all_reduce (sum, f32) on %d ranks, backend %s\n", n, std::string(backend_name(world.backend())).c_str());
    std::printf("#%12s %12s %8s %12s %10s %10s\n", "size (B)", "count", "iters", "time (us)", "algbw GB/s",
                "busbw GB/s");
  }
  double sum_busbw = 0;
  int rows = 0;
  for (int64_t bytes = std::max<int64_t>(min_bytes, 4); bytes <= max_bytes; bytes *= 4) {
    const int64_t count = bytes / 4;
    Tensor t = full({count}, 1.0, DType::F32);
    // Warm up, then size the run from the warm-up's time (agreed on by every rank).
    for (int i = 0; i < 3; ++i) world.all_reduce(t).wait();
    const auto w0 = Clock::now();
    for (int i = 0; i < 3; ++i) world.all_reduce(t).wait();
    const double probe = max_over(world, std::chrono::duration<double>(Clock::now() - w0).count() / 3);
    const int iters = static_cast<int>(std::clamp(seconds / std::max(probe, 1e-7), 5.0, 10000.0));
    world.barrier().wait();
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) world.all_reduce(t).wait();
    const double per = max_over(world, std::chrono::duration<double>(Clock::now() - t0).count() / iters);
    const double algbw = static_cast<double>(bytes) / per / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    sum_busbw += busbw;
    ++rows;
    if (world.rank() == 0)
      std::printf(" %12lld %12lld %8d %12.2f %10.3f %10.3f\n", static_cast<long long>(bytes),
                  static_cast<long long>(count), iters, per * 1e6, algbw, busbw);
  }
  if (world.rank() == 0 && rows > 0) std::printf("# average bus bandwidth: %.3f GB/s\n", sum_busbw / rows);
  return 0;
}

int run_dp_step(const std::shared_ptr<Communicator>& world, int64_t batch, int64_t width, int depth, int steps) {
  auto make = [&] {
    Generator g(5);
    auto m = std::make_shared<nn::Sequential>();
    for (int i = 0; i < depth; ++i) {
      m->push_back(std::make_shared<nn::Linear>(width, width, true, kF32, &g));
      m->push_back(std::make_shared<nn::GELU>());
    }
    return m;
  };
  int64_t grad_bytes = 0;
  for (const Tensor& p : make()->parameters()) grad_bytes += static_cast<int64_t>(p.nbytes());
  if (world->rank() == 0) {
    std::printf("# dp-step: MLP %d x Linear(%lld, %lld) + GELU, %.1f MB of f32 gradients, per-rank batch %lld, dp = %d\n",
                depth, static_cast<long long>(width), static_cast<long long>(width), grad_bytes / 1e6,
                static_cast<long long>(batch), world->size());
    std::printf("#%-34s %10s %12s %14s\n", "mode", "buckets", "step (ms)", "comm calls/step");
  }
  struct Mode {
    const char* name;
    int64_t bucket_bytes;
  };
  for (const Mode& mode : {Mode{"overlapped (25 MB buckets)", 25 << 20}, Mode{"1 MB buckets", 1 << 20},
                           Mode{"one bucket (no overlap)", grad_bytes + 1}}) {
    auto model = make();
    auto dp = world->split(0, world->rank(), "dp");
    DataParallel ddp(*model, dp, {.bucket_bytes = mode.bucket_bytes});
    nn::optim::SGD opt(model->parameters(), {.lr = 1e-3});
    Generator g(100 + static_cast<uint64_t>(world->rank()));
    const Tensor x = randn({batch, width}, kF32, &g), y = randn({batch, width}, kF32, &g);
    auto step = [&] {
      mse_loss(model->forward(x), y).backward();
      opt.step();
      opt.zero_grad();
    };
    for (int i = 0; i < 2; ++i) step();
    dp->reset_stats();
    dp->barrier().wait();
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double per = max_over(*world, std::chrono::duration<double>(Clock::now() - t0).count() / steps);
    const double calls = static_cast<double>(dp->stats()[CommOp::AllReduce].calls) / steps;
    if (world->rank() == 0)
      std::printf(" %-34s %10zu %12.2f %14.1f\n", mode.name, ddp.buckets().size(), per * 1e3, calls);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    const std::string mode = args.empty() ? "allreduce" : args[0];
    auto opt = [&](const std::string& name, const std::string& def) {
      for (size_t i = 1; i + 1 < args.size(); ++i)
        if (args[i] == name) return args[i + 1];
      return def;
    };
    auto world = Communicator::world();
    if (mode == "allreduce")
      return run_allreduce(*world, parse_bytes(opt("--min-bytes", "8")), parse_bytes(opt("--max-bytes", "64M")),
                           std::stod(opt("--seconds", "0.2")));
    if (mode == "dp-step")
      return run_dp_step(world, std::stoll(opt("--batch", "64")), std::stoll(opt("--width", "1024")),
                         std::stoi(opt("--depth", "4")), std::stoi(opt("--steps", "10")));
    std::fprintf(stderr, "usage: allreduce_bench allreduce|dp-step [options] (see the source's header)\n");
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
