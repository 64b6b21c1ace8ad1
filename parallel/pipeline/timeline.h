// What each pipeline stage did, and when: the records behind the Chrome trace, the Gantt chart
// and the measured bubble.
//
// NOTE [Pipeline timeline]: with timeline recording on, a stage records one Event per forward,
// backward, re-computation (nested inside its backward), send (the launch; sends complete in the
// background) and receive (from the launch until the data is there, so waiting for the previous
// stage shows as a long receive) of every micro-batch. Times are steady-clock seconds, one clock
// for every process of a host (CLOCK_MONOTONIC on Linux), so the stages of one host line up
// without any synchronization; gathering shifts them so the step starts at 0. (Stages on several
// hosts would need an offset estimated at start-up; not done.)
//
// The measured bubble of a step is the fraction of the stages' time spent not computing:
// 1 - (sum over stages of forward + backward time) / (K * span), span being the first event's
// start to the last event's end over all stages. GPipe's theory, with equal stages and free
// communication, is (K - 1) / (M + K - 1); interleaved over V chunks per stage, (K - 1) / (V M + K - 1).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trident::parallel::pipeline {

enum class EventKind : uint8_t { Forward, Backward, Recompute, Send, Recv };
std::string_view event_kind_name(EventKind k);  // "forward", "backward", ...

struct Event {
  EventKind kind;
  int64_t micro_batch;
  double start;  // seconds
  double end;
  int64_t chunk = 0;  // the rank's chunk (NOTE [Interleaved schedule]); 0 without
};

// Seconds on the steady clock.
double timeline_now();

// Every stage's events of one step (stages[s] is stage s's), starting at 0.
struct PipelineTrace {
  std::vector<std::vector<Event>> stages;
  int64_t micro_batches = 0;
  int64_t chunks = 1;  // per stage (NOTE [Interleaved schedule])

  double span() const;
  // NOTE [Pipeline timeline]
  double bubble_fraction() const;
  // Chrome's trace event format (chrome://tracing, Perfetto): one process, a thread per stage,
  // a complete ("X") event per record, in microseconds.
  std::string chrome_json() const;
  void write_chrome_trace(const std::string& path) const;
  // A Gantt chart like the GPipe paper's figure 2, drawn by gnuplot (PNG): false (and nothing
  // written) when gnuplot is not on the PATH; an error when gnuplot fails.
  bool write_gantt_png(const std::string& path) const;
};

// (K - 1) / (V M + K - 1) for V chunks per stage ((K - 1) / (M + K - 1) without interleaving):
// K - 1 idle slots of a chunk's time (1/V of a stage's) beside V M busy ones.
double theoretical_bubble(int64_t stages, int64_t micro_batches, int64_t chunks = 1);

}  // namespace trident::parallel::pipeline
