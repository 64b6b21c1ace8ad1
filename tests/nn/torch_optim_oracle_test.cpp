// NOTE [Optimizers against PyTorch]: SGD, RMSProp, Adam and AdamW, each with the options whose
// placement in the update is easy to get wrong (Nesterov, dampening, coupled vs decoupled weight
// decay, centred RMSProp with momentum, AMSGrad, eps, parameter groups), and the schedules that
// share PyTorch's definitions (polynomial, step, exponential), against torch.optim (Debian's
// python3-torch, tests/nn/torch_optim_oracle.py). Six updates of three f64 parameters from random
// gradients; the parameters after every update must agree to 1e-12 (normwise relative). The
// unit tests in optim_test.cpp check three steps against the update equations as written here;
// this checks that those equations are PyTorch's. Gradient clipping too: clip_grad_norm_ for
// p = 2, inf and 3 (clipping and not) and clip_grad_value_ against torch.nn.utils. Skips
// without torch.

#include <functional>
#include <memory>

#include "nn/optim/adam.h"
#include "nn/optim/clip_grad.h"
#include "nn/optim/rmsprop.h"
#include "nn/optim/schedule.h"
#include "nn/optim/sgd.h"
#include "nn/safetensors.h"
#include "test_util.h"

using namespace trident;
using namespace trident::nn::optim;

namespace {

#ifndef TRIDENT_TORCH_OPTIM_ORACLE
#error "tests/CMakeLists.txt defines TRIDENT_TORCH_OPTIM_ORACLE (the path of torch_optim_oracle.py)"
#endif

constexpr int kSteps = 6;
constexpr double kInfNormForTest = nn::kInfNorm;

using Params = std::vector<Tensor>;

struct OptimCase {
  std::string name;  // the key of the same optimizer in torch_optim_oracle.py
  // The optimizer over the three parameters (groups as the case wants them).
  std::function<std::unique_ptr<Optimizer>(const Params&)> make;
  std::shared_ptr<LRSchedule> schedule;  // applied to every group before each update, or null
};

std::vector<OptimCase> cases() {
  std::vector<OptimCase> c;
  c.push_back({"sgd_nesterov_weight_decay", [](const Params& p) {
                 SGDOptions o;
                 o.lr = 0.1;
                 o.momentum = 0.9;
                 o.nesterov = true;
                 o.weight_decay = 0.05;
                 return std::make_unique<SGD>(p, o);
               }, nullptr});
  c.push_back({"sgd_dampening", [](const Params& p) {
                 SGDOptions o;
                 o.lr = 0.05;
                 o.momentum = 0.8;
                 o.dampening = 0.3;
                 return std::make_unique<SGD>(p, o);
               }, nullptr});
  c.push_back({"sgd_plain_step_lr", [](const Params& p) {
                 SGDOptions o;
                 o.lr = 0.2;
                 return std::make_unique<SGD>(p, o);
               }, std::make_shared<StepLR>(2, 0.5)});
  c.push_back({"rmsprop_centered_momentum_weight_decay", [](const Params& p) {
                 RMSPropOptions o;
                 o.lr = 0.01;
                 o.alpha = 0.9;
                 o.eps = 1e-3;
                 o.weight_decay = 0.05;
                 o.momentum = 0.5;
                 o.centered = true;
                 return std::make_unique<RMSProp>(p, o);
               }, nullptr});
  c.push_back({"rmsprop_plain", [](const Params& p) {
                 RMSPropOptions o;
                 o.lr = 0.01;
                 o.eps = 1e-3;
                 return std::make_unique<RMSProp>(p, o);
               }, nullptr});
  c.push_back({"adam_l2_amsgrad", [](const Params& p) {
                 AdamOptions o;
                 o.lr = 0.01;
                 o.beta1 = 0.8;
                 o.beta2 = 0.95;
                 o.eps = 1e-3;
                 o.weight_decay = 0.1;
                 o.amsgrad = true;
                 return std::make_unique<Adam>(p, o);
               }, nullptr});
  c.push_back({"adam_exponential_lr", [](const Params& p) {
                 AdamOptions o;
                 o.lr = 0.02;
                 o.eps = 1e-3;
                 return std::make_unique<Adam>(p, o);
               }, std::make_shared<ExponentialLR>(0.7)});
  c.push_back({"adamw_groups_polynomial_lr", [](const Params& p) {
                 AdamWOptions decay, none;
                 decay.lr = 0.02;
                 decay.beta2 = 0.99;
                 decay.eps = 1e-3;
                 decay.weight_decay = 0.1;
                 none = decay;
                 none.lr = 0.01;
                 none.weight_decay = 0.0;
                 return std::make_unique<AdamW>(std::vector<ParamGroup<AdamWOptions>>{{{p[0], p[2]}, decay}, {{p[1]}, none}});
               }, std::make_shared<PolynomialLR>(0, 8, 2.0)});
  return c;
}

}  // namespace

TEST(OptimizersAgainstPyTorch, SixUpdatesMatchTorchOptimInF64) {
  if (const std::string why = trident::testing::torch_missing(); !why.empty()) GTEST_SKIP() << why;
  Generator g(77);
  const Params initial = {randn({3, 4}, DType::F64, &g), randn({5}, DType::F64, &g), randn({2, 2, 2}, DType::F64, &g)};
  std::vector<Params> grads(kSteps);
  for (Params& gs : grads)
    for (const Tensor& p : initial) gs.push_back(mul(randn(p.sizes(), DType::F64, &g), 2.0));
  nn::StateDict file;
  for (size_t i = 0; i < initial.size(); ++i) {
    file["init." + std::to_string(i)] = initial[i];
    for (int s = 0; s < kSteps; ++s) file["grad." + std::to_string(s) + "." + std::to_string(i)] = grads[static_cast<size_t>(s)][i];
  }
  // Gradient clipping on update 0's gradients: the clipped gradients and the returned norm.
  struct Clip {
    const char* name;
    double max_norm, p;
  };
  for (const Clip& k : {Clip{"clip_norm2", 1.0, 2.0}, Clip{"clip_norm2_above_max", 100.0, 2.0}, Clip{"clip_norm_inf", 0.5, kInfNormForTest},
                        Clip{"clip_norm3", 2.0, 3.0}, Clip{"clip_value", 0.7, 0.0}}) {
    Params p;
    for (size_t i = 0; i < initial.size(); ++i) {
      p.push_back(initial[i].clone());
      p.back().set_requires_grad(true);
      sum(mul(p.back(), grads[0][i])).backward();
    }
    double total = 0;
    if (k.p == 0.0)
      nn::clip_grad_value_(p, k.max_norm);
    else
      total = nn::clip_grad_norm_(p, k.max_norm, k.p);
    file[std::string(k.name) + ".norm"] = from_vector<double>({total}, {1});
    for (size_t i = 0; i < p.size(); ++i) file[std::string(k.name) + ".clipped." + std::to_string(i)] = p[i].grad();
  }
  for (const OptimCase& k : cases()) {
    SCOPED_TRACE(k.name);
    Params p;
    for (const Tensor& t : initial) {
      p.push_back(t.clone());
      p.back().set_requires_grad(true);
    }
    const std::unique_ptr<Optimizer> opt = k.make(p);
    for (int s = 0; s < kSteps; ++s) {
      if (k.schedule)
        for (size_t gi = 0; gi < opt->num_groups(); ++gi) opt->set_lr(gi, k.schedule->lr(s, opt->initial_lr(gi)));
      opt->zero_grad();
      Tensor loss = zeros({}, TensorOptions(DType::F64));
      for (size_t i = 0; i < p.size(); ++i) loss = add(loss, sum(mul(p[i], grads[static_cast<size_t>(s)][i])));  // grad = g
      loss.backward();
      opt->step();
      for (size_t i = 0; i < p.size(); ++i)
        file[k.name + ".step." + std::to_string(s) + "." + std::to_string(i)] = p[i].detach().clone();
    }
  }
  trident::testing::expect_python_accepts(TRIDENT_TORCH_OPTIM_ORACLE, "", file, "torch_optim");
}
