// Index helpers shared by the CPU convolution and pooling kernels, which sweep whole output
// rows per kernel tap so that the inner loops have no bounds checks and vectorize.
#pragma once

#include <algorithm>
#include <cstdint>

namespace trident::cpu {

// The outputs ow in [0, out) whose input column ow * stride + offset lies in [0, in), as the
// half-open range [lo, hi) (empty when lo == hi). offset may be negative (padding).
struct ValidRange {
  int64_t lo = 0, hi = 0;
};
inline ValidRange valid_range(int64_t offset, int64_t stride, int64_t in, int64_t out) {
  int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t hi = in - 1 - offset < 0 ? 0 : (in - 1 - offset) / stride + 1;
  lo = std::min(lo, out);
  hi = std::min(hi, out);
  return {lo, std::max(lo, hi)};
}

}  // namespace trident::cpu
