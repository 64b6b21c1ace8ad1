// The training programs' tokens/s and MFU (apps/train_common.cpp's progress line and metrics).
//
// NOTE [Throughput accounting]: the rates of a logged interval are over the time spent training
// in it: the evaluation and checkpoint writes that fall inside the interval are timed and taken
// out (exclude), so that a step after an evaluation does not report a fraction of the real
// throughput. On a GPU the loop reads the step's loss before such a pause starts (a
// synchronization), so that training work still queued is not timed as part of the pause. The
// ETA stays wall-clock: evaluations and checkpoints recur at the same rate in the steps left, so
// the average time per step so far, pauses included, is the honest estimate.
#pragma once

#include <cstdint>

namespace trident::apps {

class ThroughputMeter {
 public:
  // Work done in this interval: tokens, and their model FLOPs (NOTE [MFU]; 0 when not counted).
  void add(double tokens, double flops);
  // Seconds inside this interval that were not training (evaluation, checkpoint). Error: < 0.
  void exclude(double seconds);

  struct Rates {
    double train_seconds = 0;  // the interval's length less the excluded time (at least 0)
    double tokens_per_s = 0, flops_per_s = 0;  // 0 when train_seconds is 0
  };
  // Ends the interval of `interval_seconds` (wall clock since the last take): its rates over the
  // training time in it; the counts start again from 0.
  Rates take(double interval_seconds);

 private:
  double tokens_ = 0, flops_ = 0, excluded_ = 0;
};

// Seconds left: the wall-clock time per step so far (pauses included) times the steps left; 0
// before the first step.
double eta_seconds(double elapsed_seconds, int64_t steps_done, int64_t steps_left);

}  // namespace trident::apps
