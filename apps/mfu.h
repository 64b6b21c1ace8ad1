// Model FLOPs utilization (MFU) for the training programs' progress line and metrics: the model
// FLOPs a second of training does, over the GPU's peak dense FLOP/s for the run's precision.
//
// NOTE [MFU]: model FLOPs per token of a transformer, as the PaLM paper (Chowdhery et al. 2022,
// appendix B) and llm.c count them: 6 N for the forward and backward matrix products of N
// parameters (2 N forward, 4 N backward; llm.c counts all N, embeddings included, and so do
// we), plus 12 L T d for the attention scores and their weighted sum (L layers, T positions of
// context, width d; 6 L T d forward and backward, doubled because QK^T and PV are two products).
// "Model" FLOPs: recomputation, the optimizer and element-wise work are not counted, and the
// causal mask's skipped half is counted, as in the paper. The peak is the dense (no 2:4
// sparsity) tensor-core number for bf16/fp16 autocast, TF32's when f32 products are allowed to
// use TF32 (ops::set_matmul_allow_tf32), else plain FP32's (CUDA cores). Unknown GPUs get no
// MFU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace trident::apps {

// 6 N + 12 L T d (NOTE [MFU]).
double transformer_flops_per_token(int64_t parameters, int64_t layers, int64_t context, int64_t width);

// A GPU's peak dense FLOP/s, from the table in mfu.cpp.
struct PeakFlops {
  std::string gpu;  // the table's name for it, e.g. "H100/H200 SXM"
  double bf16 = 0, tf32 = 0, fp32 = 0;
};
// The table's entry for a device name as the CUDA runtime gives it ("NVIDIA H200") and its
// compute capability; nullopt when the GPU is not in the table.
std::optional<PeakFlops> peak_flops(const std::string& device_name, int cc_major, int cc_minor);
// The peak for a run: --precision bf16/fp16 -> bf16; fp32 -> tf32 when `tf32`, else fp32.
double peak_for(const PeakFlops& p, const std::string& precision, bool tf32);

}  // namespace trident::apps
