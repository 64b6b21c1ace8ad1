// Where a tensor's memory lives: the CPU, or CUDA device n.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace trident {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // the CUDA ordinal; always 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CPU ? 0 : i) {}
  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  static constexpr Device cuda(int i = 0) { return Device(DeviceType::CUDA, i); }
  // Parses "cpu", "cuda", "cuda:1".
  static Device parse(std::string_view s);

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool operator==(const Device&) const = default;
  std::string str() const;
};

inline constexpr Device kCPU = Device::cpu();

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

// Whether this build has the CUDA backend, and how many GPUs it sees (0 without the backend).
bool cuda_built();
int cuda_device_count();
inline bool cuda_is_available() { return cuda_device_count() > 0; }

}  // namespace trident
