// Cutting an ordered layer list into K contiguous stages (GPipe's partition).
//
// A balance is the number of layers of each stage, in order: {2, 3} puts layers 0-1 on stage 0
// and 2-4 on stage 1. Every stage holds at least one layer and the counts sum to the layer
// count. balance_by_costs finds the contiguous cut that minimizes the largest stage cost (the
// pipeline's throughput is set by its slowest stage), for any per-layer cost: parameter counts
// (balance_by_parameters), profiled times (torchgpipe's balance_by_time), or bytes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trident::parallel::pipeline {

using Balance = std::vector<int64_t>;

// Checks a balance against `num_layers`: K >= 1 stages, each >= 1 layer, summing to the layer
// count. Errors name the balance and the layer count ("a balance of {2, 3} sums to 5 but the
// model has 6 layers").
void check_balance(const Balance& balance, int64_t num_layers);

// The contiguous partition of `costs` (one per layer, >= 0) into `stages` parts minimizing the
// largest part's sum (the first optimum the dynamic program finds: deterministic, so every rank
// computes the same). Errors: stages < 1, or more stages than layers (naming both).
Balance balance_by_costs(const std::vector<double>& costs, int64_t stages);

// [begin, end) of each stage.
std::vector<std::pair<int64_t, int64_t>> stage_ranges(const Balance& balance);

// The layer ranges rank `stage` holds: [first, second) of each of its chunks, in chunk order
// (virtual stages stage, stage + K, ... of `balance`, K = balance.size() / chunks; NOTE
// [Interleaved schedule] in schedule.h). Errors: chunks not dividing the balance, a stage out of
// range.
std::vector<std::pair<size_t, size_t>> rank_layer_ranges(const Balance& balance, int64_t stage, int64_t chunks = 1);

// "{2, 3, 1}"
std::string balance_str(const Balance& balance);

}  // namespace trident::parallel::pipeline
