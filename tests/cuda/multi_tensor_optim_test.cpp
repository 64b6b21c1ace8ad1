// The multi-tensor CUDA paths (NOTE [Multi-tensor launches], NOTE [Optimizer kernels]): every
// optimizer and variant over ~200 parameters of assorted sizes (more tensors than one launch
// holds, tensors of several chunks, an empty one) against the CPU optimizer on the same values;
// a batch with more chunks than one launch's block table (a tensor split across launches); the
// number of launches a step costs, from the documented limits; GradScaler's unscale with an inf
// in one late gradient; clip_grad_norm_ and clip_grad_norm_on_device_ against the CPU. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "cuda/cuda_test_util.h"
#include "nn/optim/multi_tensor.h"
#include "test_util.h"

using namespace trident;
using trident::testing::relative_error;

namespace {

const Device kGPU = Device::cuda(0);

// 200 parameters: mostly single elements (so the tensor limit of a launch binds), every fifth
// 1000 elements, every seventh 3, two of 65537 (two chunks, the second with one element), a
// 300 x 1000 matrix early and a 300000-element vector late (five chunks each), and one empty.
std::vector<Shape> assorted_shapes() {
  std::vector<Shape> s;
  for (int i = 0; i < 200; ++i) {
    if (i == 10) {
      s.push_back({300, 1000});
    } else if (i == 50 || i == 120) {
      s.push_back({65537});
    } else if (i == 190) {
      s.push_back({300000});
    } else if (i == 77) {
      s.push_back({0, 4});
    } else if (i % 5 == 0) {
      s.push_back({10, 100});
    } else if (i % 7 == 0) {
      s.push_back({3});
    } else {
      s.push_back({1});
    }
  }
  return s;
}

using MakeOpt = std::function<std::unique_ptr<nn::optim::Optimizer>(std::vector<Tensor>)>;

struct Twin {
  std::vector<Tensor> cpu, gpu;
};

Twin make_params(const std::vector<Shape>& shapes, DType dt, Generator& g) {
  Twin t;
  for (const Shape& s : shapes) {
    const Tensor init = randn(s, dt, &g);
    t.cpu.push_back(init.clone().set_requires_grad(true));
    t.gpu.push_back(init.to(kGPU).set_requires_grad(true));
  }
  return t;
}

void set_grads(Twin& t, DType dt, Generator& g) {
  for (size_t i = 0; i < t.cpu.size(); ++i) {
    const Tensor grad = randn(t.cpu[i].sizes(), dt, &g);
    t.cpu[i].set_grad(grad);
    t.gpu[i].set_grad(grad.to(kGPU));
  }
}

// `steps` updates of both optimizers on the same gradients; the largest relative error over
// the parameters and every state buffer.
double cpu_vs_gpu(const MakeOpt& make, DType dt, int steps, std::unique_ptr<nn::optim::Optimizer>* out_cpu = nullptr,
                  std::unique_ptr<nn::optim::Optimizer>* out_gpu = nullptr,
                  const std::vector<Shape>& shapes = assorted_shapes()) {
  Generator g(11);
  Twin t = make_params(shapes, dt, g);
  auto oc = make(t.cpu), og = make(t.gpu);
  for (int s = 0; s < steps; ++s) {
    set_grads(t, dt, g);
    oc->step();
    og->step();
  }
  double worst = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    worst = std::max(worst, relative_error(t.gpu[i].to(kCPU).to(kF64), t.cpu[i].to(kF64)));
    const auto& sc = oc->state(static_cast<int64_t>(i)).slots;
    const auto& sg = og->state(static_cast<int64_t>(i)).slots;
    EXPECT_EQ(oc->state(static_cast<int64_t>(i)).step, og->state(static_cast<int64_t>(i)).step) << "parameter " << i;
    EXPECT_EQ(sc.size(), sg.size()) << "parameter " << i;
    for (size_t k = 0; k < std::min(sc.size(), sg.size()); ++k) {
      EXPECT_EQ(sc[k].defined(), sg[k].defined()) << "parameter " << i << " slot " << k;
      if (!sc[k].defined() || !sg[k].defined()) continue;
      EXPECT_EQ(sg[k].device(), kGPU);
      worst = std::max(worst, relative_error(sg[k].to(kCPU).to(kF64), sc[k].to(kF64)));
    }
  }
  if (out_cpu) *out_cpu = std::move(oc);
  if (out_gpu) *out_gpu = std::move(og);
  return worst;
}

class CudaMultiTensor : public trident::testing::PoisonedCuda<> {};

TEST_F(CudaMultiTensor, EveryOptimizerMatchesTheCpuOverManyParameters) {
  using namespace nn::optim;
  const std::vector<std::pair<std::string, MakeOpt>> cases = {
      {"sgd", [](std::vector<Tensor> p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1}); }},
      {"sgd_momentum_wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(p, SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2});
       }},
      {"sgd_nesterov",
       [](std::vector<Tensor> p) {
         return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
       }},
      {"adam", [](std::vector<Tensor> p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 1e-2, .weight_decay = 1e-3}); }},
      {"adam_amsgrad",
       [](std::vector<Tensor> p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 1e-2, .amsgrad = true}); }},
      {"adamw", [](std::vector<Tensor> p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 1e-2, .weight_decay = 0.1}); }},
      {"adamw_amsgrad",
       [](std::vector<Tensor> p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 1e-2, .amsgrad = true}); }},
      {"rmsprop", [](std::vector<Tensor> p) { return std::make_unique<RMSProp>(p, RMSPropOptions{.lr = 1e-2}); }},
      {"rmsprop_centered",
       [](std::vector<Tensor> p) { return std::make_unique<RMSProp>(p, RMSPropOptions{.lr = 1e-2, .centered = true}); }},
      {"rmsprop_momentum_wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<RMSProp>(p, RMSPropOptions{.lr = 1e-2, .weight_decay = 1e-3, .momentum = 0.9});
       }},
      {"rmsprop_centered_momentum",
       [](std::vector<Tensor> p) {
         return std::make_unique<RMSProp>(p, RMSPropOptions{.lr = 1e-2, .momentum = 0.5, .centered = true});
       }},
      {"lamb", [](std::vector<Tensor> p) { return std::make_unique<LAMB>(p, LAMBOptions{.lr = 1e-2}); }},
      {"lamb_no_adaptation",
       [](std::vector<Tensor> p) { return std::make_unique<LAMB>(p, LAMBOptions{.lr = 1e-2, .layer_adaptation = false}); }},
  };
  for (const auto& [name, make] : cases) {
    // Both sides run the same f32 functors (nn/optim/math.h) in the same order; they differ by
    // multiply-add contraction (nvcc contracts, the host compiler may not), a rounding or two
    // of 6e-8 per operation and step, and LAMB's f64 norms by summation order (1e-16).
    EXPECT_LE(cpu_vs_gpu(make, kF32, 4), 1e-6) << name << " f32";
    // f64: the same argument at 1e-16 per rounding.
    EXPECT_LE(cpu_vs_gpu(make, kF64, 3), 1e-12) << name << " f64";
  }
}

TEST_F(CudaMultiTensor, LambTrustRatiosMatchTheCpu) {
  using namespace nn::optim;
  std::unique_ptr<Optimizer> oc, og;
  const MakeOpt make = [](std::vector<Tensor> p) { return std::make_unique<LAMB>(p, LAMBOptions{.lr = 1e-2}); };
  EXPECT_LE(cpu_vs_gpu(make, kF32, 3, &oc, &og), 1e-6);
  auto& lc = dynamic_cast<LAMB&>(*oc);
  auto& lg = dynamic_cast<LAMB&>(*og);
  for (int64_t i = 0; i < lc.num_params(); ++i) {
    // Ratios of f64 norms of the same f32 values, summed in another order.
    const double c = lc.last_trust_ratio(i), gv = lg.last_trust_ratio(i);
    EXPECT_NEAR(gv, c, 1e-6 * std::fabs(c)) << "parameter " << i;
  }
  EXPECT_EQ(lg.last_trust_ratio(77), 1.0);  // the empty parameter
}

// More chunks than one launch's block table: 5 tensors of 69 chunks (345 blocks) split into a
// launch of kMultiTensorMaxBlocks and one of the rest, the fifth tensor across both.
TEST_F(CudaMultiTensor, ATensorSplitAcrossLaunchesIsUpdatedWhole) {
  using namespace nn::optim;
  static_assert(kMultiTensorChunk == 65536 && kMultiTensorMaxBlocks == 320, "the expected counts below assume these");
  Generator g(3);
  const std::vector<Shape> shapes(5, Shape{69 * 65536 - 100});
  Twin t = make_params(shapes, kF32, g);
  SGD oc(t.cpu, SGDOptions{.lr = 0.5}), og(t.gpu, SGDOptions{.lr = 0.5});
  set_grads(t, kF32, g);
  oc.step();
  const int64_t before = multi_tensor_launches();
  og.step();
  EXPECT_EQ(multi_tensor_launches() - before, 2);
  // p - lr * g: contracted or not, the results differ by at most half an ulp of lr * g (6e-8).
  for (size_t i = 0; i < shapes.size(); ++i) EXPECT_LE(relative_error(t.gpu[i].to(kCPU).to(kF64), t.cpu[i].to(kF64)), 1e-7) << i;
}

// The per-chunk partial sums (LAMB's norms, clip_grad_norm_'s squares) of tensors split across
// launches: 1 + 301 + 40 chunks, so the first launch (kMultiTensorMaxBlocks blocks) ends inside
// the third tensor, whose chunk_base and partials must continue in the second launch, for LAMB's
// moments (4 lists) and apply (3 lists) passes and for the gradient norm (1 list).
TEST_F(CudaMultiTensor, LambAndClipOverTensorsSplitAcrossLaunchesMatchTheCpu) {
  using namespace nn::optim;
  static_assert(kMultiTensorChunk == 65536 && kMultiTensorMaxBlocks == 320, "the split below assumes these");
  const std::vector<Shape> shapes = {{1000}, {300 * 65536 + 5}, {40 * 65536}};
  std::unique_ptr<Optimizer> oc, og;
  const MakeOpt make = [](std::vector<Tensor> p) {
    return std::make_unique<LAMB>(p, LAMBOptions{.lr = 1e-2, .weight_decay = 1e-2});
  };
  // Sums of 2e7 squares in f64 in two orders: 1e-16 relative each; the rest as in the test above.
  EXPECT_LE(cpu_vs_gpu(make, kF32, 2, &oc, &og, shapes), 1e-6);
  auto& lc = dynamic_cast<LAMB&>(*oc);
  auto& lg = dynamic_cast<LAMB&>(*og);
  for (int64_t i = 0; i < lc.num_params(); ++i) {
    const double c = lc.last_trust_ratio(i), gv = lg.last_trust_ratio(i);
    EXPECT_NEAR(gv, c, 1e-6 * std::fabs(c)) << "parameter " << i;
  }
  Generator g(5);
  Twin t = make_params(shapes, kF32, g);
  set_grads(t, kF32, g);
  const double nc = nn::clip_grad_norm_(t.cpu, 1.0);
  const int64_t before = multi_tensor_launches();
  const double ng = nn::clip_grad_norm_(t.gpu, 1.0);
  // The norm's pass and the scaling pass, two launches each.
  EXPECT_EQ(multi_tensor_launches() - before, 4);
  EXPECT_NEAR(ng, nc, 1e-7 * nc);
  for (size_t i = 0; i < shapes.size(); ++i)
    EXPECT_LE(relative_error(t.gpu[i].grad().to(kCPU).to(kF64), t.cpu[i].grad().to(kF64)), 1e-6) << i;
}

// LAMB's trust ratio is 1 when either norm is 0 (math::lamb_trust_ratio): a zero parameter of
// two chunks (||p|| = 0), and at step 1 without weight decay a zero gradient (m = v = 0, so
// r = 0 and ||r|| = 0); the device's per-chunk norms must give exactly 1 there, as the CPU.
TEST_F(CudaMultiTensor, LambZeroNormsGiveTrustRatioOne) {
  using namespace nn::optim;
  Generator g(21);
  std::vector<Tensor> init = {zeros({70000}, kF32), randn({70000}, kF32, &g), randn({333}, kF32, &g)};
  std::vector<Tensor> grads = {randn({70000}, kF32, &g), zeros({70000}, kF32), randn({333}, kF32, &g)};
  std::vector<Tensor> pc, pg;
  for (size_t i = 0; i < init.size(); ++i) {
    pc.push_back(init[i].clone().set_requires_grad(true));
    pg.push_back(init[i].to(kGPU).set_requires_grad(true));
    pc.back().set_grad(grads[i].clone());
    pg.back().set_grad(grads[i].to(kGPU));
  }
  const LAMBOptions o{.lr = 1e-2, .weight_decay = 0.0};
  LAMB oc(pc, o), og(pg, o);
  oc.step();
  og.step();
  EXPECT_EQ(oc.last_trust_ratio(0), 1.0);
  EXPECT_EQ(og.last_trust_ratio(0), 1.0) << "zero parameter";
  EXPECT_EQ(oc.last_trust_ratio(1), 1.0);
  EXPECT_EQ(og.last_trust_ratio(1), 1.0) << "zero update";
  EXPECT_NE(og.last_trust_ratio(2), 1.0);
  EXPECT_NEAR(og.last_trust_ratio(2), oc.last_trust_ratio(2), 1e-6 * oc.last_trust_ratio(2));
  for (size_t i = 0; i < init.size(); ++i)
    EXPECT_LE(relative_error(pg[i].to(kCPU).to(kF64), pc[i].to(kF64)), 1e-6) << "parameter " << i;
}

// Parameters of one group at different step counts (a parameter without a gradient in a step
// keeps its count; batches are keyed by it, NOTE [Optimizer kernels]) and SGD momentum buffers
// created in different steps (the first-step flag): the device follows the CPU parameter by
// parameter.
TEST_F(CudaMultiTensor, ParametersAtDifferentStepCountsMatchTheCpu) {
  using namespace nn::optim;
  const std::vector<std::pair<std::string, MakeOpt>> cases = {
      {"adam", [](std::vector<Tensor> p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 1e-2}); }},
      {"adamw_amsgrad",
       [](std::vector<Tensor> p) {
         return std::make_unique<AdamW>(p, AdamWOptions{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
       }},
      {"sgd_momentum",
       [](std::vector<Tensor> p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1, .momentum = 0.9}); }},
      {"lamb", [](std::vector<Tensor> p) { return std::make_unique<LAMB>(p, LAMBOptions{.lr = 1e-2}); }},
  };
  const std::vector<Shape> shapes = {{7}, {100}, {3, 5}, {65537}, {1}, {40}};
  for (const auto& [name, make] : cases) {
    Generator g(31);
    Twin t = make_params(shapes, kF32, g);
    auto oc = make(t.cpu), og = make(t.gpu);
    for (int s = 0; s < 4; ++s) {
      set_grads(t, kF32, g);
      for (size_t i = 0; i < shapes.size(); ++i) {
        // Step 0: only the even parameters; step 2: all but parameter 1; else all.
        if ((s == 0 && i % 2 == 1) || (s == 2 && i == 1)) {
          t.cpu[i].zero_grad(true);
          t.gpu[i].zero_grad(true);
        }
      }
      oc->step();
      og->step();
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      const int64_t k = static_cast<int64_t>(i);
      EXPECT_EQ(og->state(k).step, oc->state(k).step) << name << " parameter " << i;
      EXPECT_LE(relative_error(t.gpu[i].to(kCPU).to(kF64), t.cpu[i].to(kF64)), 1e-6) << name << " parameter " << i;
      const auto& sc = oc->state(k).slots;
      const auto& sg = og->state(k).slots;
      ASSERT_EQ(sc.size(), sg.size()) << name << " parameter " << i;
      for (size_t j = 0; j < sc.size(); ++j) {
        EXPECT_EQ(sc[j].defined(), sg[j].defined()) << name << " parameter " << i << " slot " << j;
        if (sc[j].defined() && sg[j].defined()) {
          EXPECT_LE(relative_error(sg[j].to(kCPU).to(kF64), sc[j].to(kF64)), 1e-6) << name << " parameter " << i << " slot " << j;
        }
      }
    }
    EXPECT_EQ(oc->state(0).step, 4);
    EXPECT_EQ(oc->state(1).step, 2);
  }
}

TEST_F(CudaMultiTensor, AStepCostsOneLaunchPerFilledStruct) {
  using namespace nn::optim;
  // 200 one-element parameters: every launch is bounded by the tensor count.
  const auto count = [](const MakeOpt& make) {
    std::vector<Tensor> ps;
    for (int i = 0; i < 200; ++i) ps.push_back(full({1}, 1.0, TensorOptions(kF32).device(kGPU)).set_requires_grad(true));
    auto opt = make(ps);
    for (Tensor& p : ps) p.set_grad(full({1}, 0.5, TensorOptions(kF32).device(kGPU)));
    const int64_t before = multi_tensor_launches();
    opt->step();
    return multi_tensor_launches() - before;
  };
  // Lists p, g: 64 tensors a launch, 200 = 64 + 64 + 64 + 8.
  EXPECT_EQ(count([](std::vector<Tensor> p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1}); }), 4);
  // p, g, m, v: 40 a launch, 5 launches.
  EXPECT_EQ(count([](std::vector<Tensor> p) { return std::make_unique<AdamW>(p, AdamWOptions{}); }), 5);
  // amsgrad adds vmax: 36 a launch, 6 launches.
  EXPECT_EQ(count([](std::vector<Tensor> p) { return std::make_unique<AdamW>(p, AdamWOptions{.amsgrad = true}); }), 6);
  // LAMB: the moments pass (p, g, m, v: 5 launches) and the apply pass (p, m, v: 48 a launch, 5).
  EXPECT_EQ(count([](std::vector<Tensor> p) { return std::make_unique<LAMB>(p, LAMBOptions{}); }), 10);
}

TEST_F(CudaMultiTensor, UnscaleFindsAnInfInALateGradientAndTheStepIsSkipped) {
  Generator g(7);
  const std::vector<Shape> shapes = assorted_shapes();
  Twin t = make_params(shapes, kF32, g);
  nn::optim::AdamW opt(t.gpu, {.lr = 1e-2});
  nn::GradScaler scaler;
  const double scale = scaler.get_scale();
  // Clean step: the gradients come back divided by the scale (a power of two: exact).
  set_grads(t, kF32, g);
  std::vector<Tensor> expected;
  for (const Tensor& p : t.cpu) expected.push_back(div(p.grad(), scale));
  EXPECT_TRUE(scaler.unscale_(opt));
  for (size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(relative_error(t.gpu[i].grad().to(kCPU), expected[i]), 0.0) << i;
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), scale);

  // One inf in element 123456 of parameter 190 (of 200): no parameter moves, the scale halves.
  set_grads(t, kF32, g);
  Tensor bad = t.cpu[190].grad().clone();
  static_cast<float*>(bad.data_ptr())[123456] = std::numeric_limits<float>::infinity();
  t.gpu[190].set_grad(bad.to(kGPU));
  std::vector<Tensor> before;
  for (const Tensor& p : t.gpu) before.push_back(p.to(kCPU));
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_TRUE(scaler.last_step_skipped());
  for (size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(relative_error(t.gpu[i].to(kCPU), before[i]), 0.0) << i;
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), scale / 2);
}

TEST_F(CudaMultiTensor, ClipGradNormMatchesTheCpu) {
  Generator g(9);
  const std::vector<Shape> shapes = assorted_shapes();
  for (const double max_norm : {1.0, 1e6}) {  // clipping, and a coefficient above 1 (untouched)
    Twin t = make_params(shapes, kF32, g);
    set_grads(t, kF32, g);
    const double nc = nn::clip_grad_norm_(t.cpu, max_norm);
    const double ng = nn::clip_grad_norm_(t.gpu, max_norm);
    // Each gradient's f64 norm rounded to f32, squares summed in f64 in another order: the
    // rounding to f32 of a norm can differ by one unit (6e-8).
    EXPECT_NEAR(ng, nc, 1e-7 * nc) << max_norm;
    for (size_t i = 0; i < shapes.size(); ++i)
      EXPECT_LE(relative_error(t.gpu[i].grad().to(kCPU).to(kF64), t.cpu[i].grad().to(kF64)), 1e-6) << i;
  }
  // The sync-free form, on f32 and f64 gradients mixed: its norm stays on the device.
  std::vector<Tensor> pc, pg;
  for (int i = 0; i < 20; ++i) {
    const DType dt = i % 2 ? kF64 : kF32;
    const Tensor init = randn({i == 13 ? 70000 : 50 + i}, dt, &g);
    pc.push_back(init.clone().set_requires_grad(true));
    pg.push_back(init.to(kGPU).set_requires_grad(true));
    const Tensor grad = randn(init.sizes(), dt, &g);
    pc.back().set_grad(grad);
    pg.back().set_grad(grad.to(kGPU));
  }
  const double nc = nn::clip_grad_norm_(pc, 0.5);
  const Tensor ng = nn::clip_grad_norm_on_device_(pg, 0.5);
  EXPECT_EQ(ng.device(), kGPU);
  EXPECT_EQ(ng.numel(), 1);
  EXPECT_NEAR(ng.item<double>(), nc, 1e-7 * nc);
  for (size_t i = 0; i < pc.size(); ++i)
    EXPECT_LE(relative_error(pg[i].grad().to(kCPU).to(kF64), pc[i].grad().to(kF64)), 1e-6) << i;
}

}  // namespace
