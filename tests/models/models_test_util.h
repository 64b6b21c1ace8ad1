// Helpers shared by the model tests.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace trident::testing {

// Deterministic weights without a random generator, so that a PyTorch script can make the same
// ones (tests/models/hf_reference.py): element i (row-major) of the tensor numbered `salt` is
// base + amp * sin(0.61 i + 1.7 salt + 0.3), computed in double and rounded to f32.
inline Tensor formula_tensor(const Shape& shape, int64_t salt, double base, double amp) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>(base + amp * std::sin(0.61 * static_cast<double>(i) + 1.7 * static_cast<double>(salt) + 0.3));
  return from_vector<float>(v, shape);
}

}  // namespace trident::testing
