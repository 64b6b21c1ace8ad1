// Shared by the CUDA suites: every test skips, saying why, on a machine without a usable GPU.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/tensor.h"
#include "test_util.h"

namespace trident::testing {

// Empty when a CUDA device is usable, else why not (the runtime's own words).
inline std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
  return n > 0 ? std::string() : std::string("the runtime reports 0 devices");
}

// Per-dtype tolerances on the relative error: f32 arithmetic, and one to three roundings to
// f16 (2^-11) or bf16 (2^-8) along the way. Backward chains round a few more times.
inline double tolerance(DType dt, bool backward) {
  switch (dt) {
    case DType::F32: return backward ? 2e-5 : 1e-5;
    case DType::F16: return backward ? 4e-3 : 2e-3;
    case DType::BF16: return backward ? 3e-2 : 1.6e-2;
    default: return 0;
  }
}

}  // namespace trident::testing

#define TRIDENT_REQUIRE_CUDA()                                                            \
  do {                                                                                    \
    const std::string trident_why_ = ::trident::testing::cuda_unavailable_reason();      \
    if (!trident_why_.empty()) GTEST_SKIP() << "no CUDA device: " << trident_why_;        \
  } while (0)

namespace trident::testing {

// The fixture of the CUDA suites: skips without a GPU, and poisons every device allocation with
// NaN (cuda::set_poison_allocations) for the test, so an output element a kernel forgets to write
// fails the comparison. Base is ::testing::Test or ::testing::TestWithParam<...>.
template <typename Base = ::testing::Test>
class PoisonedCuda : public Base {
 protected:
  void SetUp() override {
    TRIDENT_REQUIRE_CUDA();
    cuda::set_poison_allocations(true);
  }
  void TearDown() override { cuda::set_poison_allocations(false); }
};

}  // namespace trident::testing
