#include "nn/linear.h"

#include <cmath>

#include "core/factory.h"
#include "nn/init.h"
#include "ops/linalg.h"

namespace trident::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias, DType dtype, Generator* gen)
    : UnaryModule("Linear"), in_features(in), out_features(out) {
  TRIDENT_CHECK(in >= 0 && out >= 0, "Linear: feature counts must be >= 0, got in=", in, ", out=", out);
  weight = register_parameter("weight", empty({out, in}, dtype));
  // kaiming_uniform(a = sqrt(5)) as PyTorch: bound = 1 / sqrt(in).
  const double bound = in > 0 ? 1.0 / std::sqrt(static_cast<double>(in)) : 0.0;
  init::uniform_(weight, -bound, bound, gen);
  if (with_bias) {
    bias = register_parameter("bias", empty({out}, dtype));
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

std::string Linear::extra_repr() const {
  return detail::str("in_features=", in_features, ", out_features=", out_features, ", bias=", bias.defined() ? "true" : "false");
}

}  // namespace trident::nn
