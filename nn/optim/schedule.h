// Learning-rate schedules. A schedule maps a step to a multiplier of each parameter group's
// initial learning rate (Optimizer::initial_lr): lr(step) = initial_lr * multiplier(step).
// Steps count optimizer updates from 0: multiplier(s) is the factor for update number s, so the
// first update uses multiplier(0). A schedule holds no state besides its constants: resuming at
// step s gives exactly the learning rate an uninterrupted run had there.
//
// Warm-up, where a schedule has it, is llm.c's: multiplier(s) = (s + 1) / warmup_steps for
// s < warmup_steps, so the first update already moves (by 1/warmup of the peak) and update
// warmup_steps - 1 runs at the peak. The decay that follows runs over progress
//   x = (s - warmup_steps) / (total_steps - warmup_steps), clamped to [0, 1]
// so every step from total_steps on stays at the final value.
//
//   ConstantLR                      1 (after the warm-up, if any)
//   WarmupCosineLR                  f + (1 - f) (1 + cos(pi x)) / 2, f = final_fraction: llm.c's
//                                   GPT-2 schedule (cosine from the peak to a floor)
//   LinearLR                        f + (1 - f)(1 - x): linear decay to f (BERT's, with f = 0)
//   PolynomialLR                    f + (1 - f)(1 - x)^power (the LAMB paper's decay; power 1 is
//                                   LinearLR; with f = 0, no warm-up, PyTorch's PolynomialLR)
//   StepLR                          gamma^floor(s / step_size) (PyTorch's StepLR)
//   ExponentialLR                   gamma^s (PyTorch's ExponentialLR)
//   LambdaLR                        any function of the step (PyTorch's LambdaLR)
// Errors (at construction): negative warm-up, total_steps <= warmup_steps, a final fraction
// outside [0, 1], a negative power or gamma, step_size < 1; multiplier() of a negative step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "nn/optim/optimizer.h"

namespace trident::nn::optim {

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  virtual double multiplier(int64_t step) const = 0;
  double lr(int64_t step, double base_lr) const { return base_lr * multiplier(step); }
};

class ConstantLR final : public LRSchedule {
 public:
  explicit ConstantLR(int64_t warmup_steps = 0);
  double multiplier(int64_t step) const override;

 private:
  int64_t warmup_;
};

class WarmupCosineLR final : public LRSchedule {
 public:
  WarmupCosineLR(int64_t warmup_steps, int64_t total_steps, double final_fraction = 0.0);
  double multiplier(int64_t step) const override;

 private:
  int64_t warmup_, total_;
  double final_;
};

class PolynomialLR : public LRSchedule {
 public:
  PolynomialLR(int64_t warmup_steps, int64_t total_steps, double power = 1.0, double final_fraction = 0.0);
  double multiplier(int64_t step) const override;

 private:
  int64_t warmup_, total_;
  double power_, final_;
};

class LinearLR final : public PolynomialLR {
 public:
  LinearLR(int64_t warmup_steps, int64_t total_steps, double final_fraction = 0.0)
      : PolynomialLR(warmup_steps, total_steps, 1.0, final_fraction) {}
};

class StepLR final : public LRSchedule {
 public:
  StepLR(int64_t step_size, double gamma = 0.1);
  double multiplier(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

class ExponentialLR final : public LRSchedule {
 public:
  explicit ExponentialLR(double gamma);
  double multiplier(int64_t step) const override;

 private:
  double gamma_;
};

class LambdaLR final : public LRSchedule {
 public:
  explicit LambdaLR(std::function<double(int64_t)> f);
  double multiplier(int64_t step) const override;

 private:
  std::function<double(int64_t)> f_;
};

// Sets every group's lr to initial_lr(g) * schedule.multiplier(step); returns group 0's lr.
double apply_schedule(const LRSchedule& schedule, Optimizer& optimizer, int64_t step);

// A schedule bound to an optimizer, keeping the step (its only state): the constructor applies
// `step`'s learning rate, step() advances by one and applies the next. A training loop calls
// optimizer.step() then scheduler.step(); to resume, save current_step() and pass it back to
// the constructor (or set_step) after loading the optimizer's state.
class LRScheduler {
 public:
  LRScheduler(Optimizer& optimizer, std::shared_ptr<const LRSchedule> schedule, int64_t step = 0);
  void step();
  void set_step(int64_t step);
  int64_t current_step() const { return step_; }
  double lr(size_t group = 0) const { return optimizer_.lr(group); }

 private:
  Optimizer& optimizer_;
  std::shared_ptr<const LRSchedule> schedule_;
  int64_t step_ = 0;
};

}  // namespace trident::nn::optim
