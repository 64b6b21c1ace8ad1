// The op profiler (NOTE [Op profiler] in core/profiler.h).
#include "core/profiler.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"
#if TRIDENT_HAVE_CUDA
#include "core/cuda/stream.h"
#endif

namespace trident::profiler {

namespace detail {
std::atomic<bool> g_active{false};
}

namespace {

using Clock = std::chrono::steady_clock;

struct State {
  std::mutex mu;
  Clock::time_point t0;
  int64_t generation = 0;  // which profile: a scope open across stop() and start() adds to none
  std::map<std::pair<std::string, bool>, OpTime> host;  // (name, cuda) -> sums; host-timed ops
#if TRIDENT_HAVE_CUDA
  struct Pair {
    const char* name;
    cuda::Event start{true}, stop{true};
  };
  std::vector<Pair> pairs;  // device-timed calls, summed at stop()
#endif
};

State& state() {
  static State s;
  return s;
}

thread_local int t_depth = 0;  // scopes open on this thread

void add(std::map<std::pair<std::string, bool>, OpTime>& sums, const char* name, bool cuda, double ms) {
  OpTime& o = sums[{name, cuda}];
  o.name = name;
  o.cuda = cuda;
  ++o.calls;
  o.ms += ms;
}

}  // namespace

void start() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  TRIDENT_CHECK(!detail::g_active.load(), "profiler::start: a profile is already running");
  s.host.clear();
#if TRIDENT_HAVE_CUDA
  s.pairs.clear();
#endif
  s.t0 = Clock::now();
  ++s.generation;
  detail::g_active.store(true);
}

Report stop() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  TRIDENT_CHECK(detail::g_active.load(), "profiler::stop: no profile is running");
  detail::g_active.store(false);
  std::map<std::pair<std::string, bool>, OpTime> sums = std::move(s.host);
  s.host.clear();
#if TRIDENT_HAVE_CUDA
  for (State::Pair& p : s.pairs) {
    if (!p.stop.recorded()) continue;  // a scope still open when the profile stopped
    p.stop.synchronize();
    add(sums, p.name, true, static_cast<double>(p.start.elapsed_ms(p.stop)));
  }
  s.pairs.clear();
#endif
  Report r;
  r.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - s.t0).count();
  for (auto& kv : sums) r.ops.push_back(std::move(kv.second));
  std::stable_sort(r.ops.begin(), r.ops.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return r;
}

void Scope::begin(const char* name, int cuda_device) {
  counted_ = true;
  if (t_depth++ > 0) return;  // inside another op: timed as part of it
  timed_ = true;
  name_ = name;
  device_ = cuda_device;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  generation_ = s.generation;
#if TRIDENT_HAVE_CUDA
  if (cuda_device >= 0) {
    s.pairs.push_back({name, cuda::Event(true), cuda::Event(true)});
    slot_ = static_cast<int>(s.pairs.size()) - 1;
    s.pairs.back().start.record(cuda::current_stream(cuda_device));
    return;
  }
#endif
  t0_ = Clock::now();
}

void Scope::end() {
  --t_depth;
  if (!timed_) return;
  State& s = state();
#if TRIDENT_HAVE_CUDA
  if (device_ >= 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    // The profile may have stopped (and its pairs gone) while this op ran.
    if (detail::g_active.load() && s.generation == generation_)
      s.pairs[static_cast<size_t>(slot_)].stop.record(cuda::current_stream(device_));
    return;
  }
#endif
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
  std::lock_guard<std::mutex> lock(s.mu);
  if (detail::g_active.load() && s.generation == generation_) add(s.host, name_, false, ms);
}

double Report::total_ms() const {
  double t = 0;
  for (const OpTime& o : ops) t += o.ms;
  return t;
}

std::string Report::table(size_t rows) const {
  const double total = total_ms();
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-32s %-6s %9s %12s %10s %7s\n", "op", "device", "calls", "total ms", "ms/call", "share");
  out += line;
  for (size_t i = 0; i < ops.size() && i < rows; ++i) {
    const OpTime& o = ops[i];
    std::snprintf(line, sizeof line, "%-32s %-6s %9lld %12.3f %10.4f %6.1f%%\n", o.name.c_str(), o.cuda ? "cuda" : "cpu",
                  static_cast<long long>(o.calls), o.ms, o.ms / static_cast<double>(o.calls), total > 0 ? 100 * o.ms / total : 0.0);
    out += line;
  }
  if (ops.size() > rows) {
    double rest = 0;
    int64_t calls = 0;
    for (size_t i = rows; i < ops.size(); ++i) {
      rest += ops[i].ms;
      calls += ops[i].calls;
    }
    char more[48];
    std::snprintf(more, sizeof more, "(%zu more ops)", ops.size() - rows);
    std::snprintf(line, sizeof line, "%-32s %-6s %9lld %12.3f %10s %6.1f%%\n", more, "", static_cast<long long>(calls), rest,
                  "", total > 0 ? 100 * rest / total : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-32s %-6s %9s %12.3f   (wall time of the profile: %.3f ms)\n", "total", "", "", total,
                wall_ms);
  out += line;
  return out;
}

}  // namespace trident::profiler
