#include "core/shape.h"

#include <limits>

#include "core/error.h"

namespace trident {

int64_t shape_numel(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    TRIDENT_CHECK(s >= 0, "negative size in shape ", sizes);
    if (s != 0 && n > std::numeric_limits<int64_t>::max() / s) TRIDENT_FAIL("shape ", sizes, " has too many elements");
    n *= s;
  }
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what) {
  const int64_t lo = -std::max<int64_t>(ndim, 1), hi = std::max<int64_t>(ndim, 1) - 1;
  TRIDENT_CHECK(dim >= lo && dim <= hi, what, ": dim ", dim, " out of range for a tensor with ", ndim,
                " dims (expected ", lo, " to ", hi, ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TRIDENT_CHECK(da == db || da == 1 || db == 1, what, ": shapes ", a, " and ", b,
                  " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcast_strides(const Shape& sizes, const Shape& strides, const Shape& target) {
  TRIDENT_ASSERT(sizes.size() <= target.size(), "broadcast of ", sizes, " to ", target);
  Shape out(target.size(), 0);
  const size_t off = target.size() - sizes.size();
  for (size_t i = 0; i < sizes.size(); ++i) {
    TRIDENT_ASSERT(sizes[i] == target[i + off] || sizes[i] == 1, "broadcast of ", sizes, " to ", target);
    out[i + off] = sizes[i] == 1 && target[i + off] != 1 ? 0 : strides[i];
  }
  return out;
}

std::string shape_str(const Shape& s) { return detail::str(s); }

}  // namespace trident
