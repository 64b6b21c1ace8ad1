// The example's test: SwiGLU's known values, its gradcheck, a deliberately wrong backward that
// gradcheck must catch, a small model trained with it and with its composition from built-in ops
// (same seed: the same losses), clear errors on bad input, and -- when a GPU is present in a
// CUDA build -- the CUDA kernels against the CPU ones. Exit status 0 when everything passes.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "swiglu.h"

using namespace trident;
using autograd::TensorList;
using custom_op::swiglu;
using custom_op::swiglu_reference;

namespace {

int g_failures = 0;
#define EXPECT(cond, ...)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      ++g_failures;                                                         \
      std::printf("FAILED %s:%d: %s ", __FILE__, __LINE__, #cond);          \
      std::printf(__VA_ARGS__);                                             \
      std::printf("\n");                                                    \
    }                                                                       \
  } while (0)

bool close(double x, double y, double tol) { return std::fabs(x - y) <= tol * (1.0 + std::fabs(y)); }

void known_values() {
  // By hand: sigmoid(1) = 0.7310585786300049, sigmoid(-2) = 0.11920292202211755.
  Tensor a = from_vector<double>({0.0, 1.0, -2.0}), b = from_vector<double>({1.0, 2.0, 3.0});
  const std::vector<double> y = swiglu(a, b).to_vector<double>();
  const double want[3] = {0.0, 2 * 0.7310585786300049, 3 * -2 * 0.11920292202211755};
  for (int i = 0; i < 3; ++i) EXPECT(close(y[i], want[i], 1e-15), "element %d: %.17g vs %.17g", i, y[i], want[i]);
  // f32, large magnitudes (sigmoid must not overflow), against the composition.
  Generator gen(1);
  Tensor x = mul(randn({1000}, kF32, &gen), 30.0), z = randn({1000}, kF32, &gen);
  const std::vector<float> f = swiglu(x, z).to_vector<float>(), r = swiglu_reference(x, z).to_vector<float>();
  for (size_t i = 0; i < f.size(); ++i)
    EXPECT(std::isfinite(f[i]) && close(f[i], r[i], 1e-5), "f32 element %zu: %g vs %g", i, f[i], r[i]);
  std::printf("known values: ok\n");
}

void gradcheck_passes() {
  Generator gen(2);
  Tensor a = randn({4, 5}, kF64, &gen).set_requires_grad();
  Tensor up_t = randn({5, 4}, kF64, &gen);
  Tensor b = transpose(up_t, 0, 1).set_requires_grad();  // a non-contiguous input: strided reads
  GradcheckResult r = gradcheck([](const TensorList& in) { return swiglu(in[0], in[1]); }, {a, b});
  EXPECT(r.ok, "%s", r.report.c_str());
  EXPECT(r.compared == 2 * 20 * 20, "compared %lld entries", static_cast<long long>(r.compared));
  std::printf("gradcheck: ok (%lld Jacobian entries)\n", static_cast<long long>(r.compared));
}

void gradcheck_catches_a_wrong_backward() {
  // SwiGLU with a deliberately wrong backward, in the lambda form of a user-defined function:
  // d/d gate forgets the gate * (1 - s) term.
  const autograd::LambdaFunction broken(
      "BrokenSwiGLU",
      [](FunctionCtx& ctx, const TensorList& in) {
        ctx.save_for_backward(in);
        return TensorList{swiglu_reference(in[0], in[1])};
      },
      [](FunctionCtx& ctx, const TensorList& grads) {
        const TensorList saved = ctx.saved_tensors();
        const Tensor s = sigmoid(saved[0]);
        return TensorList{mul(mul(grads[0], saved[1]), s), mul(grads[0], mul(saved[0], s))};
      });
  // The dropped term, up * s * gate * (1 - s), is largest at gate = 2, up = -3: element [1, 0].
  Tensor a = from_vector<double>({0.5, -1.0, 2.0, 0.1}, {2, 2}).set_requires_grad();
  Tensor b = from_vector<double>({1.0, 2.0, -3.0, 0.5}, {2, 2}).set_requires_grad();
  GradcheckOptions opts;
  opts.input_names = {"gate", "up"};
  GradcheckResult r = gradcheck(broken, {a, b}, opts);
  EXPECT(!r.ok, "gradcheck accepted a wrong backward");
  EXPECT(r.input == 0 && r.input_index == 2 && r.output_index == 2, "worst element: input %lld [%lld], output [%lld]",
         static_cast<long long>(r.input), static_cast<long long>(r.input_index), static_cast<long long>(r.output_index));
  EXPECT(r.report.find("d output 0[1, 0] / d input 0[1, 0] (gate, value 2)") != std::string::npos, "report: %s",
         r.report.c_str());
  std::printf("wrong backward caught: %s\n", r.report.c_str());
}

// A LLaMA-style MLP block: down(swiglu(gate(x), up(x))).
struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> gate, up, down;
  bool fused;
  Mlp(bool fused_op, uint64_t seed) : nn::Module("Mlp"), fused(fused_op) {
    Generator g(seed);
    gate = register_module("gate", std::make_shared<nn::Linear>(8, 32, false, DType::F32, &g));
    up = register_module("up", std::make_shared<nn::Linear>(8, 32, false, DType::F32, &g));
    down = register_module("down", std::make_shared<nn::Linear>(32, 2, true, DType::F32, &g));
  }
  Tensor forward(const Tensor& x) {
    const Tensor a = gate->forward(x), b = up->forward(x);
    return down->forward(fused ? swiglu(a, b) : swiglu_reference(a, b));
  }
};

void trains_like_the_composition() {
  Generator data(3);
  const Tensor x = randn({64, 8}, kF32, &data);
  const Tensor target = tanh(matmul(x, randn({8, 2}, kF32, &data)));
  std::vector<double> losses[2];
  for (int fused = 0; fused < 2; ++fused) {
    Mlp model(fused == 1, 7);
    nn::optim::AdamW opt(model.parameters(), {.lr = 1e-2});
    for (int step = 0; step < 50; ++step) {
      Tensor loss = mse_loss(model.forward(x), target);
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses[fused].push_back(loss.item<double>());
    }
  }
  // f32: the fused kernel and the composition round differently by a few ulps per element.
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT(std::fabs(losses[1][i] - losses[0][i]) <= 1e-5 * losses[0][i], "step %zu: fused %.9g, composed %.9g", i,
           losses[1][i], losses[0][i]);
  EXPECT(losses[1].back() < 0.3 * losses[1].front(), "loss %g -> %g: did not train", losses[1].front(), losses[1].back());
  std::printf("training: fused and composed losses agree (%.6f -> %.6f over %zu steps)\n", losses[1].front(),
              losses[1].back(), losses[1].size());
}

void bad_input_is_a_clear_error() {
  std::string msg;
  try {
    swiglu(zeros({2, 3}), zeros({3, 2}));
  } catch (const Error& e) {
    msg = e.message();
  }
  EXPECT(msg.find("in forward of SwiGLU: gate has shape [2, 3] but up has shape [3, 2]") != std::string::npos,
         "message: %s", msg.c_str());
  std::printf("bad input: \"%s\"\n", msg.c_str());
}

void cuda_matches_cpu() {
#if SWIGLU_WITH_CUDA
  if (!cuda_is_available()) {
    std::printf("cuda: skipped (built with CUDA, but no GPU here)\n");
    return;
  }
  // UNTESTED until a GPU run (and until Trident's CUDA tensor backend exists).
  Generator gen(4);
  Tensor a = randn({257, 33}, kF32, &gen), b = randn({257, 33}, kF32, &gen);
  Tensor cpu_out = swiglu(a, b);
  Tensor gpu_out = swiglu(a.to(Device::cuda()), b.to(Device::cuda())).to(Device::cpu());
  const std::vector<float> x = cpu_out.to_vector<float>(), y = gpu_out.to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT(close(y[i], x[i], 1e-6), "element %zu: %g vs %g", i, y[i], x[i]);
  std::printf("cuda: matches the CPU\n");
#else
  std::printf("cuda: skipped (Trident was built without CUDA)\n");
#endif
}

}  // namespace

int main() {
  known_values();
  gradcheck_passes();
  gradcheck_catches_a_wrong_backward();
  trains_like_the_composition();
  bad_input_is_a_clear_error();
  cuda_matches_cpu();
  if (g_failures) {
    std::printf("%d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}
