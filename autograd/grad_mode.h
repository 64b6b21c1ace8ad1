// Whether ops record the graph. Thread-local, as in PyTorch: a NoGradGuard on one thread does
// not affect another.
#pragma once

#include "core/dtype.h"

namespace trident::autograd {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Turns recording off for its scope (optimizer steps, evaluation, finite differences).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Turns recording on for its scope (inside a NoGradGuard, e.g. checkpoint's re-computation).
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// NOTE [Autocast state]: autocast's thread-local mode (the policy is NOTE [Autocast] in
// ops/autocast.h) lives here, below the ops, because autograd must manage it: the engine turns it
// off for the whole backward pass (backward functions see the dtypes their forward recorded, and
// a backward run inside an autocast scope, as a pipeline step does, must not cast again), and
// autograd::checkpoint re-runs its function under the mode its forward ran under.
struct AutocastMode {
  bool enabled = false;
  DType dtype = DType::BF16;
  static AutocastMode get();
  static void set(AutocastMode mode);
};

// Sets the autocast mode for its scope, restoring the previous one on exit.
class AutocastModeGuard {
 public:
  explicit AutocastModeGuard(AutocastMode mode) : prev_(AutocastMode::get()) { AutocastMode::set(mode); }
  ~AutocastModeGuard() { AutocastMode::set(prev_); }
  AutocastModeGuard(const AutocastModeGuard&) = delete;
  AutocastModeGuard& operator=(const AutocastModeGuard&) = delete;

 private:
  AutocastMode prev_;
};

}  // namespace trident::autograd

namespace trident {
using autograd::NoGradGuard;
}
