#include "apps/throughput.h"

#include <algorithm>

#include "core/error.h"

namespace trident::apps {

void ThroughputMeter::add(double tokens, double flops) {
  tokens_ += tokens;
  flops_ += flops;
}

void ThroughputMeter::exclude(double seconds) {
  TRIDENT_CHECK(seconds >= 0, "ThroughputMeter::exclude: ", seconds, " s is negative");
  excluded_ += seconds;
}

ThroughputMeter::Rates ThroughputMeter::take(double interval_seconds) {
  Rates r;
  // The pauses are timed inside the interval, so they never exceed it but for clock rounding.
  r.train_seconds = std::max(0.0, interval_seconds - excluded_);
  if (r.train_seconds > 0) {
    r.tokens_per_s = tokens_ / r.train_seconds;
    r.flops_per_s = flops_ / r.train_seconds;
  }
  tokens_ = flops_ = excluded_ = 0;
  return r;
}

double eta_seconds(double elapsed_seconds, int64_t steps_done, int64_t steps_left) {
  if (steps_done <= 0) return 0;
  return elapsed_seconds / static_cast<double>(steps_done) * static_cast<double>(steps_left);
}

}  // namespace trident::apps
