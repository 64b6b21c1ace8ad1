// CUDA kernels of the losses: the contracts of ops/cpu/loss.h, for tensors on a CUDA device in
// f32, f16 and bf16, computing in f32 (NOTE [CUDA dtypes]); the wrapper (ops/loss.cpp) has
// checked shapes, dtypes and target ranges. Differences from the CPU, all allowed by the
// wrapper (which casts with .to(dtype), a no-op then):
//   - the gradients (cross_entropy_backward, nll_loss_backward, bce_with_logits_backward) come
//     back in the input's dtype, not in f32: a [tokens, 50257] f32 gradient next to bf16 logits
//     would cost more memory than the logits themselves;
//   - loss sums accumulate per position in f32 and across positions in f64.
//
// Host values: the class losses' loss_sum and total_weight, squared_error_sum and
// first_invalid_target are host numbers by contract. Each is a deterministic two-stage device
// reduction and one small copy back, which synchronizes the stream (NOTE [Deterministic device
// totals] in ops/cuda/block_reduce.cuh); the backward passes never synchronize.
//
// cross_entropy: one block (C >= 1024) or one warp per position; each thread keeps an online
// max and sum of e^(x - max) over its classes in f32, merged across the threads; nothing of size
// [n, C] is written in forward. Positions with inner > 1 and fewer than 1024 classes get one
// thread each (adjacent threads read adjacent positions: coalesced).
#pragma once

#include <utility>

#include "core/tensor.h"
#include "ops/cpu/loss.h"

namespace trident::cuda {

using cpu::ClassLossArgs;
using cpu::CrossEntropyForward;
using cpu::NllLossForward;

int64_t first_invalid_target(const Tensor& target, int64_t classes, int64_t ignore_index);

CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                          const ClassLossArgs& args);
Tensor cross_entropy_backward(const Tensor& g, double scale, const Tensor& logits, const Tensor& target,
                              const Tensor& weight, const Tensor& row_max, const Tensor& row_logsum,
                              const ClassLossArgs& args);

NllLossForward nll_loss_forward(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                                const ClassLossArgs& args);
Tensor nll_loss_backward(const Tensor& g, double scale, const Tensor& target, const Tensor& weight,
                         const ClassLossArgs& args, DType dtype);

Tensor bce_with_logits(const Tensor& x, const Tensor& y, const Tensor& pos_weight);
std::pair<Tensor, Tensor> bce_with_logits_backward(const Tensor& g, double scale, const Tensor& x, const Tensor& y,
                                                   const Tensor& pos_weight, bool need_x, bool need_y);

Tensor squared_error(const Tensor& a, const Tensor& b);
double squared_error_sum(const Tensor& a, const Tensor& b);

}  // namespace trident::cuda
