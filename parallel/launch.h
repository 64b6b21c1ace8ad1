// What a training program needs to run data-parallel under mpirun (the hook apps/train_gpt2
// uses for `mpirun -np N train_gpt2 --dp N`):
//
//   auto mesh = parallel::launch_mesh({.dp = dp});        // checks N == dp x pp x tp
//   parallel::DataParallel ddp(*model, mesh.group_ptr(parallel::Axis::DP));  // any nn::Module
//   const auto [first, count] = parallel::dp_batch_rows(global_batch, mesh.group(parallel::Axis::DP));
//   ... train on rows [first, first + count) of every global batch; log on mesh.world_rank() == 0
//
// A plain process (no launcher) is a world of one, so the same program runs serially with --dp 1.
#pragma once

#include <cstdint>
#include <utility>

#include "parallel/comm/communicator.h"
#include "parallel/mesh.h"

namespace trident::parallel {

struct ParallelSizes {
  int dp = 1;
  int pp = 1;
  int tp = 1;
};

// The mesh over Communicator::world() with exactly these sizes. Errors name what the launcher
// started and what was asked ("mpirun started 4 ranks but --dp 2 x --pp 1 x --tp 1 is 2").
Mesh launch_mesh(ParallelSizes sizes);

// The rows of a global batch that dp rank dp.rank() trains on: {first, count}, an equal share in
// rank order. global_batch must be a positive multiple of the dp size (an error naming both
// otherwise), so that the mean of the ranks' mean losses is the global batch's mean loss.
std::pair<int64_t, int64_t> dp_batch_rows(int64_t global_batch, const comm::Communicator& dp);

}  // namespace trident::parallel
