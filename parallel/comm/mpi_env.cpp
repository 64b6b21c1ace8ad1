#include "parallel/comm/mpi_env.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/error.h"
#include "trident_config.h"

#if TRIDENT_HAVE_MPI
#include <mpi.h>
#endif

namespace trident::parallel::comm {
namespace {

std::mutex g_mutex;
[[maybe_unused]] bool g_we_initialized = false;  // used only with MPI (TRIDENT_HAVE_MPI)
bool g_timed_out = false;
std::string g_timeout_what;

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

#if TRIDENT_HAVE_MPI
// NOTE [Ending after a timeout]
void exit_handler() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_timed_out) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr,
                 "trident: world rank %d exits after a communication timed out (%s); ending the job with "
                 "MPI_Abort, since MPI_Finalize would wait for the rank that never joined\n",
                 rank, g_timeout_what.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (g_we_initialized) MPI_Finalize();
}
#endif

}  // namespace

bool mpi_built() { return TRIDENT_HAVE_MPI != 0; }

bool launched_by_mpi_launcher() { return launcher_world_size() > 0 || env("PMIX_RANK") || env("PMI_RANK"); }

int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* v = env(name)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return 0;
}

bool mpi_initialized() {
#if TRIDENT_HAVE_MPI
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
#else
  return false;
#endif
}

void ensure_mpi_initialized() {
#if TRIDENT_HAVE_MPI
  std::lock_guard<std::mutex> lock(g_mutex);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  TRIDENT_CHECK(!fin, "MPI was already finalized in this process; no communicator can be created");
  if (!init) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    TRIDENT_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed with code ", rc);
    g_we_initialized = true;
  }
  static bool registered = false;
  if (!registered) {
    std::atexit(exit_handler);
    registered = true;
  }
#else
  TRIDENT_FAIL("this build of Trident has no MPI (TRIDENT_MPI found no MPI): install OpenMPI (libopenmpi-dev) and "
               "reconfigure");
#endif
}

bool mpi_node_local_rank(int& local_rank, int& local_size) {
#if TRIDENT_HAVE_MPI
  if (!mpi_initialized()) return false;
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS ||
      node == MPI_COMM_NULL)
    return false;
  int r = 0, n = 0;
  const bool ok = MPI_Comm_rank(node, &r) == MPI_SUCCESS && MPI_Comm_size(node, &n) == MPI_SUCCESS;
  MPI_Comm_free(&node);
  if (!ok) return false;
  local_rank = r;
  local_size = n;
  return true;
#else
  (void)local_rank;
  (void)local_size;
  return false;
#endif
}

void note_comm_timeout(const std::string& description) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_timed_out) g_timeout_what = description;
  g_timed_out = true;
}

bool comm_timed_out() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_timed_out;
}

void abort_job(int code, const std::string& why) {
  std::fprintf(stderr, "trident: ending the job: %s\n", why.c_str());
  std::fflush(stderr);
#if TRIDENT_HAVE_MPI
  if (mpi_initialized()) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

}  // namespace trident::parallel::comm
