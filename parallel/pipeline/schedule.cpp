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

// NOTE [Pipeline schedules]
std::vector<Action> schedule_actions(Schedule schedule, int64_t stage, int64_t stages, int64_t micro_batches) {
  TRIDENT_CHECK(stages >= 1 && stage >= 0 && stage < stages, "pipeline schedule: stage ", stage, " of ", stages);
  TRIDENT_CHECK(micro_batches >= 1, "pipeline schedule: ", micro_batches, " micro-batches; at least one is needed");
  using K = Action::Kind;
  std::vector<Action> a;
  if (schedule == Schedule::GPipe) {
    for (int64_t m = 0; m < micro_batches; ++m) a.push_back({K::Forward, m});
    for (int64_t m = micro_batches - 1; m >= 0; --m) a.push_back({K::Backward, m});
    return a;
  }
  const int64_t warmup = std::min(stages - stage - 1, micro_batches);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) a.push_back({K::Forward, f});
  for (; f < micro_batches; ++f, ++b) {
    a.push_back({K::Forward, f});
    a.push_back({K::Backward, b});
  }
  for (; b < micro_batches; ++b) a.push_back({K::Backward, b});
  return a;
}

std::string actions_str(const std::vector<Action>& actions) {
  std::string s;
  for (const Action& x : actions) {
    if (!s.empty()) s += ' ';
    s += (x.kind == Action::Kind::Forward ? 'F' : 'B') + std::to_string(x.micro_batch);
  }
  return s;
}

}  // namespace trident::parallel::pipeline
