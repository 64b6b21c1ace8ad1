// The key of a cached library plan (a cuBLASLt GEMM, a cuDNN convolution): N integers that
// describe the call completely, compared whole and hashed with FNV-1a.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace trident::cuda {

template <size_t N>
struct PlanKey {
  std::array<int64_t, N> v{};
  bool operator==(const PlanKey& o) const { return v == o.v; }
};

template <size_t N>
struct PlanKeyHash {
  size_t operator()(const PlanKey<N>& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t x : k.v) h = (h ^ static_cast<size_t>(x)) * 1099511628211ull;
    return h;
  }
};

}  // namespace trident::cuda
