#include "parallel/pipeline/partition.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace trident::parallel::pipeline {

std::string balance_str(const Balance& balance) {
  std::ostringstream s;
  s << "{";
  for (size_t i = 0; i < balance.size(); ++i) s << (i ? ", " : "") << balance[i];
  s << "}";
  return s.str();
}

void check_balance(const Balance& balance, int64_t num_layers) {
  TRIDENT_CHECK(!balance.empty(), "pipeline: the balance is empty; it needs one layer count per stage");
  TRIDENT_CHECK(static_cast<int64_t>(balance.size()) <= num_layers, "pipeline: ", balance.size(),
                " stages but the model has only ", num_layers, " layers (every stage needs at least one)");
  int64_t sum = 0;
  for (size_t s = 0; s < balance.size(); ++s) {
    TRIDENT_CHECK(balance[s] >= 1, "pipeline: stage ", s, " of the balance ", balance_str(balance), " has ", balance[s],
                  " layers; every stage needs at least one");
    sum += balance[s];
  }
  TRIDENT_CHECK(sum == num_layers, "pipeline: the balance ", balance_str(balance), " sums to ", sum, " but the model has ",
                num_layers, " layers");
}

Balance balance_by_costs(const std::vector<double>& costs, int64_t stages) {
  const auto n = static_cast<int64_t>(costs.size());
  TRIDENT_CHECK(stages >= 1, "pipeline: ", stages, " stages; at least one is needed");
  TRIDENT_CHECK(stages <= n, "pipeline: ", stages, " stages but the model has only ", n,
                " layers (every stage needs at least one)");
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    TRIDENT_CHECK(costs[static_cast<size_t>(i)] >= 0, "pipeline: layer ", i, " has a negative cost ", costs[static_cast<size_t>(i)]);
    prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + costs[static_cast<size_t>(i)];
  }
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest largest-stage cost of the first i layers in k stages; cut[k][i]:
  // where the last of those k stages begins.
  const auto S = static_cast<size_t>(stages), N = static_cast<size_t>(n);
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(N + 1, inf));
  std::vector<std::vector<size_t>> cut(S + 1, std::vector<size_t>(N + 1, 0));
  best[0][0] = 0;
  for (size_t k = 1; k <= S; ++k)
    for (size_t i = k; i <= N - (S - k); ++i)
      for (size_t j = k - 1; j < i; ++j) {
        const double c = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (c < best[k][i]) {
          best[k][i] = c;
          cut[k][i] = j;
        }
      }
  Balance balance(S);
  size_t i = N;
  for (size_t k = S; k >= 1; --k) {
    balance[k - 1] = static_cast<int64_t>(i - cut[k][i]);
    i = cut[k][i];
  }
  return balance;
}

std::vector<std::pair<size_t, size_t>> rank_layer_ranges(const Balance& balance, int64_t stage, int64_t chunks) {
  TRIDENT_CHECK(chunks >= 1 && !balance.empty() && static_cast<int64_t>(balance.size()) % chunks == 0,
                "pipeline: a balance of ", balance.size(), " stages is not ", chunks, " chunks per stage");
  const int64_t stages = static_cast<int64_t>(balance.size()) / chunks;
  TRIDENT_CHECK(stage >= 0 && stage < stages, "pipeline: stage ", stage, " of ", stages);
  const auto all = stage_ranges(balance);
  std::vector<std::pair<size_t, size_t>> out;
  for (int64_t c = 0; c < chunks; ++c) {
    const auto& r = all[static_cast<size_t>(c * stages + stage)];
    out.emplace_back(static_cast<size_t>(r.first), static_cast<size_t>(r.second));
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> stage_ranges(const Balance& balance) {
  std::vector<std::pair<int64_t, int64_t>> r;
  int64_t b = 0;
  for (int64_t n : balance) {
    r.emplace_back(b, b + n);
    b += n;
  }
  return r;
}

}  // namespace trident::parallel::pipeline
