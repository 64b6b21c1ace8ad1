#include "apps/mfu.h"

#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/device_info.h"
#include "core/error.h"
#include "models/bert.h"
#include "models/gpt2.h"

namespace trident::apps {

// ---- Model FLOPs ----

double training_flops(const FlopModel& m, int64_t sequences, int64_t positions, int64_t predictions) {
  TRIDENT_CHECK(sequences >= 0 && positions >= 0 && predictions >= 0 && predictions <= sequences * positions,
                "training_flops: sequences ", sequences, ", positions ", positions, " and predictions ", predictions,
                " must be >= 0, predictions at most sequences x positions");
  const double S = static_cast<double>(sequences), T = static_cast<double>(positions);
  const double params = static_cast<double>(m.per_position) * S * T + static_cast<double>(m.per_sequence) * S +
                        static_cast<double>(m.per_prediction) * static_cast<double>(predictions);
  const double attention = 12.0 * static_cast<double>(m.layers) * T * static_cast<double>(m.width) * S * T;
  return 6.0 * params + attention;
}

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

FlopModel gpt2_flop_model(const models::GPT2LMHeadModel& model) {
  FlopModel m;
  m.layers = model.config().n_layer;
  m.width = model.config().n_embd;
  for (const auto& [name, p] : model.named_parameters()) {
    // wpe is looked up; wte is looked up too, but it is also the output layer, run at every position.
    if (name == "transformer.wpe.weight")
      m.not_counted += p.numel();
    else if (starts_with(name, "transformer."))
      m.per_position += p.numel();
    else
      TRIDENT_FAIL("gpt2_flop_model: parameter '", name, "' is not in NOTE [MFU]'s classification");
  }
  return m;
}

FlopModel bert_flop_model(const models::BertForPreTraining& model) {
  FlopModel m;
  m.layers = model.config().num_hidden_layers;
  m.width = model.config().hidden_size;
  for (const auto& [name, p] : model.named_parameters()) {
    if (starts_with(name, "bert.encoder.") || starts_with(name, "bert.embeddings.LayerNorm."))
      m.per_position += p.numel();
    else if (starts_with(name, "bert.pooler.") || starts_with(name, "cls.seq_relationship."))
      m.per_sequence += p.numel();
    else if (starts_with(name, "cls.predictions.") || name == "bert.embeddings.word_embeddings.weight")
      m.per_prediction += p.numel();  // the transform, the decoder's bias, the tied decoder
    else if (starts_with(name, "bert.embeddings.position_embeddings.") || starts_with(name, "bert.embeddings.token_type_embeddings."))
      m.not_counted += p.numel();
    else
      TRIDENT_FAIL("bert_flop_model: parameter '", name, "' is not in NOTE [MFU]'s classification");
  }
  return m;
}

// ---- Peak FLOP/s ----

namespace {

struct Entry {
  const char* model;    // a word of the runtime's device name, e.g. "H100"
  const char* variant;  // another word it must have ("PCIe"), or nullptr; the first match wins
  int cc_major, cc_minor;
  PeakFlops peak;
};

// Dense peak FLOP/s (no 2:4 sparsity) from NVIDIA's data sheets; where a sheet gives only the
// sparse tensor-core number (marked * there), half of it. SMs: the full product's count.
//   A100 (SXM4 and PCIe, 40 and 80 GB), "NVIDIA A100 Tensor Core GPU" data sheet: BF16/FP16 312,
//     TF32 156, FP32 19.5; 108 SMs.
//   H100 SXM, "NVIDIA H100 Tensor Core GPU" data sheet: BF16/FP16 1979*, TF32 989*, FP32 67
//     (989.4, 494.7 and 66.9 unrounded, at 132 SMs and the 1830 MHz tensor-core boost clock the
//     H100 white paper's table uses); PCIe column: BF16 1513*, TF32 756*, FP32 51 (51.2); 114 SMs;
//     NVL column (per GPU): BF16 1671*, TF32 835*, FP32 60; 132 SMs.
//   H200 SXM and NVL, "NVIDIA H200 Tensor Core GPU" data sheet: SXM as the H100 SXM (the same
//     GH100 chip and clocks), NVL BF16 1671*, TF32 835*, FP32 60; 132 SMs. GH200 (the Grace
//     Hopper superchip's GPU), "NVIDIA GH200 Grace Hopper Superchip" data sheet: as the H100 SXM.
//   L40S, "NVIDIA L40S" data sheet: BF16/FP16 362.05 (733*), TF32 183 (366*), FP32 91.6; 142 SMs.
//   L4, "NVIDIA L4 Tensor Core GPU" data sheet: BF16/FP16 242*, TF32 120*, FP32 30.3; 58 SMs.
// Not here (so no MFU without TRIDENT_PEAK_TFLOPS): other GPUs, including the H800, H20 and L40
// whose numbers differ.
constexpr double T = 1e12;
const std::array<Entry, 9> kTable{{
    {"A100", nullptr, 8, 0, {"A100", 108, 312.0 * T, 156.0 * T, 19.5 * T}},
    {"H100", "PCIe", 9, 0, {"H100 PCIe", 114, 756.5 * T, 378.0 * T, 51.2 * T}},
    {"H100", "NVL", 9, 0, {"H100 NVL", 132, 835.5 * T, 417.5 * T, 60.0 * T}},
    {"H100", nullptr, 9, 0, {"H100 SXM", 132, 989.4 * T, 494.7 * T, 66.9 * T}},
    {"H200", "NVL", 9, 0, {"H200 NVL", 132, 835.5 * T, 417.5 * T, 60.0 * T}},
    {"H200", nullptr, 9, 0, {"H200 SXM", 132, 989.4 * T, 494.7 * T, 66.9 * T}},
    {"GH200", nullptr, 9, 0, {"GH200", 132, 989.4 * T, 494.7 * T, 66.9 * T}},
    {"L40S", nullptr, 8, 9, {"L40S", 142, 362.05 * T, 183.0 * T, 91.6 * T}},
    {"L4", nullptr, 8, 9, {"L4", 58, 121.0 * T, 60.0 * T, 30.3 * T}},
}};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> words(const std::string& name) {
  std::vector<std::string> out;
  std::string w;
  for (char c : name) {
    if (c == ' ' || c == '-') {
      if (!w.empty()) out.push_back(lower(w));
      w.clear();
    } else {
      w += c;
    }
  }
  if (!w.empty()) out.push_back(lower(w));
  return out;
}

bool has_word(const std::vector<std::string>& ws, const char* word) {
  const std::string w = lower(word);
  for (const std::string& x : ws)
    if (x == w) return true;
  return false;
}

std::string tflops_text(double flops) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", flops / T);
  return buf;
}

}  // namespace

std::optional<PeakFlops> peak_flops(const std::string& device_name, int cc_major, int cc_minor) {
  const std::vector<std::string> ws = words(device_name);
  for (const Entry& e : kTable) {
    if (has_word(ws, e.model) && (e.variant == nullptr || has_word(ws, e.variant)))
      return cc_major == e.cc_major && cc_minor == e.cc_minor ? std::optional<PeakFlops>(e.peak) : std::nullopt;
  }
  return std::nullopt;
}

double peak_for(const PeakFlops& p, const std::string& precision, bool tf32) {
  if (precision == "bf16" || precision == "fp16") return p.bf16;
  return tf32 ? p.tf32 : p.fp32;
}

std::string peak_math(const std::string& precision, bool tf32) {
  if (precision == "bf16" || precision == "fp16") return "bf16/fp16";
  return tf32 ? "TF32" : "FP32";
}

Peak resolve_peak(const GpuDescription& gpu, const std::string& precision, bool tf32, double override_tflops,
                  const std::string& override_from) {
  const std::string math = peak_math(precision, tf32);
  if (override_tflops > 0) return {override_tflops * T, tflops_text(override_tflops * T) + " TFLOP/s from " + override_from};
  const std::optional<PeakFlops> p = peak_flops(gpu.name, gpu.cc_major, gpu.cc_minor);
  if (!p) return {0, std::string(kMfuUnknown) + ": '" + gpu.name + "' is not in apps/mfu.cpp's table"};
  double flops = peak_for(*p, precision, tf32);
  std::string source = tflops_text(flops) + " TFLOP/s, dense " + math + " of the " + p->gpu + " (NVIDIA data sheet)";
  // A MIG instance (or a cut-down part under a known name) has fewer SMs: its share of the chip.
  if (gpu.sms > 0 && gpu.sms < p->sms) {
    flops *= static_cast<double>(gpu.sms) / static_cast<double>(p->sms);
    source = tflops_text(flops) + " TFLOP/s, dense " + math + " of the " + p->gpu + " (NVIDIA data sheet) scaled to the " +
             std::to_string(gpu.sms) + " of its " + std::to_string(p->sms) + " SMs visible";
  }
  source += "; device '" + gpu.name + "', " + std::to_string(gpu.sms) + " SMs, " + std::to_string(gpu.clock_khz / 1000) +
            " MHz max clock";
  return {flops, source};
}

double parse_peak_tflops(const char* text, const std::string& what) {
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  TRIDENT_CHECK(end != text && *end == '\0' && errno == 0 && std::isfinite(v) && v > 0, what,
                " must be a positive number of TFLOP/s (the GPU's dense peak for the run's precision), got '", text, "'");
  return v;
}

Peak device_peak(int index, const std::string& precision, bool tf32, double flag_tflops) {
  const CudaDeviceInfo info = cuda_device_info(index);
  const GpuDescription gpu{info.name, info.major, info.minor, info.multiprocessors, info.clock_khz};
  if (flag_tflops > 0) return resolve_peak(gpu, precision, tf32, flag_tflops, "--peak-tflops");
  const double env = parse_peak_tflops(std::getenv("TRIDENT_PEAK_TFLOPS"), "TRIDENT_PEAK_TFLOPS");
  return resolve_peak(gpu, precision, tf32, env, "TRIDENT_PEAK_TFLOPS");
}

Peak run_peak(const Peak& per_gpu, int gpus) {
  TRIDENT_CHECK(gpus >= 1, "run_peak: ", gpus, " GPUs");
  if (gpus == 1 || !per_gpu.known()) return per_gpu;
  return {per_gpu.flops * gpus, std::to_string(gpus) + " x " + per_gpu.source};
}

std::string mfu_text(double flops_per_s, const Peak& peak) {
  if (!peak.known()) return kMfuUnknown;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * flops_per_s / peak.flops);
  return buf;
}

}  // namespace trident::apps
