// CPU op benchmarks. Each case has a twin of the same name in benchmarks/torch_cpu_bench.py;
// scripts/bench-cpu-vs-torch.sh runs both with the same thread count and prints the ratio.
// Names: <op>/<fwd|fwdbwd>/<shape>. Times are wall-clock (the ops are multi-threaded).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <cstdio>
#include <string>

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
// The direct OpenBLAS call matmul must match: OpenBLAS threading itself with as many threads
// as Trident uses (Trident keeps OpenBLAS on one thread and splits GEMMs itself, NOTE [Threads]).
void BM_blas_sgemm(benchmark::State& state) {
  const int n = 1024;
  Tensor a = param({n, n}, 1), b = param({n, n}, 2), c = empty({n, n});
  openblas_set_num_threads(get_num_threads());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data<float>(), n, b.data<float>(), n, 0.f,
                c.data<float>(), n);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  openblas_set_num_threads(1);
}
void BM_matmul(benchmark::State& state) {
  Tensor a = param({1024, 1024}, 1), b = param({1024, 1024}, 2);
  run(state, {}, false, [&] { return matmul(a, b); });
}
// bf16 products (autocast's on the CPU; on AMX where the CPU has it, NOTE [AMX bf16 GEMM]).
template <int M, int K, int N>
void BM_matmul_bf16(benchmark::State& state) {
  Tensor a = param({M, K}, 1).to(kBF16), b = param({K, N}, 2).to(kBF16);
  run(state, {}, false, [&] { return matmul(a, b); });
}
template <bool Bwd>
void BM_linear_bf16(benchmark::State& state) {
  Tensor x = param({1024, 768}, 1).to(kBF16), w = param({3072, 768}, 2, 0.02).to(kBF16), b = param({3072}, 3).to(kBF16);
  run(state, {&x, &w, &b}, Bwd, [&] { return linear(x, w, b); });
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
// bf16 (on the bf16 GEMM kernels where the CPU has them, NOTE [bf16 attention on the CPU]).
template <bool Bwd>
void BM_attention_bf16(benchmark::State& state) {
  Tensor q = param({4, 12, 256, 64}, 1).to(kBF16), k = param({4, 12, 256, 64}, 2).to(kBF16), v = param({4, 12, 256, 64}, 3).to(kBF16);
  AttentionOptions o;
  o.is_causal = true;
  run(state, {&q, &k, &v}, Bwd, [&] { return scaled_dot_product_attention(q, k, v, o); });
}

// ---- convolution (ImageNet-like shapes) ----
// Each shape: input [N, C, H, W], weight [O, C / groups, kH, kW], stride, padding, groups, bias.
struct ConvSpec {
  int64_t N, C, H, W, O, kH, kW, stride, ph, pw, groups;
  bool bias;
};
constexpr ConvSpec kConvSpecs[] = {
    {8, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, true},       // 0: a ResNet stage-1 layer (Winograd)
    {8, 256, 14, 14, 256, 3, 3, 1, 1, 1, 1, true},     // 1: a ResNet stage-3 layer (Winograd)
    {1, 128, 28, 28, 128, 3, 3, 1, 1, 1, 1, true},     // 2: batch 1 (Winograd)
    {32, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1, true},      // 3: batch 32 (Winograd)
    {8, 64, 56, 56, 128, 3, 3, 2, 1, 1, 1, true},      // 4: strided 3x3 (im2col + GEMM)
    {8, 128, 28, 28, 128, 1, 7, 1, 0, 3, 1, false},    // 5: AmoebaNet's 1x7
    {8, 128, 28, 28, 128, 7, 1, 1, 3, 0, 1, false},    // 6: and 7x1
    {8, 128, 28, 28, 128, 5, 5, 1, 2, 2, 128, false},  // 7: an AmoebaNet/MobileNet separable conv, depthwise half
    {32, 64, 56, 56, 64, 3, 3, 1, 1, 1, 64, false},    // 8: depthwise 3x3, batch 32
    {8, 128, 56, 56, 128, 3, 3, 2, 1, 1, 128, false},  // 9: depthwise 3x3, stride 2
    {8, 128, 56, 56, 128, 5, 5, 2, 2, 2, 128, false},  // 10: depthwise 5x5, stride 2
    {1, 256, 14, 14, 256, 7, 7, 1, 3, 3, 256, false},  // 11: depthwise 7x7, batch 1
    {32, 128, 30, 30, 64, 1, 1, 1, 0, 0, 1, false},    // 12: a small AmoebaNet's 1x1
    {8, 256, 28, 28, 256, 1, 1, 1, 0, 0, 1, false},    // 13: a wider 1x1
    {32, 64, 15, 15, 64, 3, 3, 1, 1, 1, 64, false},    // 14: a small AmoebaNet-B's separable 3x3, depthwise half
    {32, 8, 30, 30, 8, 1, 7, 1, 0, 3, 1, false},       // 15: AmoebaNet-D(6, 32)'s 1x7, 8 channels
    {32, 32, 30, 30, 32, 1, 1, 1, 0, 0, 1, false},     // 16: and its 32-channel 1x1
    {32, 128, 30, 30, 32, 1, 1, 2, 0, 0, 1, false},    // 17: a small AmoebaNet's factorized reduction, path 1
    {8, 256, 56, 56, 512, 1, 1, 2, 0, 0, 1, false},    // 18: ResNet-50's downsampling shortcut
    {32, 32, 30, 30, 32, 3, 3, 1, 1, 1, 32, false},    // 19: AmoebaNet-B(6, 32)'s separable 3x3, depthwise half
    {8, 512, 7, 7, 512, 3, 3, 1, 1, 1, 1, true},       // 20: a ResNet stage-4 layer (4.7 MB of weights in bf16)
    {32, 128, 8, 8, 128, 3, 3, 1, 1, 1, 128, false},  // 21: AmoebaNet-B(6, 32)'s separable 3x3 on its 8 x 8 maps
};
template <int Spec, bool Bwd>
void BM_conv(benchmark::State& state) {
  const ConvSpec& s = kConvSpecs[Spec];
  const double fan_in = static_cast<double>(s.C / s.groups * s.kH * s.kW);
  Tensor x = param({s.N, s.C, s.H, s.W}, 1), w = param({s.O, s.C / s.groups, s.kH, s.kW}, 2, 1.0 / std::sqrt(fan_in));
  Tensor b = s.bias ? param({s.O}, 3) : Tensor();
  std::vector<Tensor*> leaves{&x, &w};
  if (s.bias) leaves.push_back(&b);
  run(state, leaves, Bwd, [&] { return conv2d(x, w, b, {s.stride, s.stride}, {s.ph, s.pw}, {1, 1}, s.groups); });
}

// The same in bf16 (autocast's convolutions on the CPU; NOTE [bf16 convolutions]).
template <int Spec, bool Bwd>
void BM_conv_bf16(benchmark::State& state) {
  const ConvSpec& s = kConvSpecs[Spec];
  const double fan_in = static_cast<double>(s.C / s.groups * s.kH * s.kW);
  Tensor x = param({s.N, s.C, s.H, s.W}, 1).to(kBF16), w = param({s.O, s.C / s.groups, s.kH, s.kW}, 2, 1.0 / std::sqrt(fan_in)).to(kBF16);
  Tensor b = s.bias ? param({s.O}, 3).to(kBF16) : Tensor();
  std::vector<Tensor*> leaves{&x, &w};
  if (s.bias) leaves.push_back(&b);
  run(state, leaves, Bwd, [&] { return conv2d(x, w, b, {s.stride, s.stride}, {s.ph, s.pw}, {1, 1}, s.groups); });
}

// ---- pooling ----
// AmoebaNet's max pools: 3x3 stride 1 padding 1 (normal cells) and 3x3 stride 2 padding 1
// (reduction cells) on a batch of 32 feature maps of 64 channels at 30 x 30.
template <int Stride, bool Bwd>
void BM_max_pool(benchmark::State& state) {
  Tensor x = param({32, 64, 30, 30}, 1);
  run(state, {&x}, Bwd, [&] { return max_pool2d(x, {3, 3}, Int2{Stride, Stride}, {1, 1}); });
}

// AmoebaNet's average pools (3x3 stride 1, padding 1, the padding not counted), and the
// element-wise layers around its convolutions: relu and training-mode batch norm, on a batch of
// 32 feature maps of 128 channels at 30 x 30 (AmoebaNet-D(6, 32)'s widest).
template <bool Bwd>
void BM_avg_pool(benchmark::State& state) {
  Tensor x = param({32, 64, 30, 30}, 1);
  run(state, {&x}, Bwd, [&] { return avg_pool2d(x, {3, 3}, Int2{1, 1}, {1, 1}, false, false); });
}
template <bool Bwd>
void BM_relu(benchmark::State& state) {
  Tensor x = param({32, 128, 30, 30}, 1);
  run(state, {&x}, Bwd, [&] { return relu(x); });
}
template <bool Bwd>
void BM_batch_norm(benchmark::State& state) {
  Tensor x = param({32, 128, 30, 30}, 1), w = param({128}, 2), b = param({128}, 3);
  Tensor mean = zeros({128}), var = ones({128});
  run(state, {&x, &w, &b}, Bwd, [&] { return batch_norm(x, mean, var, w, b, true); });
}

// ---- normalization, softmax, loss ----
template <bool Bwd>
void BM_layer_norm(benchmark::State& state) {
  Tensor x = param({4096, 768}, 1), w = param({768}, 2), b = param({768}, 3);
  run(state, {&x, &w, &b}, Bwd, [&] { return layer_norm(x, {768}, w, b); });
}
template <bool Bwd>
void BM_softmax(benchmark::State& state) {
  Tensor x = param({4096, 1024}, 1, 3.0);
  run(state, {&x}, Bwd, [&] { return softmax(x, -1); });
}
// GPT-2 tiny's output layer and loss in bf16 (1024 tokens, width 256, vocabulary 50304): one op
// whose logits exist one tile at a time (NOTE [Linear cross-entropy]); the twin is PyTorch's
// composition, F.cross_entropy(F.linear(x, w), t).
template <bool Bwd>
void BM_linear_cross_entropy_bf16(benchmark::State& state) {
  Tensor x = param({1024, 256}, 1).to(kBF16), w = param({50304, 256}, 2, 0.02).to(kBF16);
  Generator g(4);
  const Tensor target = randint(0, 50304, {1024}, DType::I64, &g);
  run(state, {&x, &w}, Bwd, [&] { return linear_cross_entropy(x, w, Tensor(), target); });
}
template <bool Bwd>
void BM_cross_entropy(benchmark::State& state) {  // GPT-2's padded vocabulary
  Tensor logits = param({256, 50304}, 1, 2.0);
  Generator g(4);
  Tensor target = randint(0, 50257, {256}, kI64, &g);
  run(state, {&logits}, Bwd, [&] { return cross_entropy(logits, target); });
}

}  // namespace

BENCHMARK(BM_blas_sgemm)->Name("blas_sgemm/fwd/1024x1024x1024")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_matmul)->Name("matmul/fwd/1024x1024x1024")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_matmul_batched, false)->Name("bmm/fwd/48x128x64x128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_matmul_batched, true)->Name("bmm/fwdbwd/48x128x64x128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_linear, false)->Name("linear/fwd/1024x768->3072")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_linear, true)->Name("linear/fwdbwd/1024x768->3072")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_matmul_bf16, 1024, 1024, 1024)->Name("matmul_bf16/fwd/1024x1024x1024")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_matmul_bf16, 1024, 256, 50304)->Name("matmul_bf16/fwd/1024x256x50304")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_linear_bf16, false)->Name("linear_bf16/fwd/1024x768->3072")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_linear_bf16, true)->Name("linear_bf16/fwdbwd/1024x768->3072")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_attention, false)->Name("attention/fwd/4x12x256x64-causal")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_attention, true)->Name("attention/fwdbwd/4x12x256x64-causal")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_attention_bf16, false)->Name("attention_bf16/fwd/4x12x256x64-causal")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_attention_bf16, true)->Name("attention_bf16/fwdbwd/4x12x256x64-causal")->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_TEMPLATE(BM_conv, 0, false)->Name("conv2d3x3/fwd/8x64x56x56->64")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 0, true)->Name("conv2d3x3/fwdbwd/8x64x56x56->64")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 1, false)->Name("conv2d3x3/fwd/8x256x14x14->256")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 1, true)->Name("conv2d3x3/fwdbwd/8x256x14x14->256")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 2, false)->Name("conv2d3x3/fwd/1x128x28x28->128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 3, false)->Name("conv2d3x3/fwd/32x64x28x28->64")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 4, false)->Name("conv2d3x3s2/fwd/8x64x56x56->128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 4, true)->Name("conv2d3x3s2/fwdbwd/8x64x56x56->128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 5, false)->Name("conv2d1x7/fwd/8x128x28x28->128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 5, true)->Name("conv2d1x7/fwdbwd/8x128x28x28->128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 6, false)->Name("conv2d7x1/fwd/8x128x28x28->128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 7, false)->Name("depthwise5x5/fwd/8x128x28x28")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 7, true)->Name("depthwise5x5/fwdbwd/8x128x28x28")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 8, false)->Name("depthwise3x3/fwd/32x64x56x56")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 8, true)->Name("depthwise3x3/fwdbwd/32x64x56x56")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 9, false)->Name("depthwise3x3s2/fwd/8x128x56x56")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 10, false)->Name("depthwise5x5s2/fwd/8x128x56x56")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 11, false)->Name("depthwise7x7/fwd/1x256x14x14")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 11, true)->Name("depthwise7x7/fwdbwd/1x256x14x14")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 12, true)->Name("conv2d1x1/fwdbwd/32x128x30x30->64")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 13, true)->Name("conv2d1x1/fwdbwd/8x256x28x28->256")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 0, true)->Name("conv2d3x3_bf16/fwdbwd/8x64x56x56->64")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 1, false)->Name("conv2d3x3_bf16/fwd/8x256x14x14->256")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 1, true)->Name("conv2d3x3_bf16/fwdbwd/8x256x14x14->256")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 20, false)->Name("conv2d3x3_bf16/fwd/8x512x7x7->512")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 20, true)->Name("conv2d3x3_bf16/fwdbwd/8x512x7x7->512")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 4, true)->Name("conv2d3x3s2_bf16/fwdbwd/8x64x56x56->128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 5, true)->Name("conv2d1x7_bf16/fwdbwd/8x128x28x28->128")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 7, true)->Name("depthwise5x5_bf16/fwdbwd/8x128x28x28")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 8, true)->Name("depthwise3x3_bf16/fwdbwd/32x64x56x56")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 14, true)->Name("depthwise3x3/fwdbwd/32x64x15x15")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 14, true)->Name("depthwise3x3_bf16/fwdbwd/32x64x15x15")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 12, true)->Name("conv2d1x1_bf16/fwdbwd/32x128x30x30->64")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 13, true)->Name("conv2d1x1_bf16/fwdbwd/8x256x28x28->256")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 15, true)->Name("conv2d1x7/fwdbwd/32x8x30x30->8")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 15, true)->Name("conv2d1x7_bf16/fwdbwd/32x8x30x30->8")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 16, true)->Name("conv2d1x1/fwdbwd/32x32x30x30->32")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 16, true)->Name("conv2d1x1_bf16/fwdbwd/32x32x30x30->32")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 19, true)->Name("depthwise3x3/fwdbwd/32x32x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 19, true)->Name("depthwise3x3_bf16/fwdbwd/32x32x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 21, true)->Name("depthwise3x3/fwdbwd/32x128x8x8")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 21, true)->Name("depthwise3x3_bf16/fwdbwd/32x128x8x8")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 17, true)->Name("conv2d1x1s2/fwdbwd/32x128x30x30->32")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 17, true)->Name("conv2d1x1s2_bf16/fwdbwd/32x128x30x30->32")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv, 18, true)->Name("conv2d1x1s2/fwdbwd/8x256x56x56->512")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_conv_bf16, 18, true)->Name("conv2d1x1s2_bf16/fwdbwd/8x256x56x56->512")->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_TEMPLATE(BM_layer_norm, false)->Name("layer_norm/fwd/4096x768")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_layer_norm, true)->Name("layer_norm/fwdbwd/4096x768")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_max_pool, 1, false)->Name("max_pool3x3/fwd/32x64x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_max_pool, 1, true)->Name("max_pool3x3/fwdbwd/32x64x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_max_pool, 2, false)->Name("max_pool3x3s2/fwd/32x64x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_max_pool, 2, true)->Name("max_pool3x3s2/fwdbwd/32x64x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_avg_pool, false)->Name("avg_pool3x3/fwd/32x64x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_avg_pool, true)->Name("avg_pool3x3/fwdbwd/32x64x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_relu, false)->Name("relu/fwd/32x128x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_relu, true)->Name("relu/fwdbwd/32x128x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_batch_norm, false)->Name("batch_norm/fwd/32x128x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_batch_norm, true)->Name("batch_norm/fwdbwd/32x128x30x30")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_softmax, false)->Name("softmax/fwd/4096x1024")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_softmax, true)->Name("softmax/fwdbwd/4096x1024")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_linear_cross_entropy_bf16, false)->Name("linear_cross_entropy_bf16/fwd/1024x256->50304")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_linear_cross_entropy_bf16, true)->Name("linear_cross_entropy_bf16/fwdbwd/1024x256->50304")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_cross_entropy, false)->Name("cross_entropy/fwd/256x50304")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_cross_entropy, true)->Name("cross_entropy/fwdbwd/256x50304")->UseRealTime()->Unit(benchmark::kMillisecond);

// `--blas-core` prints the kernel set OpenBLAS runs here (NOTE [OpenBLAS core]) and exits: the
// comparison scripts give the PyTorch side the same one through OPENBLAS_CORETYPE.
int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--blas-core") {
    std::printf("%s\n", trident::blas_core());
    return 0;
  }
  benchmark::AddCustomContext("blas_core", trident::blas_core());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
