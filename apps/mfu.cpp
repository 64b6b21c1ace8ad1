#include "apps/mfu.h"

#include <array>

namespace trident::apps {

double transformer_flops_per_token(int64_t parameters, int64_t layers, int64_t context, int64_t width) {
  return 6.0 * static_cast<double>(parameters) +
         12.0 * static_cast<double>(layers) * static_cast<double>(context) * static_cast<double>(width);
}

namespace {

struct Entry {
  const char* match;  // a substring of the runtime's device name; the first match wins
  int cc_major, cc_minor;
  PeakFlops peak;
};

// Dense peak FLOP/s (no sparsity), from NVIDIA's data sheets:
//   H100 and H200 SXM: "NVIDIA H100 Tensor Core GPU" and "NVIDIA H200 Tensor Core GPU" data sheets
//     (BF16/FP16 1979 TFLOP/s with sparsity, so 989.4 dense; TF32 494.7 dense; FP32 66.9).
//   H100 PCIe: the same H100 data sheet, PCIe column (BF16 756.5 dense, TF32 378, FP32 51.2).
//   H100 NVL and H200 NVL: their data-sheet columns (BF16 835.5 dense, TF32 417.5, FP32 60).
//   A100 (SXM4 and PCIe, 40 and 80 GB): "NVIDIA A100 Tensor Core GPU" data sheet (BF16 312,
//     TF32 156, FP32 19.5).
//   L40S: "NVIDIA L40S" data sheet (BF16 362.05 dense, TF32 183, FP32 91.6).
// More specific names come first ("H100 PCIe" before "H100").
constexpr double T = 1e12;
const std::array<Entry, 7> kTable{{
    {"H100 PCIe", 9, 0, {"H100 PCIe", 756.5 * T, 378.0 * T, 51.2 * T}},
    {"H100 NVL", 9, 0, {"H100 NVL", 835.5 * T, 417.5 * T, 60.0 * T}},
    {"H200 NVL", 9, 0, {"H200 NVL", 835.5 * T, 417.5 * T, 60.0 * T}},
    {"H100", 9, 0, {"H100/H200 SXM", 989.4 * T, 494.7 * T, 66.9 * T}},
    {"H200", 9, 0, {"H100/H200 SXM", 989.4 * T, 494.7 * T, 66.9 * T}},
    {"A100", 8, 0, {"A100", 312.0 * T, 156.0 * T, 19.5 * T}},
    {"L40S", 8, 9, {"L40S", 362.05 * T, 183.0 * T, 91.6 * T}},
}};

}  // namespace

std::optional<PeakFlops> peak_flops(const std::string& device_name, int cc_major, int cc_minor) {
  for (const Entry& e : kTable)
    if (device_name.find(e.match) != std::string::npos && cc_major == e.cc_major && cc_minor == e.cc_minor) return e.peak;
  return std::nullopt;
}

double peak_for(const PeakFlops& p, const std::string& precision, bool tf32) {
  if (precision == "bf16" || precision == "fp16") return p.bf16;
  return tf32 ? p.tf32 : p.fp32;
}

}  // namespace trident::apps
