// Finite-difference gradient checking, for Trident's own tests and for users' ops.
//
// gradcheck compares the Jacobian that backward computes with central differences
// (f(x + eps) - f(x - eps)) / (2 eps), element by element, for every input that requires
// grad. Inputs should be f64 (f32 differences are too noisy at eps = 1e-6). An element
// passes when |analytic - numeric| <= atol + rtol * |numeric| (torch.allclose's rule).
//
// NOTE [Non-differentiable points]: at a kink (relu at 0, abs at 0, max at a tie, clamp at a
// bound) the central difference straddles two slopes and averages them, so it disagrees with any
// backward. Three ways to say so, from the most precise to the most automatic:
// - `skip`, a predicate over input elements: gradcheck neither perturbs nor compares an element
//   for which it returns true. It sees the element's input, position and value and all the
//   inputs, so it can express "x within 1e-3 of 0" (skip_near) or a tie between two inputs.
//   skip_where(masks) builds one from bool tensors shaped like the inputs.
// - `allow_kinks`: an entry that disagrees is accepted when the function is measurably not
//   differentiable there -- its one-sided differences (f(x+eps)-f(x))/eps and
//   (f(x)-f(x-eps))/eps differ by more than the tolerance -- and the analytic value lies between
//   them (a one-sided derivative or a subgradient, which is what a backward at a kink returns).
//   A wrong backward on a smooth stretch is still caught: there the two slopes agree with the
//   central difference. It costs nothing extra (f(x) is evaluated once).
// - Otherwise choose inputs away from the kinks (STYLE.md, from ggml).
// The result counts what was skipped and what was accepted at kinks, so a test can assert that
// the exceptions are the ones it expects.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/node.h"

namespace trident::autograd {

// An input element gradcheck is about to perturb (what a skip predicate sees).
struct GradcheckPoint {
  size_t input;              // which input
  int64_t index;             // row-major flat index in that input
  Shape position;            // the same, one index per dimension
  double value;              // the element's value
  const TensorList& inputs;  // every input, for conditions over several (ties between inputs)
};
using GradcheckSkipFn = std::function<bool(const GradcheckPoint&)>;

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  // NOTE [Non-differentiable points].
  GradcheckSkipFn skip;
  bool allow_kinks = false;
  // Optional names of the inputs, one per input (e.g. {"gate", "up"}), used in the report.
  std::vector<std::string> input_names;
};

// Skip elements whose value is within `radius` of any of `points` (e.g. skip_near({0}, 1e-3)
// for relu or abs). radius must be at least eps for the finite difference not to straddle.
GradcheckSkipFn skip_near(std::vector<double> points, double radius);
// Skip the elements where masks[i] is true; masks[i] is a bool tensor of inputs[i]'s shape, or
// undefined (skip nothing in that input).
GradcheckSkipFn skip_where(TensorList masks);

struct GradcheckResult {
  bool ok = true;
  // Human-readable (empty when ok): how many Jacobian entries differ and the worst one -- which
  // output and input element (index per dimension, the input's name when given, the element's
  // value), the analytic and numeric derivatives and their absolute and relative difference:
  //   gradcheck failed: 4 of 32 Jacobian entries differ; worst: d output 0[1, 0] / d input
  //   0[1, 0] (gate, value 2): analytic -2.64, numeric -3.27, |diff| 0.63 (relative 0.19) > ...
  std::string report;
  // The worst element (input index, flat index in that input, output index, flat index in
  // that output) and its values; -1 when nothing was compared. input_value is the input
  // element's (unperturbed) value.
  int64_t input = -1, input_index = -1, output = -1, output_index = -1;
  double analytic = 0, numeric = 0, abs_error = 0, rel_error = 0, input_value = 0;
  int64_t mismatches = 0;
  int64_t compared = 0;
  // Jacobian entries not compared because `skip` chose their input element, and entries that
  // disagreed but were accepted as kinks (allow_kinks); NOTE [Non-differentiable points].
  int64_t skipped = 0;
  int64_t kinks = 0;
  explicit operator bool() const { return ok; }
};

using GradcheckFn = std::function<TensorList(const TensorList& inputs)>;

GradcheckResult gradcheck(const GradcheckFn& fn, const TensorList& inputs, const GradcheckOptions& opts = {});
// For functions with one output.
GradcheckResult gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                          const GradcheckOptions& opts = {});

// Second derivatives (PyTorch's gradgradcheck): with random f64 gradients v for the outputs
// (requiring grad), checks the function (inputs, v) -> grad(fn(inputs), inputs, v,
// create_graph) with gradcheck, so the derivatives of the first-order gradients with respect to
// the inputs and to v, computed by a create_graph backward (NOTE [Higher-order gradients] in
// autograd/engine.h), are compared with central differences of the first-order gradients. v is
// drawn from a generator seeded with `seed`. Fails too, saying which, when a first-order gradient
// does not carry a graph (it is linear in v, so it always should).
GradcheckResult gradgradcheck(const GradcheckFn& fn, const TensorList& inputs, const GradcheckOptions& opts = {},
                              uint64_t seed = 0);
GradcheckResult gradgradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                              const GradcheckOptions& opts = {}, uint64_t seed = 0);

}  // namespace trident::autograd

namespace trident {
using autograd::gradcheck;
using autograd::gradgradcheck;
using autograd::GradcheckOptions;
using autograd::GradcheckResult;
using autograd::GradcheckPoint;
}  // namespace trident
