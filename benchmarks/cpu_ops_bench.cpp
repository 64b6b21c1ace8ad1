// CPU op benchmarks. Each case has a twin of the same name in benchmarks/torch_cpu_bench.py;
// scripts/bench-cpu-vs-torch.sh runs both with the same thread count and prints the ratio.
// Names: <op>/<fwd|fwdbwd>/<shape>. Times are wall-clock (the ops are multi-threaded).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>

#include "trident.h"

using namespace trident;

namespace {

Tensor param(const Shape& s, uint64_t seed, double scale = 1.0) {
  Generator g(seed);
  return mul(randn(s, kF32, &g), scale).detach();
}

// Runs `forward` (and backward from the sum of its output when `backward`) each iteration.
template <typename F>
void run(benchmark::State& state, const std::vector<Tensor*>& leaves, bool backward, const F& forward) {
  for (Tensor* t : leaves) t->set_requires_grad(backward);
  for (auto _ : state) {
    Tensor y = forward();
    if (backward) {
      // d/dy of sum(y) is ones: give it directly, so the timed work is the op's backward only.
      y.backward(ones_like(y));
      for (Tensor* t : leaves) t->zero_grad();
    }
    benchmark::DoNotOptimize(y.data_ptr());
  }
}

// ---- matmul and linear ----
void BM_blas_sgemm(benchmark::State& state) {  // the direct OpenBLAS call matmul must match
  const int n = 1024;
  Tensor a = param({n, n}, 1), b = param({n, n}, 2), c = empty({n, n});
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data<float>(), n, b.data<float>(), n, 0.f,
                c.data<float>(), n);
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
void BM_matmul(benchmark::State& state) {
  Tensor a = param({1024, 1024}, 1), b = param({1024, 1024}, 2);
  run(state, {}, false, [&] { return matmul(a, b); });
}
template <bool Bwd>
void BM_matmul_batched(benchmark::State& state) {
  Tensor a = param({48, 128, 64}, 1), b = param({48, 64, 128}, 2);
  run(state, {&a, &b}, Bwd, [&] { return matmul(a, b); });
}
template <bool Bwd>
void BM_linear(benchmark::State& state) {  // GPT-2 124M MLP up-projection, 1024 tokens
  Tensor x = param({1024, 768}, 1), w = param({3072, 768}, 2, 0.02), b = param({3072}, 3);
  run(state, {&x, &w, &b}, Bwd, [&] { return linear(x, w, b); });
}

// ---- attention (GPT-2 124M shapes: 12 heads of 64, causal) ----
template <bool Bwd>
void BM_attention(benchmark::State& state) {
  Tensor q = param({4, 12, 256, 64}, 1), k = param({4, 12, 256, 64}, 2), v = param({4, 12, 256, 64}, 3);
  AttentionOptions o;
  o.is_causal = true;
  run(state, {&q, &k, &v}, Bwd, [&] { return scaled_dot_product_attention(q, k, v, o); });
}

}  // namespace

BENCHMARK(BM_blas_sgemm)->Name("blas_sgemm/fwd/1024x1024x1024")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_matmul)->Name("matmul/fwd/1024x1024x1024")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_matmul_batched, false)->Name("bmm/fwd/48x128x64x128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_matmul_batched, true)->Name("bmm/fwdbwd/48x128x64x128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_linear, false)->Name("linear/fwd/1024x768->3072")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_linear, true)->Name("linear/fwdbwd/1024x768->3072")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_attention, false)->Name("attention/fwd/4x12x256x64-causal")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_attention, true)->Name("attention/fwdbwd/4x12x256x64-causal")->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
