// Finite-difference gradient checking, for Trident's own tests and for users' ops.
//
// gradcheck compares the Jacobian that backward computes with central differences
// (f(x + eps) - f(x - eps)) / (2 eps), element by element, for every input that requires
// grad. Inputs should be f64 (f32 differences are too noisy at eps = 1e-6). An element
// passes when |analytic - numeric| <= atol + rtol * |numeric| (torch.allclose's rule).
#pragma once

#include <functional>
#include <string>

#include "autograd/node.h"

namespace trident::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  // Human-readable: where the worst element is and how far off (empty when ok).
  std::string report;
  // The worst element (input index, flat index in that input, output index, flat index in
  // that output) and its values; -1 when nothing was compared.
  int64_t input = -1, input_index = -1, output = -1, output_index = -1;
  double analytic = 0, numeric = 0, abs_error = 0, rel_error = 0;
  int64_t mismatches = 0;
  int64_t compared = 0;
  explicit operator bool() const { return ok; }
};

using GradcheckFn = std::function<TensorList(const TensorList& inputs)>;

GradcheckResult gradcheck(const GradcheckFn& fn, const TensorList& inputs, const GradcheckOptions& opts = {});
// For functions with one output.
GradcheckResult gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                          const GradcheckOptions& opts = {});

}  // namespace trident::autograd

namespace trident {
using autograd::gradcheck;
using autograd::GradcheckOptions;
using autograd::GradcheckResult;
}  // namespace trident
