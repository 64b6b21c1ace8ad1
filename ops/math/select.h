// select(c, a, b) = c ? a : b without a branch, for the element-wise functors.
//
// GCC keeps `c ? a : b` as a branch when an arm does work that may trap (with the default
// -ftrapping-math, even 0.5 * g) or when it can sink a load into one arm (where's operands);
// the loop then does not vectorize. Picking with integer masks computes and reads both arms, so
// the loop vectorizes (NOTE [Fast f32 math] in ops/math/fast_f32.h has the f32 form).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/macros.h"

namespace trident::math {

template <typename T>
TRIDENT_INLINE T select(bool c, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return (c & a) | (!c & b);
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    const U m = U(0) - static_cast<U>(c);
    return static_cast<T>((static_cast<U>(a) & m) | (static_cast<U>(b) & static_cast<U>(~m)));
  } else {
    static_assert(std::is_floating_point_v<T>, "select: arithmetic types only");
    using U = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
    U ua, ub;
    memcpy(&ua, &a, sizeof(T));
    memcpy(&ub, &b, sizeof(T));
    const U m = U(0) - static_cast<U>(c);
    const U r = (ua & m) | (ub & ~m);
    T out;
    memcpy(&out, &r, sizeof(T));
    return out;
  }
}

}  // namespace trident::math
