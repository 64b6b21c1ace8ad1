// Initializers, in place on a tensor (usually a parameter), deterministic for a generator seed.
// Fan-in and fan-out follow PyTorch: for a weight [out, in, k...], fan_in = in * prod(k) and
// fan_out = out * prod(k).
#pragma once

#include <string>
#include <utility>

#include "core/rng.h"
#include "core/tensor.h"

namespace trident::nn::init {

enum class FanMode { FanIn, FanOut };

// (fan_in, fan_out) of a weight of at least 2 dims; throws for fewer.
std::pair<int64_t, int64_t> fans(const Tensor& w);
// The recommended gain of a nonlinearity ("linear", "conv2d", "sigmoid", "tanh", "relu",
// "leaky_relu" with its negative slope, "selu"), as torch.nn.init.calculate_gain.
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

// NOTE [Skipped draws]: while a SkipDrawsGuard lives on this thread, normal_ and uniform_ (and
// the xavier, kaiming and GPT-2 initializers made of them) advance their generator exactly as their draw would (the same
// Philox blocks, core/factory.h skip_random) and leave the tensor unwritten. A stage-only build
// (NOTE [Stage-only build] in models/layer_list.h) builds the layers it releases at once under
// it: every generator ends where the whole build leaves it, without computing the other stages'
// values. Only for tensors that are released or overwritten before anything reads them.
class SkipDrawsGuard {
 public:
  explicit SkipDrawsGuard(bool enabled = true);
  ~SkipDrawsGuard();
  SkipDrawsGuard(const SkipDrawsGuard&) = delete;
  SkipDrawsGuard& operator=(const SkipDrawsGuard&) = delete;
  static bool active();

 private:
  bool prev_;
};

void zeros_(const Tensor& t);
void ones_(const Tensor& t);
void constant_(const Tensor& t, double value);
void normal_(const Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
void uniform_(const Tensor& t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
// Glorot: std = gain * sqrt(2 / (fan_in + fan_out)); uniform bound = sqrt(3) * std.
void xavier_uniform_(const Tensor& w, double gain = 1.0, Generator* gen = nullptr);
void xavier_normal_(const Tensor& w, double gain = 1.0, Generator* gen = nullptr);
// He: std = gain(nonlinearity, a) / sqrt(fan); uniform bound = sqrt(3) * std.
void kaiming_uniform_(const Tensor& w, double a = 0.0, FanMode mode = FanMode::FanIn,
                      const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
void kaiming_normal_(const Tensor& w, double a = 0.0, FanMode mode = FanMode::FanIn,
                     const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
// GPT-2's init of the projections that write into the residual stream: N(0, 0.02 / sqrt(2 L))
// for a model of L blocks (two such projections per block), so the residual's variance does
// not grow with depth (Radford et al. 2019, section 2.3).
void gpt2_residual_normal_(const Tensor& w, int64_t n_layer, Generator* gen = nullptr);

}  // namespace trident::nn::init
