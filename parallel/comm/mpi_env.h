// The MPI environment: whether this process was started by an MPI launcher, MPI's
// initialization, and how the process ends. This header does not include mpi.h.
//
// NOTE [Ending after a timeout]: when an operation times out (NOTE [Work and timeouts]) some rank
// of the group is missing: it skipped the collective, hangs, or died. MPI cannot cancel the
// operation, and MPI_Finalize would wait for that rank (OpenMPI's finalize synchronizes every
// process of the job), as would mpirun, so a job with a hung rank would never end. Therefore a
// process that saw a timeout ends the whole job when it exits: the exit handler calls
// MPI_Abort(MPI_COMM_WORLD, 1) instead of MPI_Finalize, and mpirun kills every rank, the hung one
// included, and reports the failure. An uncaught CommTimeout ends the process (std::terminate)
// and mpirun ends the job the same way. abort_job() does it at once. Without a timeout the exit
// handler finalizes MPI normally (when Trident initialized it).
#pragma once

#include <string>

namespace trident::parallel::comm {

// Whether this build has the MPI backend (TRIDENT_HAVE_MPI).
bool mpi_built();
// Whether an MPI launcher started this process (mpirun/mpiexec/srun: OpenMPI's, PMIx's or PMI's
// environment variables), and the world size it announces (0 when unknown).
bool launched_by_mpi_launcher();
int launcher_world_size();
// Initializes MPI (MPI_THREAD_SERIALIZED) unless the program already did, and registers the
// exit handler of NOTE [Ending after a timeout]. Throws if this build has no MPI.
void ensure_mpi_initialized();
bool mpi_initialized();
// This process's rank among the MPI processes of MPI_COMM_WORLD on its node, and their number
// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED, portable across MPI implementations and
// launchers), when MPI is initialized: true and both set; false (nothing set) otherwise. A
// collective over MPI_COMM_WORLD: every rank must call it.
bool mpi_node_local_rank(int& local_rank, int& local_size);
// Records a timeout (work.cpp calls it): this process will end the job at exit.
void note_comm_timeout(const std::string& description);
bool comm_timed_out();
// Ends every rank of the job now: prints `why` to stderr, then MPI_Abort on the world (or
// std::_Exit(code) in a process without MPI).
[[noreturn]] void abort_job(int code, const std::string& why);

}  // namespace trident::parallel::comm
