#include "nn/init.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"

namespace trident::nn::init {

namespace {
// Writes src's values into t without recording (parameters require grad).
void assign(const Tensor& t, const Tensor& src) {
  NoGradGuard no_grad;
  copy_(t, src);
}
void check_float(const Tensor& t, const char* what) {
  TRIDENT_CHECK(t.defined() && is_floating(t.dtype()), what, ": needs a defined floating-point tensor");
}
}  // namespace

namespace {
thread_local bool t_skip_draws = false;
}  // namespace

SkipDrawsGuard::SkipDrawsGuard(bool enabled) : prev_(t_skip_draws) { t_skip_draws = prev_ || enabled; }
SkipDrawsGuard::~SkipDrawsGuard() { t_skip_draws = prev_; }
bool SkipDrawsGuard::active() { return t_skip_draws; }

std::pair<int64_t, int64_t> fans(const Tensor& w) {
  TRIDENT_CHECK(w.dim() >= 2, "fan in and fan out need a tensor of at least 2 dims, got shape ", w.sizes());
  int64_t receptive = 1;
  for (int64_t d = 2; d < w.dim(); ++d) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "conv1d" || nl == "conv2d" || nl == "conv3d" || nl == "sigmoid") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  TRIDENT_FAIL("calculate_gain: unknown nonlinearity '", nl, "' (linear, conv2d, sigmoid, tanh, relu, leaky_relu, selu)");
}

void zeros_(const Tensor& t) { constant_(t, 0.0); }
void ones_(const Tensor& t) { constant_(t, 1.0); }
void constant_(const Tensor& t, double value) {
  TRIDENT_CHECK(t.defined(), "constant_: undefined tensor");
  NoGradGuard no_grad;
  fill_(t, value);
}

void normal_(const Tensor& t, double mean, double std, Generator* gen) {
  check_float(t, "normal_");
  TRIDENT_CHECK(std >= 0, "normal_: std must be >= 0, got ", std);
  // Drawn in f32 for f32/f16/bf16 tensors and in f64 for f64 (NOTE [Philox streams]): the same
  // seed gives the same f32 weights whatever the storage precision.
  const DType draw = t.dtype() == DType::F64 ? DType::F64 : DType::F32;
  if (SkipDrawsGuard::active()) return skip_random(t.numel(), draw, gen);
  NoGradGuard no_grad;
  // Drawn and scaled in place where t can hold the draw (a contiguous f32 or f64 CPU tensor: a
  // model's largest table is built without a copy of itself beside it); else into one temporary.
  const bool direct = t.device().is_cpu() && t.is_contiguous() && t.dtype() == draw;
  Tensor r = direct ? t : empty(t.sizes(), draw);
  randn_(r, gen);
  TRIDENT_DISPATCH_F32_F64(draw, "normal_", [&] {
    scalar_t* p = r.data<scalar_t>();
    for (int64_t i = 0; i < r.numel(); ++i) p[i] = static_cast<scalar_t>(mean + std * static_cast<double>(p[i]));
  });
  if (!direct) assign(t, r);
}

void uniform_(const Tensor& t, double low, double high, Generator* gen) {
  check_float(t, "uniform_");
  TRIDENT_CHECK(low <= high, "uniform_: low ", low, " must not exceed high ", high);
  const DType draw = t.dtype() == DType::F64 ? DType::F64 : DType::F32;
  if (SkipDrawsGuard::active()) return skip_random(t.numel(), draw, gen);
  NoGradGuard no_grad;
  const bool direct = t.device().is_cpu() && t.is_contiguous() && t.dtype() == draw;  // as normal_
  Tensor r = direct ? t : empty(t.sizes(), draw);
  rand_(r, gen);
  TRIDENT_DISPATCH_F32_F64(draw, "uniform_", [&] {
    scalar_t* p = r.data<scalar_t>();
    for (int64_t i = 0; i < r.numel(); ++i) p[i] = static_cast<scalar_t>(low + (high - low) * static_cast<double>(p[i]));
  });
  if (!direct) assign(t, r);
}

void xavier_uniform_(const Tensor& w, double gain, Generator* gen) {
  const auto [fi, fo] = fans(w);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fi + fo));
  const double bound = std::sqrt(3.0) * std;
  uniform_(w, -bound, bound, gen);
}

void xavier_normal_(const Tensor& w, double gain, Generator* gen) {
  const auto [fi, fo] = fans(w);
  normal_(w, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fi + fo)), gen);
}

namespace {
double kaiming_std(const Tensor& w, double a, FanMode mode, const std::string& nl) {
  const auto [fi, fo] = fans(w);
  const int64_t fan = mode == FanMode::FanIn ? fi : fo;
  TRIDENT_CHECK(fan > 0, "kaiming init: the fan of a tensor of shape ", w.sizes(), " is 0");
  return calculate_gain(nl, a) / std::sqrt(static_cast<double>(fan));
}
}  // namespace

void kaiming_uniform_(const Tensor& w, double a, FanMode mode, const std::string& nl, Generator* gen) {
  const double bound = std::sqrt(3.0) * kaiming_std(w, a, mode, nl);
  uniform_(w, -bound, bound, gen);
}

void kaiming_normal_(const Tensor& w, double a, FanMode mode, const std::string& nl, Generator* gen) {
  normal_(w, 0.0, kaiming_std(w, a, mode, nl), gen);
}

void gpt2_residual_normal_(const Tensor& w, int64_t n_layer, Generator* gen) {
  TRIDENT_CHECK(n_layer > 0, "gpt2_residual_normal_: n_layer must be positive, got ", n_layer);
  normal_(w, 0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(n_layer)), gen);
}

}  // namespace trident::nn::init
