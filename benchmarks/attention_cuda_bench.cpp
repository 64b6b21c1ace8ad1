// Fused attention on one GPU: scaled_dot_product_attention forward, and forward + backward, for
// B = 8, H = 16, T = 1024, D = 64 and 128, bf16, causal, timed with CUDA events on the current
// stream. FLOPs as FlashAttention counts them: 4 B H T^2 D for the forward (the two GEMMs),
// halved for causal; backward 2.5x the forward. Each shape runs on the tensor-core kernels (NOTE
// [Tensor-core attention]) and on the f32 FMA kernels (set_attention_tensor_cores(false)).
// A plain program (no Google Benchmark):
//   attention_cuda_bench [--iters N] [--batch B] [--heads H] [--seq T]
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/cuda/stream.h"
#include "ops/cuda/attention.h"
#include "trident.h"

using namespace trident;

namespace {

struct Timing {
  double fwd_ms, fwdbwd_ms;
};

Timing run(int64_t B, int64_t H, int64_t T, int64_t D, int iters) {
  const Device gpu = Device::cuda(0);
  Generator g(1);
  const auto input = [&] { return randn({B, H, T, D}, kF32, &g).to(kBF16).to(gpu); };
  const Tensor q = input(), k = input(), v = input(), dout = input();
  AttentionOptions o;
  o.is_causal = true;
  const cuda::Stream s = cuda::current_stream(0);
  cuda::Event start(true), stop(true);

  const auto forward = [&] {
    autograd::NoGradGuard no_grad;
    return scaled_dot_product_attention(q, k, v, o);
  };
  Tensor ql = q.detach().set_requires_grad(), kl = k.detach().set_requires_grad(), vl = v.detach().set_requires_grad();
  const auto forward_backward = [&] {
    const Tensor out = scaled_dot_product_attention(ql, kl, vl, o);
    autograd::backward({out}, {dout});
    ql.zero_grad();
    kl.zero_grad();
    vl.zero_grad();
  };

  Timing t{};
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < 3; ++i) pass == 0 ? (void)forward() : forward_backward();  // warm-up
    start.record(s);
    for (int i = 0; i < iters; ++i) pass == 0 ? (void)forward() : forward_backward();
    stop.record(s);
    stop.synchronize();
    (pass == 0 ? t.fwd_ms : t.fwdbwd_ms) = start.elapsed_ms(stop) / iters;
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t B = 8, H = 16, T = 1024;
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int64_t v = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--iters")) iters = static_cast<int>(v);
    else if (!std::strcmp(argv[i], "--batch")) B = v;
    else if (!std::strcmp(argv[i], "--heads")) H = v;
    else if (!std::strcmp(argv[i], "--seq")) T = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  std::printf("scaled_dot_product_attention, bf16, causal, B=%lld H=%lld T=%lld, %d iterations\n",
              static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(T), iters);
  std::printf("%-13s %5s %12s %12s %14s %16s\n", "kernel", "D", "fwd ms", "fwd TFLOP/s", "fwd+bwd ms", "fwd+bwd TFLOP/s");
  try {
    for (bool tensor_cores : {true, false}) {
      cuda::set_attention_tensor_cores(tensor_cores);
      for (int64_t D : {64, 128}) {
        const Timing t = run(B, H, T, D, iters);
        const double fwd_flops = 4.0 * B * H * T * T * D / 2.0;  // causal: half the scores
        const double all_flops = fwd_flops * 3.5;                // backward = 2.5 x forward
        std::printf("%-13s %5lld %12.3f %12.2f %14.3f %16.2f\n", tensor_cores ? "tensor cores" : "f32 FMA",
                    static_cast<long long>(D), t.fwd_ms, fwd_flops / (t.fwd_ms * 1e-3) / 1e12, t.fwdbwd_ms,
                    all_flops / (t.fwdbwd_ms * 1e-3) / 1e12);
        std::fflush(stdout);  // rows already measured survive a timeout's kill (stdout is a file)
      }
    }
  } catch (const std::exception& e) {  // an Error, not std::terminate's abort (and its core file)
    std::fprintf(stderr, "attention_cuda_bench: %s\n", e.what());
    return 1;
  }
  cuda::set_attention_tensor_cores(true);
  return 0;
}
