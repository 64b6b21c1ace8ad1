#include "apps/device.h"

#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "parallel/comm/mpi_env.h"

namespace trident::apps {

Device resolve_device(const std::string& value, const std::string& flag) {
  Device d;
  try {
    d = Device::parse(value);
  } catch (const Error&) {
    TRIDENT_FAIL(flag, " must be cpu, cuda or cuda:N, got '", value, "'");
  }
  if (d.is_cpu()) return d;
  TRIDENT_CHECK(cuda_built(), flag, " ", value,
                ": this build of Trident has no CUDA backend (built without CUDA: configure with -DTRIDENT_CUDA=ON "
                "on a machine with the CUDA toolkit); use ",
                flag, " cpu");
  const int n = cuda_device_count();
  TRIDENT_CHECK(n > 0, flag, " ", value,
                ": no CUDA device found (the CUDA runtime sees none: no GPU, no driver, or CUDA_VISIBLE_DEVICES hides "
                "them); use ",
                flag, " cpu");
  TRIDENT_CHECK(d.index < n, flag, " ", value, ": there is no CUDA device ", d.index, " (", n, " visible: cuda:0",
                n > 1 ? " to cuda:" + std::to_string(n - 1) : std::string(), ")");
  return d;
}

namespace {

// A non-negative integer from the environment variable `name`, or -1 when it is unset.
int env_index(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  TRIDENT_CHECK(*v != '\0' && *end == '\0' && n >= 0 && n <= 1 << 20, name, " must be a non-negative integer, got \"",
                v, "\"");
  return static_cast<int>(n);
}

}  // namespace

LocalRank local_rank_from_env(int world_rank) {
  struct Source {
    const char* rank;
    const char* size;  // nullptr: the launcher does not export it
  };
  for (const Source& s : {Source{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                          Source{"MPI_LOCALRANKID", "MPI_LOCALNRANKS"}, Source{"SLURM_LOCALID", nullptr}}) {
    const int r = env_index(s.rank);
    if (r < 0) continue;
    const int n = s.size ? env_index(s.size) : -1;
    TRIDENT_CHECK(n < 0 || r < n, s.rank, "=", r, " is not below ", s.size, "=", n);
    return {r, n < 0 ? 0 : n, s.rank};
  }
  return {world_rank, 0, "world rank"};
}

LocalRank node_local_rank(int world_rank) {
  LocalRank l;
  if (parallel::comm::mpi_node_local_rank(l.rank, l.size)) {
    l.source = "MPI_COMM_TYPE_SHARED";
    return l;
  }
  return local_rank_from_env(world_rank);
}

Device map_rank_device(Device requested, bool has_index, const LocalRank& local, int device_count,
                       const std::string& flag) {
  if (requested.is_cpu()) return requested;
  TRIDENT_ASSERT(device_count > 0, "map_rank_device with no visible GPU (resolve_device checks that)");
  const std::string who = detail::str(local.size, " ranks on this node (this one is local rank ", local.rank, ", from ",
                                      local.source, ")");
  if (has_index) {
    TRIDENT_CHECK(local.size <= 1 || device_count == 1, flag, " ", requested.str(), " with ", who,
                  " would put every one of them on ", requested.str(),
                  ", and NCCL cannot run two ranks of a group on one GPU. Use ", flag, " cuda (local rank r takes cuda:r ",
                  "mod ", device_count, "), or give each rank its own GPU with CUDA_VISIBLE_DEVICES and ", flag, " cuda:0");
    return requested;
  }
  TRIDENT_CHECK(local.size <= device_count || device_count == 1, flag, " cuda with ", who, " but ", device_count,
                " visible GPUs: ranks would share a GPU, which NCCL does not support. Run at most ", device_count,
                " ranks per node");
  return Device::cuda(local.rank % device_count);
}

Device rank_device(Device requested, const std::string& value, int world_rank) {
  if (requested.is_cpu()) return requested;
  return map_rank_device(requested, value != "cuda", node_local_rank(world_rank), cuda_device_count());
}

std::string describe_device(Device d) {
  if (d.is_cpu()) return "cpu";
  const CudaDeviceInfo info = cuda_device_info(d.index);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (%s, compute capability %d.%d, %.0f GiB)", d.str().c_str(), info.name.c_str(),
                info.major, info.minor, static_cast<double>(info.total_memory) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace trident::apps
