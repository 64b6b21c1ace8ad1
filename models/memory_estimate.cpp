#include "models/memory_estimate.h"

#include <cstdio>

namespace trident::models {

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string MemoryEstimate::str() const {
  return "parameters " + format_bytes(parameters) + " + gradients " + format_bytes(gradients) + " + optimizer " +
         format_bytes(optimizer) + " + activations " + format_bytes(activations) + " = " + format_bytes(total());
}

}  // namespace trident::models
