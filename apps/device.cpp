#include "apps/device.h"

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace trident::apps {

Device resolve_device(const std::string& value, bool model_parallel, const std::string& flag) {
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
  // NOTE [Device in the apps]: data parallelism all-reduces CUDA gradients over NCCL; the
  // pipeline, tensor-parallel and ZeRO paths still communicate over MPI with CPU tensors.
  TRIDENT_CHECK(!model_parallel, flag, " ", value,
                " with --pp/--tp > 1 or --zero: those parallel paths use the CPU communicators (MPI); NCCL is wired "
                "into plain data parallelism (--dp) only so far. Run --dp alone on GPUs, or this run with ",
                flag, " cpu");
  return d;
}

Device rank_device(Device requested, const std::string& value, int world_rank) {
  if (requested.is_cpu() || value != "cuda") return requested;
  int local = world_rank;
  if (const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) local = std::atoi(env);
  return Device::cuda(local % cuda_device_count());
}

std::string describe_device(Device d) {
  if (d.is_cpu()) return "cpu";
  const CudaDeviceInfo info = cuda_device_info(d.index);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (%s, compute capability %d.%d, %.0f GiB)", d.str().c_str(), info.name.c_str(),
                info.major, info.minor, static_cast<double>(info.total_memory) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

models::Batch to_device(const models::Batch& batch, Device d) {
  models::Batch out;
  for (const auto& [name, t] : batch.tensors()) out.set(name, t.device() == d ? t : t.to(d));
  return out;
}

}  // namespace trident::apps
