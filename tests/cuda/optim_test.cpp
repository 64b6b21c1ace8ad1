// The optimizers on CUDA parameters (NOTE [Optimizer kernels]): the same parameters and gradients
// on the CPU and on the GPU, several steps of every optimizer and variant, then the parameters
// and every state slot compared. The per-element functors are the CPU's, in f32 on both sides, so
// the results agree to f32 rounding (the compilers may contract multiply-adds differently); LAMB's
// norms sum in another order. Skips without a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "core/cuda/allocator.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

using namespace trident;
using trident::testing::relative_error;

namespace {

const Device kGPU = Device::cuda(0);

using MakeOpt = std::function<std::unique_ptr<nn::optim::Optimizer>(std::vector<Tensor>)>;

// Runs `steps` updates with the same gradient stream on both devices; returns the largest relative
// error over the parameters and the optimizer state.
double cpu_vs_gpu(const MakeOpt& make, DType dt, int steps) {
  Generator g(5);
  const std::vector<Shape> shapes = {{33, 65}, {7}, {20000}};
  std::vector<Tensor> pc, pg;
  for (const Shape& s : shapes) {
    const Tensor init = randn(s, dt, &g);
    pc.push_back(init.clone().set_requires_grad(true));
    pg.push_back(init.to(kGPU).set_requires_grad(true));
  }
  auto oc = make(pc), og = make(pg);
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Tensor grad = randn(shapes[i], dt, &g);
      pc[i].set_grad(grad);
      pg[i].set_grad(grad.to(kGPU));
    }
    oc->step();
    og->step();
  }
  double worst = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    worst = std::max(worst, relative_error(pg[i].to(kCPU).to(kF64), pc[i].to(kF64)));
    const auto& sc = oc->state(static_cast<int64_t>(i)).slots;
    const auto& sg = og->state(static_cast<int64_t>(i)).slots;
    EXPECT_EQ(sc.size(), sg.size());
    for (size_t k = 0; k < std::min(sc.size(), sg.size()); ++k) {
      EXPECT_EQ(sc[k].defined(), sg[k].defined()) << "slot " << k;
      if (!sc[k].defined() || !sg[k].defined()) continue;
      EXPECT_EQ(sg[k].device(), kGPU);
      worst = std::max(worst, relative_error(sg[k].to(kCPU).to(kF64), sc[k].to(kF64)));
    }
  }
  return worst;
}

class CudaOptim : public trident::testing::PoisonedCuda<> {};

TEST_F(CudaOptim, EveryOptimizerMatchesTheCpu) {
  using namespace nn::optim;
  const std::vector<std::pair<std::string, MakeOpt>> cases = {
      {"sgd", [](std::vector<Tensor> p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1}); }},
      {"sgd_nesterov_wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true});
       }},
      {"sgd_dampening",
       [](std::vector<Tensor> p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05, .momentum = 0.8, .dampening = 0.3}); }},
      {"adam", [](std::vector<Tensor> p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 1e-2, .weight_decay = 1e-3}); }},
      {"adamw_amsgrad",
       [](std::vector<Tensor> p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 1e-2, .amsgrad = true}); }},
      {"rmsprop", [](std::vector<Tensor> p) { return std::make_unique<RMSProp>(p, RMSPropOptions{.lr = 1e-2}); }},
      {"rmsprop_centered_momentum",
       [](std::vector<Tensor> p) {
         return std::make_unique<RMSProp>(p, RMSPropOptions{.lr = 1e-2, .weight_decay = 1e-3, .momentum = 0.9, .centered = true});
       }},
      {"lamb", [](std::vector<Tensor> p) { return std::make_unique<LAMB>(p, LAMBOptions{.lr = 1e-2}); }},
  };
  for (const auto& [name, make] : cases) {
    // f32: the same f32 functors, up to contraction and (LAMB) summation order; f64 likewise.
    EXPECT_LE(cpu_vs_gpu(make, kF32, 4), 1e-5) << name << " f32";
    EXPECT_LE(cpu_vs_gpu(make, kF64, 4), 1e-12) << name << " f64";
  }
}

TEST_F(CudaOptim, AStepUpdatesAGpuParameterInPlace) {
  Tensor p = ones({3}, TensorOptions(kF32).device(kGPU)).set_requires_grad(true);
  nn::optim::SGD opt({p}, {.lr = 0.1});
  p.set_grad(ones({3}).to(kGPU));
  opt.step();
  EXPECT_EQ(p.to(kCPU).to_vector<float>(), std::vector<float>(3, 0.9f));
}

}  // namespace
