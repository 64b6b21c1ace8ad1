// Gradient clipping over a list of parameters, as torch.nn.utils (PyTorch 1.13).
//
// clip_grad_norm_: the total norm is the p-norm of all gradients taken together (the norm of
// the per-parameter norms); p = inf is the largest |g|. Every gradient is then multiplied in
// place by min(1, max_norm / (total + 1e-6)), so the clipped norm lands just under max_norm.
// Parameters without a gradient are skipped; with none at all the result is 0 and nothing is
// touched. A non-finite total (an overflowed f16 step) is handled as PyTorch does: an infinite
// total scales the gradients by 0 (so infinite elements become NaN), a NaN total by NaN; with
// error_if_nonfinite it throws instead, before touching anything.
// Gradients of any floating dtype; each one's norm accumulates in f64 (NOTE [Accumulation]) and
// is rounded to its dtype, and those are combined in f64.
// Errors: norm_type not > 0 (inf allowed), max_norm negative or NaN.
// CUDA: with norm_type 2 and all gradients contiguous f32/f64 on one CUDA device, the norm, the
// coefficient and the scaling are a few multi-tensor launches (NOTE [Multi-tensor launches]);
// returning the norm as a double then costs one synchronization (error_if_nonfinite reads it
// before scaling: still one). clip_grad_norm_on_device_ below makes none. Other CUDA cases
// (another norm_type, several devices, f16/bf16 gradients) take one norm per gradient, each read
// on the host.
//
// clip_grad_value_: clamps every gradient element into [-clip_value, clip_value] in place.
// Errors: clip_value negative or NaN.
#pragma once

#include <limits>
#include <vector>

#include "core/tensor.h"

namespace trident::nn {

// Returns the total norm (before clipping).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// clip_grad_norm_(params, max_norm, 2) without a synchronization: the total norm comes back as
// an f64 scalar tensor on the gradients' device, and the clip coefficient is computed and
// applied on the device. Where the multi-tensor path does not apply (CPU gradients, the other
// cases above) it is clip_grad_norm_'s value in an f64 CPU scalar. With no gradient: a CPU 0.
// Errors: max_norm negative or NaN.
Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& params, double max_norm);

// The second half of clip_grad_norm_, for callers that compute the total norm themselves (over
// tensor-parallel shards or pipeline stages): multiplies every gradient in place by
// min(1, max_norm / (total_norm + 1e-6)), with the same rule for a NaN or infinite total
// (PyTorch 2's clip_grads_with_norm_). Errors: max_norm negative or NaN.
void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm);

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

}  // namespace trident::nn
