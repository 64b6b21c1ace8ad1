// Window arithmetic of the pooling ops, shared by the CPU kernels and (later) the CUDA ones.
// The formulas are PyTorch's, so output sizes and divisors agree with it exactly.
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace trident::math {

// Division rounding towards negative infinity (the numerator may be negative).
TRIDENT_INLINE int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Output length of max/avg pooling along one dim. In ceil mode the last window must still
// start inside the input or its left padding, otherwise it is dropped.
TRIDENT_INLINE int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                                        bool ceil_mode) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = floor_div(span, stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// The window of average-pooling output o along one dim: [start, end) clipped to the input,
// and `padded`, its length counting the padding (the divisor when count_include_pad). A
// ceil-mode window that runs past the right padding is cut at in + pad first, as in PyTorch.
struct AvgWindow {
  int64_t start, end, padded;
};
TRIDENT_INLINE AvgWindow avg_pool_window(int64_t o, int64_t in, int64_t kernel, int64_t pad, int64_t stride) {
  int64_t s = o * stride - pad;
  int64_t e = s + kernel < in + pad ? s + kernel : in + pad;
  const int64_t padded = e - s;
  s = s > 0 ? s : 0;
  e = e < in ? e : in;
  return {s, e, padded};
}

// Adaptive pooling: output o of `out` covers input [floor(o in / out), ceil((o + 1) in / out)).
TRIDENT_INLINE int64_t adaptive_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
TRIDENT_INLINE int64_t adaptive_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

}  // namespace trident::math
