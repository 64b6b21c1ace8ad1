#include "parallel/launch.h"

#include "core/error.h"

namespace trident::parallel {

Mesh launch_mesh(ParallelSizes s) {
  TRIDENT_CHECK(s.dp > 0 && s.pp > 0 && s.tp > 0, "--dp ", s.dp, " --pp ", s.pp, " --tp ", s.tp,
                ": every size must be positive");
  auto world = comm::Communicator::world();
  const int64_t want = static_cast<int64_t>(s.dp) * s.pp * s.tp;
  TRIDENT_CHECK(want == world->size(), world->size() == 1 ? "this process runs alone (no MPI launcher)" : "mpirun started ",
                world->size() == 1 ? "" : std::to_string(world->size()) + " ranks", " but --dp ", s.dp, " x --pp ", s.pp,
                " x --tp ", s.tp, " is ", want, world->size() == 1 ? "; start it with mpirun -np " + std::to_string(want) : "");
  return Mesh(world, {s.dp, s.pp, s.tp});
}

std::pair<int64_t, int64_t> dp_batch_rows(int64_t global_batch, const comm::Communicator& dp) {
  TRIDENT_CHECK(global_batch > 0 && global_batch % dp.size() == 0, "the global batch of ", global_batch,
                " rows does not split evenly over the ", dp.size(), " ranks of dp group '", dp.name(),
                "'; use a multiple of ", dp.size());
  const int64_t per = global_batch / dp.size();
  return {per * dp.rank(), per};
}

}  // namespace trident::parallel
