// The NCCL backend (NOTE [NCCL backend], communicator.h): CUDA tensors over NCCL. Built only when
// TRIDENT_HAVE_CUDA. It compiles; no test has run it on a GPU yet.
//
// One ncclComm_t per group, created from a bootstrap communicator of the same ranks (MPI, or
// Local for a single process): rank 0 calls ncclGetUniqueId and broadcasts the id over the
// bootstrap group; every rank then creates its non-blocking communicator on its current CUDA device
// (ncclCommInitRankConfig, polled with the communicator's timeout: NOTE [NCCL non-blocking] in
// the .cpp, so a rank that never joins makes the others throw CommTimeout instead of hanging).
// Destroying the communicator waits for its operations, then ncclCommFinalize + ncclCommDestroy
// (ncclCommAbort after a timeout or an error). split()
// splits the bootstrap and builds the child's NCCL communicator the same way, so a mesh built on
// an NCCL world gets NCCL tp/pp/dp groups.
// Operations run on the communicator's own CUDA stream, after an event recorded on the device's
// current stream (cuda::current_stream, where the op kernels launch), and record a completion
// event; Work::test() is cudaEventQuery, Work::wait() polls it (so a wait can time
// out), and on a timeout the communicator is aborted with ncclCommAbort.
// Average is ncclAvg; f16 and bf16 reduce natively. NCCL has no all_gatherv or reduce_scatterv:
// uneven ones are a group of ncclBroadcast / ncclReduce calls, one per rank.
#pragma once

#include <cstdint>
#include <memory>

#include "parallel/comm/communicator.h"

namespace trident::parallel::comm {

// Collective over `bootstrap`: an NCCL communicator of the same ranks, named options.name.
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap,
                                                     const CommOptions& options);

// NCCL communicators (ncclComm_t) of this process created and not yet destroyed or aborted: for
// tests and leak checks (a destroyed NcclCommunicator must bring it back down).
int64_t live_nccl_communicators();

}  // namespace trident::parallel::comm
