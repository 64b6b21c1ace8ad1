#include "apps/device.h"

#include <cstdio>

#include "core/error.h"

namespace trident::apps {

Device resolve_device(const std::string& value, bool parallel, const std::string& flag) {
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
  // NOTE [Device in the apps]: the parallel runs communicate over MPI with CPU tensors.
  TRIDENT_CHECK(!parallel, flag, " ", value,
                " with --dp/--pp/--tp > 1: the parallel training runs use the CPU communicators (MPI); the NCCL "
                "communicator is not wired into them yet. Run one process on the GPU, or the parallel run with ",
                flag, " cpu");
  return d;
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
