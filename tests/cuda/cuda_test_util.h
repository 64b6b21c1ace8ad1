// Shared by the CUDA suites: every test skips, saying why, on a machine without a usable GPU.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

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

}  // namespace trident::testing

#define TRIDENT_REQUIRE_CUDA()                                                            \
  do {                                                                                    \
    const std::string trident_why_ = ::trident::testing::cuda_unavailable_reason();      \
    if (!trident_why_.empty()) GTEST_SKIP() << "no CUDA device: " << trident_why_;        \
  } while (0)
