#include "parallel/pipeline/schedule.h"

#include <algorithm>

#include "core/error.h"

namespace trident::parallel::pipeline {

std::string_view schedule_name(Schedule s) { return s == Schedule::GPipe ? "gpipe" : "1f1b"; }

Schedule parse_schedule(std::string_view name) {
  if (name == "gpipe") return Schedule::GPipe;
  if (name == "1f1b") return Schedule::OneFOneB;
  TRIDENT_CHECK(false, "unknown pipeline schedule '", name, "'; choose gpipe or 1f1b");
  return Schedule::GPipe;
}

// NOTE [Pipeline schedules], NOTE [Interleaved schedule]
std::vector<Action> schedule_actions(Schedule schedule, int64_t stage, int64_t stages, int64_t micro_batches,
                                     int64_t chunks) {
  TRIDENT_CHECK(stages >= 1 && stage >= 0 && stage < stages, "pipeline schedule: stage ", stage, " of ", stages);
  TRIDENT_CHECK(micro_batches >= 1, "pipeline schedule: ", micro_batches, " micro-batches; at least one is needed");
  TRIDENT_CHECK(chunks >= 1, "pipeline schedule: ", chunks, " chunks per stage; at least one is needed");
  TRIDENT_CHECK(chunks == 1 || stages >= 2, "pipeline schedule: ", chunks,
                " chunks per stage need at least two stages (an interleaved pipeline's chunks alternate between ranks)");
  TRIDENT_CHECK(chunks == 1 || micro_batches % stages == 0, "pipeline schedule: ", chunks, " chunks per stage (interleaved) ",
                "need the micro-batches in groups of the ", stages, " stages; ", micro_batches, " is not a multiple of ", stages);
  using K = Action::Kind;
  const int64_t total = micro_batches * chunks, group = stages * chunks;
  // The k-th forward (or backward) of the rank (NOTE [Interleaved schedule]); chunks == 1 gives
  // micro-batch k of chunk 0 both ways.
  auto forward = [&](int64_t k) {
    return Action{K::Forward, (k / group) * stages + k % stages, (k % group) / stages};
  };
  auto backward = [&](int64_t k) {
    return Action{K::Backward, (k / group) * stages + k % stages, chunks - 1 - (k % group) / stages};
  };
  std::vector<Action> a;
  if (schedule == Schedule::GPipe) {
    for (int64_t k = 0; k < total; ++k) a.push_back(forward(k));
    if (chunks == 1)  // GPipe's reversed order: the last micro-batch's backward follows its forward
      for (int64_t m = micro_batches - 1; m >= 0; --m) a.push_back({K::Backward, m});
    else
      for (int64_t k = 0; k < total; ++k) a.push_back(backward(k));
    return a;
  }
  const int64_t warmup = chunks == 1 ? std::min(stages - stage - 1, micro_batches)
                                     : std::min(2 * (stages - stage - 1) + (chunks - 1) * stages, total);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) a.push_back(forward(f));
  for (; f < total; ++f, ++b) {
    a.push_back(forward(f));
    a.push_back(backward(b));
  }
  for (; b < total; ++b) a.push_back(backward(b));
  return a;
}

std::string actions_str(const std::vector<Action>& actions) {
  std::string s;
  for (const Action& x : actions) {
    if (!s.empty()) s += ' ';
    s += (x.kind == Action::Kind::Forward ? 'F' : 'B') + std::to_string(x.micro_batch);
    if (x.chunk > 0) s += '.' + std::to_string(x.chunk);
  }
  return s;
}

}  // namespace trident::parallel::pipeline
