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
//
// NOTE [Interleaved schedule]: with V > 1 chunks per rank (Megatron-LM's virtual pipeline,
// Narayanan et al. 2021, section 2.2) the layers are cut into K V virtual stages and rank s
// holds virtual stages s, s + K, ..., s + (V - 1) K, so a micro-batch passes through every rank V
// times; M must be a multiple of K. The ranks take the micro-batches in groups of K: forward
// number k (0 <= k < M V) is micro-batch (k / KV) K + k mod K of chunk (k mod KV) / K, backward
// number k the same micro-batch of chunk V - 1 - (k mod KV) / K.
//  - 1F1B (interleaved 1F1B): rank s runs min(2 (K - s - 1) + (V - 1) K, M V) warm-up forwards,
//    then alternates forward and backward, then drains the backwards. The bubble shrinks by V:
//    (K - 1) / (V M + K - 1) of the step (each chunk's work is 1/V of a stage's).
//  - GPipe: every forward in that order, then every backward.
// A rank's sends of activations to the next rank (the last rank's to rank 0, chunk c to chunk
// c + 1) and the next rank's receives follow the same forward numbering, so they match in order
// (gradients flow back on a communicator of their own: with K = 2 the two ranks send each other
// both kinds).
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
  int64_t chunk = 0;  // which of the rank's chunks (NOTE [Interleaved schedule]); 0 without
  bool operator==(const Action&) const = default;
};

// The actions of `stage` (0-based, of `stages` ranks) for `micro_batches` micro-batches through
// each of its `chunks` chunks: each (chunk, micro-batch) forward once and backward once, forward
// first. Errors: a stage outside [0, stages), micro_batches < 1, chunks < 1, chunks > 1 with one
// stage or with micro_batches not a multiple of stages.
std::vector<Action> schedule_actions(Schedule schedule, int64_t stage, int64_t stages, int64_t micro_batches,
                                     int64_t chunks = 1);

// "F0 F1 B1 B0"; with chunks, "F0.1" is micro-batch 0's forward through chunk 1.
std::string actions_str(const std::vector<Action>& actions);

}  // namespace trident::parallel::pipeline
