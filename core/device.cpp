#include "core/device.h"
#include "core/device_info.h"

#include <charconv>

#include "core/error.h"
#include "trident_config.h"

namespace trident {

Device Device::parse(std::string_view s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.starts_with("cuda:")) {
    int idx = -1;
    auto rest = s.substr(5);
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), idx);
    TRIDENT_CHECK(ec == std::errc() && p == rest.data() + rest.size() && idx >= 0,
                  "bad device string '", std::string(s), "' (expected cpu, cuda or cuda:N)");
    return cuda(idx);
  }
  TRIDENT_FAIL("bad device string '", std::string(s), "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }

bool cuda_built() { return TRIDENT_HAVE_CUDA; }

#if !TRIDENT_HAVE_CUDA
int cuda_device_count() { return 0; }
CudaDeviceInfo cuda_device_info(int index) {
  TRIDENT_FAIL("cuda_device_info(", index, "): this build of Trident has no CUDA backend");
}
#endif

}  // namespace trident
