#include "core/cuda/stream.h"

#include <array>
#include <utility>

#include "core/cuda/check.h"
#include "core/error.h"

namespace trident::cuda {

namespace {
constexpr int kMaxDevices = 64;

void check_index(int index) {
  const int n = cuda_device_count();
  TRIDENT_CHECK(index >= 0 && index < n, "CUDA device index ", index, " out of range: ", n,
                n == 1 ? " device is" : " devices are", " visible");
}

// The per-thread current stream of each device (NOTE [Current stream]); null means the default.
struct CurrentStreams {
  std::array<cudaStream_t, kMaxDevices> handle{};
  std::array<std::shared_ptr<void>, kMaxDevices> owner{};
};
thread_local CurrentStreams t_current;
}  // namespace

int current_device() {
  int d = 0;
  TRIDENT_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) {
  check_index(index);
  TRIDENT_CUDA_CHECK(cudaSetDevice(index));
}

DeviceGuard::DeviceGuard(int index) {
  const int now = current_device();
  if (now != index) {
    set_device(index);
    previous_ = now;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);  // no throw from a destructor
}

Stream Stream::create(int index, bool non_blocking, int priority) {
  DeviceGuard g(index);
  cudaStream_t s = nullptr;
  TRIDENT_CUDA_CHECK(cudaStreamCreateWithPriority(&s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, priority));
  Stream r(index);
  r.handle_ = s;
  r.owner_ = std::shared_ptr<void>(s, [index](void* p) {
    DeviceGuard dg(index);
    cudaStreamDestroy(static_cast<cudaStream_t>(p));
  });
  return r;
}

void Stream::synchronize() const {
  DeviceGuard g(device_index_);
  TRIDENT_CUDA_CHECK(cudaStreamSynchronize(handle_));
}

bool Stream::query() const {
  DeviceGuard g(device_index_);
  const cudaError_t e = cudaStreamQuery(handle_);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  TRIDENT_CUDA_CHECK(e);
  return true;
}

Stream current_stream(int index) {
  if (index < 0) index = current_device();
  TRIDENT_CHECK(index < kMaxDevices, "CUDA device index ", index, " out of range");
  Stream s = Stream::wrap(index, t_current.handle[static_cast<size_t>(index)]);
  s.owner_ = t_current.owner[static_cast<size_t>(index)];
  return s;
}

Stream current_stream(Device d) {
  TRIDENT_CHECK(d.is_cuda(), "current_stream: ", d.str(), " is not a CUDA device");
  return current_stream(d.index);
}

void set_current_stream(const Stream& s) {
  TRIDENT_CHECK(s.device_index() >= 0 && s.device_index() < kMaxDevices, "CUDA device index ", s.device_index(),
                " out of range");
  t_current.handle[static_cast<size_t>(s.device_index())] = s.handle_;
  t_current.owner[static_cast<size_t>(s.device_index())] = s.owner_;
}

StreamGuard::StreamGuard(const Stream& s) : previous_(current_stream(s.device_index())), device_(s.device_index()) {
  set_current_stream(s);
}

StreamGuard::~StreamGuard() { set_current_stream(previous_); }

Event::~Event() {
  if (event_) {
    DeviceGuard g(device_index_);
    cudaEventDestroy(event_);
  }
}

Event::Event(Event&& o) noexcept
    : event_(std::exchange(o.event_, nullptr)), device_index_(o.device_index_), timing_(o.timing_) {}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_) {
      DeviceGuard g(device_index_);
      cudaEventDestroy(event_);
    }
    event_ = std::exchange(o.event_, nullptr);
    device_index_ = o.device_index_;
    timing_ = o.timing_;
  }
  return *this;
}

void Event::record(const Stream& s) {
  DeviceGuard g(s.device_index());
  if (!event_) {
    TRIDENT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    device_index_ = s.device_index();
  }
  TRIDENT_CHECK(device_index_ == s.device_index(), "Event::record: the event belongs to cuda:", device_index_,
                " but the stream to cuda:", s.device_index());
  TRIDENT_CUDA_CHECK(cudaEventRecord(event_, s.handle()));
}

void Event::wait(const Stream& s) const {
  if (!event_) return;  // nothing recorded: nothing to wait for
  DeviceGuard g(s.device_index());
  TRIDENT_CUDA_CHECK(cudaStreamWaitEvent(s.handle(), event_, 0));
}

void Event::synchronize() const {
  if (!event_) return;
  TRIDENT_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::query() const {
  if (!event_) return true;
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  TRIDENT_CUDA_CHECK(e);
  return true;
}

float Event::elapsed_ms(const Event& later) const {
  TRIDENT_CHECK(timing_ && later.timing_, "Event::elapsed_ms: both events must be created with timing = true");
  TRIDENT_CHECK(event_ && later.event_, "Event::elapsed_ms: both events must be recorded first");
  float ms = 0;
  TRIDENT_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, later.event_));
  return ms;
}

void synchronize(int index) {
  if (index < 0) index = current_device();
  DeviceGuard g(index);
  TRIDENT_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace trident::cuda
