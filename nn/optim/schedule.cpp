#include "nn/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace trident::nn::optim {

namespace {

void check_step(int64_t step) { TRIDENT_CHECK(step >= 0, "LR schedule: step must be >= 0, got ", step); }

void check_warmup(const char* name, int64_t warmup, int64_t total) {
  TRIDENT_CHECK(warmup >= 0, name, ": warmup_steps must be >= 0, got ", warmup);
  TRIDENT_CHECK(total > warmup, name, ": total_steps (", total, ") must exceed warmup_steps (", warmup, ")");
}

void check_fraction(const char* name, double f) {
  TRIDENT_CHECK(f >= 0.0 && f <= 1.0, name, ": final_fraction must be in [0, 1], got ", f);
}

// (s + 1) / warmup during the warm-up (llm.c's), 1 after.
double warmup_factor(int64_t step, int64_t warmup) {
  return step < warmup ? static_cast<double>(step + 1) / static_cast<double>(warmup) : 1.0;
}

// Progress through the decay, in [0, 1].
double decay_progress(int64_t step, int64_t warmup, int64_t total) {
  const double x = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return std::clamp(x, 0.0, 1.0);
}

}  // namespace

ConstantLR::ConstantLR(int64_t warmup_steps) : warmup_(warmup_steps) {
  TRIDENT_CHECK(warmup_steps >= 0, "ConstantLR: warmup_steps must be >= 0, got ", warmup_steps);
}

double ConstantLR::multiplier(int64_t step) const {
  check_step(step);
  return warmup_factor(step, warmup_);
}

WarmupCosineLR::WarmupCosineLR(int64_t warmup_steps, int64_t total_steps, double final_fraction)
    : warmup_(warmup_steps), total_(total_steps), final_(final_fraction) {
  check_warmup("WarmupCosineLR", warmup_steps, total_steps);
  check_fraction("WarmupCosineLR", final_fraction);
}

double WarmupCosineLR::multiplier(int64_t step) const {
  check_step(step);
  if (step < warmup_) return warmup_factor(step, warmup_);
  const double x = decay_progress(step, warmup_, total_);
  return final_ + (1.0 - final_) * 0.5 * (1.0 + std::cos(std::numbers::pi * x));
}

PolynomialLR::PolynomialLR(int64_t warmup_steps, int64_t total_steps, double power, double final_fraction)
    : warmup_(warmup_steps), total_(total_steps), power_(power), final_(final_fraction) {
  check_warmup("PolynomialLR", warmup_steps, total_steps);
  check_fraction("PolynomialLR", final_fraction);
  TRIDENT_CHECK(power >= 0.0, "PolynomialLR: power must be >= 0, got ", power);
}

double PolynomialLR::multiplier(int64_t step) const {
  check_step(step);
  if (step < warmup_) return warmup_factor(step, warmup_);
  const double x = decay_progress(step, warmup_, total_);
  return final_ + (1.0 - final_) * std::pow(1.0 - x, power_);
}

StepLR::StepLR(int64_t step_size, double gamma) : step_size_(step_size), gamma_(gamma) {
  TRIDENT_CHECK(step_size >= 1, "StepLR: step_size must be >= 1, got ", step_size);
  TRIDENT_CHECK(gamma >= 0.0, "StepLR: gamma must be >= 0, got ", gamma);
}

double StepLR::multiplier(int64_t step) const {
  check_step(step);
  return std::pow(gamma_, static_cast<double>(step / step_size_));
}

ExponentialLR::ExponentialLR(double gamma) : gamma_(gamma) {
  TRIDENT_CHECK(gamma >= 0.0, "ExponentialLR: gamma must be >= 0, got ", gamma);
}

double ExponentialLR::multiplier(int64_t step) const {
  check_step(step);
  return std::pow(gamma_, static_cast<double>(step));
}

LambdaLR::LambdaLR(std::function<double(int64_t)> f) : f_(std::move(f)) {
  TRIDENT_CHECK(static_cast<bool>(f_), "LambdaLR: empty function");
}

double LambdaLR::multiplier(int64_t step) const {
  check_step(step);
  return f_(step);
}

double apply_schedule(const LRSchedule& schedule, Optimizer& optimizer, int64_t step) {
  const double m = schedule.multiplier(step);
  TRIDENT_CHECK(m >= 0.0, "apply_schedule: the schedule's multiplier at step ", step, " is ", m, "; it must be >= 0");
  for (size_t g = 0; g < optimizer.num_groups(); ++g) optimizer.set_lr(g, optimizer.initial_lr(g) * m);
  return optimizer.lr(0);
}

LRScheduler::LRScheduler(Optimizer& optimizer, std::shared_ptr<const LRSchedule> schedule, int64_t step)
    : optimizer_(optimizer), schedule_(std::move(schedule)) {
  TRIDENT_CHECK(schedule_ != nullptr, "LRScheduler: no schedule");
  set_step(step);
}

void LRScheduler::step() { set_step(step_ + 1); }

void LRScheduler::set_step(int64_t step) {
  apply_schedule(*schedule_, optimizer_, step);
  step_ = step;
}

}  // namespace trident::nn::optim
