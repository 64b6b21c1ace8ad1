// Multi-tensor CUDA launches: the limits of one launch, visible to host code and tests (the
// launcher itself is nn/optim/multi_tensor.cuh, for .cu files).
//
// NOTE [Multi-tensor launches]: the CUDA optimizer updates (nn/optim/cuda_kernels.h), the
// GradScaler's unscale and clip_grad_norm_'s norm and scaling work on lists of tensors, not one
// tensor per launch. K operand lists (for Adam: params, grads, exp_avg, exp_avg_sq) of n tensors
// each, tensor i of every list having the same element count, are cut into chunks of
// kMultiTensorChunk elements; each CUDA block handles one (tensor, chunk) pair. One launch takes
// its tensors' K pointers and element counts and a table of up to kMultiTensorMaxBlocks
// (tensor, chunk) pairs in a struct passed by value as the kernel argument (no host-to-device
// copy, no allocation). The host walks the tensors in order, appending each tensor and then its
// chunks; it launches when the block table is full or the struct holds
// multi_tensor_max_tensors(K) tensors and the last one is complete, so every launch but the last
// of a list is full. A tensor whose chunks do not all fit continues as the first tensor of the
// next launch. The struct stays under the 4 KB kernel-parameter limit that every CUDA version and
// GPU accepts (static_assert in the .cuh); the 32 KB limit of CUDA 12.1+ on Volta+ would allow
// larger structs, but 320 blocks of 512 threads already fill most of an H100/H200, so the few
// extra launches cost little and the code runs on any toolkit.
// Each launch also carries, per tensor, its index in the lists and the index of its first chunk
// among all chunks of the lists (chunk_base), so a kernel can write one partial result per chunk
// (LAMB's norms, clip_grad_norm_'s sum of squares) to a fixed place: totals are then combined in
// a fixed order, bit-identical from run to run (NOTE [Deterministic device totals] in
// ops/cuda/block_reduce.cuh), with no atomics.
// Host code groups the tensors by device and dtype (and by whatever changes the per-element
// functor, such as the step count) before calling the launcher; zero-element tensors are skipped.
#pragma once

#include <cstdint>

namespace trident::nn::optim {

inline constexpr int64_t kMultiTensorChunk = int64_t{1} << 16;
inline constexpr int kMultiTensorMaxBlocks = 320;
inline constexpr int kMultiTensorThreads = 512;

// Tensors per launch for `lists` operand lists (1 to 5): what fits next to the block table.
constexpr int multi_tensor_max_tensors(int lists) {
  return lists <= 1 ? 90 : lists == 2 ? 64 : lists == 3 ? 48 : lists == 4 ? 40 : 36;
}

// Multi-tensor kernels launched by this process so far (all devices, all threads): tests check
// that a step costs the launches the limits above predict.
int64_t multi_tensor_launches();

}  // namespace trident::nn::optim
