// The MPI backend: host memory over MPI (CUDA tensors reach it staged through pinned buffers by
// the base Communicator, NOTE [Host staging]), with non-blocking MPI calls (MPI_Iallreduce,
// MPI_Iallgather(v), MPI_Ireduce_scatter(_block), MPI_Ibcast, MPI_Ibarrier, MPI_Isend/Irecv)
// whose requests Work::wait() and test() drive with MPI_Testall, so that a wait can time out
// (NOTE [Work and timeouts]). OpenMPI progresses non-blocking collectives only inside MPI calls:
// a transfer advances while some rank polls it (data parallelism polls its buckets from the
// gradient hooks), not on its own in the background.
// Each communicator is its own MPI communicator (the world is a duplicate of MPI_COMM_WORLD, so
// Trident's traffic never matches a program's own MPI calls), with MPI_ERRORS_RETURN, so an MPI
// error becomes a trident::Error naming the MPI message. See NOTE [Half reductions] in the .cpp
// for f16 and bf16.
#pragma once

#include <memory>

#include "parallel/comm/communicator.h"

namespace trident::parallel::comm {

// The MPI world (initializes MPI when needed, mpi_env.h). Throws in a build without MPI.
std::shared_ptr<Communicator> make_mpi_world(const CommOptions& options);

}  // namespace trident::parallel::comm
