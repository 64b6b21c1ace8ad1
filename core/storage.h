// Storage: one allocation on one device, shared by a tensor and all its views.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/device.h"

namespace trident {

class Storage {
 public:
  // Allocates nbytes on `device` through its allocator (memory statistics count it).
  Storage(size_t nbytes, Device device);
  // Wraps memory Trident does not own (a memory-mapped file, a caller's buffer); `deleter`
  // (may be empty) runs when the last view goes. Not counted in memory statistics.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // NOTE [Version counter]: every in-place write to a storage bumps its version; a tensor saved
  // for backward remembers the version it was saved at, so writing to it (or to any view of
  // it: views share the storage) before backward is caught with a clear error.
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = false;
  std::function<void(void*)> deleter_;
  std::atomic<uint32_t> version_{0};
};

}  // namespace trident
