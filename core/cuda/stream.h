// CUDA devices, streams and events (the CUDA backend's own header: include it only from code
// built when TRIDENT_HAVE_CUDA).
//
//   cuda::DeviceGuard g(1);                     // cudaSetDevice(1) until g goes out of scope
//   cuda::Stream s = cuda::Stream::create(0);   // a new non-blocking stream on cuda:0
//   { cuda::StreamGuard sg(s); ... }            // kernels launched by ops here run on s
//   cuda::Event e; e.record(s); e.wait(cuda::current_stream(0)); e.synchronize();
//
// NOTE [Current stream]: every op launches on cuda::current_stream(its tensors' device). It is
// per thread and per device; by default the device's legacy default stream (the null stream,
// which orders with every blocking stream), and StreamGuard replaces it for a scope. The caching
// allocator files a block under the stream that was current when it was allocated (NOTE
// [Stream pools] in core/cuda/caching_allocator.h).
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "core/cuda/check.h"  // TRIDENT_CUDA_CHECK for code that launches on these streams
#include "core/device.h"

namespace trident::cuda {

// The device the calling thread's CUDA calls go to.
int current_device();
void set_device(int index);

// Makes `index` the current device for a scope, restoring the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  explicit DeviceGuard(Device d) : DeviceGuard(d.index) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// A stream on one device: a value handle. A created stream lives as long as any handle to it;
// the default stream (handle() == nullptr) always.
class Stream {
 public:
  // The default (null) stream of cuda:index.
  explicit Stream(int index = 0) : device_index_(index) {}
  // A new stream on cuda:index, non-blocking with respect to the null stream when `non_blocking`
  // (then work on it runs concurrently with the default stream; order with Events).
  static Stream create(int index, bool non_blocking = true, int priority = 0);
  // Wraps a stream Trident does not own (another library's).
  static Stream wrap(int index, cudaStream_t s) { Stream r(index); r.handle_ = s; return r; }

  cudaStream_t handle() const { return handle_; }
  // So a kernel launch can take a Stream where it takes a cudaStream_t.
  operator cudaStream_t() const { return handle_; }
  Device device() const { return Device::cuda(device_index_); }
  int device_index() const { return device_index_; }
  bool is_default() const { return handle_ == nullptr; }
  // Blocks the host until the stream's queued work has finished.
  void synchronize() const;
  // Whether all queued work has finished.
  bool query() const;
  bool operator==(const Stream& o) const { return handle_ == o.handle_ && device_index_ == o.device_index_; }

 private:
  friend Stream current_stream(int index);
  friend void set_current_stream(const Stream& s);
  int device_index_ = 0;
  cudaStream_t handle_ = nullptr;
  std::shared_ptr<void> owner_;  // destroys a created stream with its last handle
};

// The calling thread's current stream on cuda:index (NOTE [Current stream]); index -1 means the
// current device.
Stream current_stream(int index = -1);
// The same for a tensor's device (an Error for a CPU device): `cudaStream_t s = current_stream(t.device())`.
Stream current_stream(Device d);
void set_current_stream(const Stream& s);
inline Stream default_stream(int index = -1) { return Stream(index < 0 ? current_device() : index); }

// Makes `s` the current stream of its device (and its device the current device) for a scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  DeviceGuard device_;
};

// A CUDA event. Created lazily on the device of the first record; movable, not copyable.
class Event {
 public:
  explicit Event(bool timing = false) : timing_(timing) {}
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Records the work queued on `s` so far.
  void record(const Stream& s);
  void record() { record(current_stream()); }
  // Makes `s` wait (on the device, the host does not block) for the recorded work.
  void wait(const Stream& s) const;
  // Blocks the host until the recorded work has finished.
  void synchronize() const;
  bool query() const;
  // Milliseconds between this event and a later one; both must be timing events, recorded and
  // completed.
  float elapsed_ms(const Event& later) const;
  cudaEvent_t handle() const { return event_; }
  bool recorded() const { return event_ != nullptr; }

 private:
  cudaEvent_t event_ = nullptr;
  int device_index_ = -1;
  bool timing_ = false;
};

// Blocks until all work on cuda:index (-1: the current device) has finished.
void synchronize(int index = -1);

}  // namespace trident::cuda
