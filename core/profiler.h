// Op profiler: where a training step's time goes, op by op.
//
// NOTE [Op profiler]: between profiler::start() and profiler::stop(), every kernel entry point
// (the TRIDENT_KERNEL dispatch of ops/common.h, copy_, the fused linear + GELU, an optimizer
// step, gradient clipping, the loss scaler's unscale) is a Scope: on a CUDA device it records a
// pair of timing events on the device's current stream around the call, so the time is the
// device's; on the CPU it reads the host clock, and the time is the call's. Only the outermost
// scope of a thread counts (an op that calls another op is timed once, as itself). stop() waits
// for the events and returns, per op name and device kind, the calls and the milliseconds,
// largest first. On a GPU, a gap in which the device waited for the host falls into the next
// op's time; the wall time of the whole window is in the report to compare with. When no
// profile runs, a scope costs one relaxed atomic load.
//   profiler::start();  ... steps ...;  std::cout << profiler::stop().table();
// The training programs print it for `--profile`; gpt2_cuda_bench writes it for `--profile FILE`.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace trident::profiler {

struct OpTime {
  std::string name;
  bool cuda = false;  // timed on a CUDA device (events), else on the host clock
  int64_t calls = 0;
  double ms = 0;
};

struct Report {
  std::vector<OpTime> ops;  // largest ms first
  double wall_ms = 0;       // start() to stop(), the devices' work included
  double total_ms() const;
  // The `rows` largest ops: name, device, calls, milliseconds, per call, share of the total.
  std::string table(size_t rows = 25) const;
};

// Starts a profile (what an earlier one collected is dropped). An Error when one is running.
void start();
// Ends it: waits for the timed device work and sums it. An Error when none is running.
Report stop();

namespace detail {
extern std::atomic<bool> g_active;
}
inline bool active() { return detail::g_active.load(std::memory_order_relaxed); }

// Times its own lifetime under `name` (a string that outlives the profile: a literal) on CUDA
// device `cuda_device`, or on the host clock for -1.
class Scope {
 public:
  explicit Scope(const char* name, int cuda_device = -1) {
    if (active()) begin(name, cuda_device);
  }
  ~Scope() {
    if (counted_) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void begin(const char* name, int cuda_device);
  void end();

  bool counted_ = false;  // this scope changed the thread's depth
  bool timed_ = false;    // the outermost: it records a time
  const char* name_ = nullptr;
  int device_ = -1;
  [[maybe_unused]] int slot_ = -1;  // its pair of CUDA events (unused in a build without CUDA)
  int64_t generation_ = 0;  // the profile it began in
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace trident::profiler
