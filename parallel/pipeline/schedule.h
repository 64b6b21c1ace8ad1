// Pipeline schedules: the order in which one stage runs the forward and backward passes of the
// micro-batches of a mini-batch.
//
// NOTE [Pipeline schedules]: with K stages and M micro-batches,
//  - GPipe: every forward F0 .. F(M-1), then every backward B(M-1) .. B0 (reversed, so the last
//    micro-batch's backward follows its forward at once: re-materialization `except_last` keeps
//    exactly that one micro-batch's activations). Stage s holds up to M micro-batches in flight.
//  - 1F1B (PipeDream-flush, Narayanan et al. 2021): stage s runs min(K - s - 1, M) warm-up
//    forwards, then alternates one forward and one backward, then drains the remaining
//    backwards; backwards run in micro-batch order. Stage s holds at most K - s micro-batches in
//    flight, so the activation memory no longer grows with M, with the same bubble.
// Both are synchronous: the gradients of a step are those of the whole mini-batch, whatever the
// schedule. Sends never block (they are started and waited at the end of the step), so any
// order in which every receive is preceded by its sender's matching send is deadlock-free.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trident::parallel::pipeline {

enum class Schedule : uint8_t { GPipe, OneFOneB };
std::string_view schedule_name(Schedule s);  // "gpipe", "1f1b"
// "gpipe" or "1f1b"; anything else is an error naming it and the choices.
Schedule parse_schedule(std::string_view name);

struct Action {
  enum class Kind : uint8_t { Forward, Backward };
  Kind kind;
  int64_t micro_batch;
  bool operator==(const Action&) const = default;
};

// The actions of `stage` (0-based, of `stages`) for `micro_batches` micro-batches: each
// micro-batch's forward once and its backward once, forward first.
std::vector<Action> schedule_actions(Schedule schedule, int64_t stage, int64_t stages, int64_t micro_batches);

// "F0 F1 B1 B0"
std::string actions_str(const std::vector<Action>& actions);

}  // namespace trident::parallel::pipeline
