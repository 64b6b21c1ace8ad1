// Model FLOPs utilization (MFU) for the training programs' progress line and metrics and for the
// GPU benchmarks: the model FLOPs a second of training does, over the GPU's peak dense FLOP/s for
// the run's precision. Library trident_mfu (apps/CMakeLists.txt), shared by apps/ and benchmarks/.
//
// NOTE [MFU]: model FLOPs of a training step, the PaLM paper's accounting (Chowdhery et al. 2022,
// appendix B; nanoGPT's estimate_mfu and llm.c use the same): 6 FLOPs per parameter for each
// position whose products go through it (2 in the forward, 4 in the backward: the input's and the
// weight's gradients), plus 12 L T d per position for attention (L layers, T positions of context,
// width d: the scores QK^T and the weighted sum PV, 2 T d each forward per position and layer,
// times 3 for the backward). Megatron-LM's formula (Narayanan et al. 2021, appendix: 96 B s l h^2
// (1 + s / 6h + V / 16 l h) with activation recomputation, so 72 B s l h^2 (1 + s / 6h + V / 12 l h)
// without it) counts the same products: 24 h^2 weights per layer and the V h output layer.
// "Model" FLOPs: recomputation, the optimizer and element-wise work are not counted; biases and
// LayerNorm parameters are (as in 6 N); the causal mask's skipped half is counted, as in PaLM.
// Only what the model computes is counted (FlopModel below):
//   - a table that is only looked up (GPT-2's wpe, BERT's position and segment embeddings) is
//     not a product: left out (nanoGPT's get_num_params leaves out wpe the same way). A tied
//     output layer (GPT-2's wte, BERT's word embeddings) is counted where its GEMM runs;
//   - GPT-2's output layer runs at every position: per position;
//   - BERT's MLM head (transform and tied decoder) runs only at the masked positions
//     (models/bert.h: index_select before the head), and its pooler and NSP head once per
//     sequence: counted there, not at every position (counting the decoder at every position
//     made BERT-base's MFU about 23% high at T = 128 with 20 predictions).
//   - a convolutional network (AmoebaNet) has no "per position" parameters: its model FLOPs are
//     6 per multiply-add of its convolutions and linear layers per image (NOTE [AmoebaNet
//     multiply-adds], models/amoebanet_builder.h; the auxiliary head's included in training).
// The peak is the dense (no 2:4 sparsity) tensor-core number for bf16/fp16 autocast, TF32's when
// f32 products may use TF32 (ops::set_matmul_allow_tf32), else plain FP32's (CUDA cores), from
// NVIDIA's data sheets (mfu.cpp), scaled down to the SMs the runtime reports when that is fewer
// than the full chip's (a MIG instance). TRIDENT_PEAK_TFLOPS (or --peak-tflops in the apps)
// overrides it; a GPU not in the table and without an override gets no MFU: kMfuUnknown. A run
// over several GPUs (one per rank) divides the whole run's model FLOPs by the peak times the
// number of GPUs (run_peak).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace trident::models {
class GPT2LMHeadModel;
class BertForPreTraining;
}  // namespace trident::models

namespace trident::apps {

// ---- Model FLOPs ----

// A transformer's parameters by where their products run (NOTE [MFU]).
struct FlopModel {
  int64_t layers = 0, width = 0;    // for the attention term 12 L T d
  int64_t per_position = 0;         // every position's products go through them
  int64_t per_sequence = 0;         // once per sequence (BERT's pooler and NSP head)
  int64_t per_prediction = 0;       // at the predicted positions only (BERT's MLM head, its tied decoder)
  int64_t not_counted = 0;          // looked up, never multiplied (position and segment embeddings)
};

// Model FLOPs of one training step (forward and backward) over `sequences` sequences of
// `positions` positions (padding included: it is computed), `predictions` of them predicted:
//   6 (per_position S T + per_sequence S + per_prediction M) + 12 L T d S T.
// Errors: a negative count, or predictions > S T.
double training_flops(const FlopModel& m, int64_t sequences, int64_t positions, int64_t predictions);

// The models' parameters classified by their names (models/gpt2.h, models/bert.h); a parameter
// of an unknown name is an error (a model change must say where its products run).
FlopModel gpt2_flop_model(const models::GPT2LMHeadModel& model);
FlopModel bert_flop_model(const models::BertForPreTraining& model);

// ---- Peak FLOP/s ----

// A GPU's peak dense FLOP/s (the table in mfu.cpp) and its full chip's SM count.
struct PeakFlops {
  std::string gpu;  // the table's name for it, e.g. "H200 SXM"
  int sms = 0;
  double bf16 = 0, tf32 = 0, fp32 = 0;  // FLOP/s
};
// The table's entry for a device name as cudaGetDeviceProperties gives it ("NVIDIA H200",
// "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L4") and its compute capability;
// nullopt when the GPU is not in the table. Names are matched by whole words (split at spaces and
// '-'), case-insensitively, so that "L4" is not "L40S".
std::optional<PeakFlops> peak_flops(const std::string& device_name, int cc_major, int cc_minor);
// The peak for a run: precision bf16/fp16 -> bf16; fp32 -> tf32 when `tf32`, else fp32.
double peak_for(const PeakFlops& p, const std::string& precision, bool tf32);
// "bf16/fp16", "TF32" or "FP32": the kind of peak peak_for picks.
std::string peak_math(const std::string& precision, bool tf32);

// What the runtime says about a GPU (cudaGetDeviceProperties and cudaDevAttrClockRate).
struct GpuDescription {
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sms = 0;        // multiprocessors visible (fewer than the chip's in a MIG instance); 0: unknown
  int clock_khz = 0;  // the maximum SM clock (reported only: the data sheets' peaks are NVIDIA's)
};

// The peak an MFU is computed against.
struct Peak {
  double flops = 0;    // dense FLOP/s; 0: unknown (no MFU)
  std::string source;  // which peak and where it came from, for the output
  bool known() const { return flops > 0; }
};

// What an MFU prints when the peak is unknown.
inline constexpr const char* kMfuUnknown = "n/a (unknown peak; set TRIDENT_PEAK_TFLOPS)";

// Pure: `override_tflops` > 0 (from `override_from`, e.g. "--peak-tflops") wins; else the table's
// entry for the GPU, scaled by sms / the chip's SMs when fewer are visible; else unknown.
Peak resolve_peak(const GpuDescription& gpu, const std::string& precision, bool tf32, double override_tflops = 0,
                  const std::string& override_from = "");
// A peak in TFLOP/s given as text (TRIDENT_PEAK_TFLOPS's value, named `what` in errors): 0 when
// null or empty; an error when not a positive finite number.
double parse_peak_tflops(const char* text, const std::string& what);
// The peak for CUDA device `index`: `flag_tflops` (--peak-tflops; 0: unset), else
// TRIDENT_PEAK_TFLOPS, else the table. Errors: no such device, a bad TRIDENT_PEAK_TFLOPS.
Peak device_peak(int index, const std::string& precision, bool tf32, double flag_tflops = 0);

// The peak of a run over `gpus` GPUs of `per_gpu`'s kind (the ranks of --dp x --pp x --tp, one
// GPU each): an MFU is the whole run's model FLOPs (every dp replica's) over every GPU's peak, so
// that splitting the model over more GPUs does not read as a higher utilization. gpus >= 1.
Peak run_peak(const Peak& per_gpu, int gpus);

// "41.3%" (of flops_per_s over the peak), or kMfuUnknown.
std::string mfu_text(double flops_per_s, const Peak& peak);

}  // namespace trident::apps
