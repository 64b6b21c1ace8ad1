// What the CUDA runtime says about a device (core/device.h's cuda_device_count says how many).
// Usable from code built with or without the CUDA backend.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

// cudaGetDeviceProperties of CUDA device `index`: its name ("NVIDIA H200"), compute
// capability, memory, SM count and clock. Errors: no CUDA backend in this build, or no such device.
struct CudaDeviceInfo {
  std::string name;
  int major = 0, minor = 0;  // compute capability, e.g. 9.0
  int64_t total_memory = 0;  // bytes
  int multiprocessors = 0;   // SMs visible (a MIG instance: its share); for apps/mfu.h's peak
  int clock_khz = 0;         // the maximum SM clock (cudaDevAttrClockRate)
};
CudaDeviceInfo cuda_device_info(int index);

}  // namespace trident
