// CUDA kernels of layer norm and batch norm: the contracts of ops/cpu/norm.h, on tensors on a
// CUDA device in f32, f16 and bf16, computing and accumulating in f32 (NOTE [CUDA dtypes]).
// Inputs may have any layout (made contiguous first). One difference from the CPU kernels, which
// return everything in the compute dtype: y, dx, dw and db come back in x's dtype (written once,
// rounded once, as the CPU result after the wrapper's cast), so the wrapper's .to(dtype) is a
// no-op instead of a second pass over the activations; mean, rstd and var are f32 as on the CPU.
//
// NOTE [CUDA norm reductions]: every sum is taken in a fixed order that depends only on the
// shapes (per-thread strided sums, then warp shuffles and a shared-memory tree), never on
// atomics or timing, so a run repeats bit for bit. Layer norm: a row is reduced by a warp (cols
// < 1024) or a 256-thread block; dw and db, sums over rows per column, take two stages: a grid
// of (32-column tile, chunk of rows) blocks writes f32 partial sums [chunks, cols], and a second
// kernel adds each column's partials in chunk order. Batch norm: a 256-thread block per channel
// reduces its n * spatial elements; the element-wise passes (y, dx) are separate grid-stride
// kernels over all elements.
#pragma once

#include "core/tensor.h"
#include "ops/cpu/norm.h"

namespace trident::cuda {

using cpu::AddLayerNormForward;
using cpu::BatchNormForward;
using cpu::LayerNormForward;
using cpu::NormGrads;

LayerNormForward layer_norm(const Tensor& x, int64_t rows, int64_t cols, const Tensor& weight, const Tensor& bias,
                            double eps);
NormGrads layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                              const Tensor& weight, int64_t rows, int64_t cols, bool need_dx, bool need_dw, bool need_db);
// One kernel: each row's x + residual is rounded to the dtype, written to sum and normalized from
// there (the row read back from L1/L2, not from memory), so the residual stream is read once and
// written once instead of the add's read-read-write and layer norm's read.
AddLayerNormForward add_layer_norm(const Tensor& x, const Tensor& residual, int64_t rows, int64_t cols,
                                   const Tensor& weight, const Tensor& bias, double eps);

BatchNormForward batch_norm(const Tensor& x, int64_t n, int64_t channels, int64_t spatial, const Tensor& running_mean,
                            const Tensor& running_var, const Tensor& weight, const Tensor& bias, bool training,
                            double eps);
NormGrads batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                              const Tensor& weight, int64_t n, int64_t channels, int64_t spatial, bool training,
                              bool need_dx, bool need_dw, bool need_db);
// The running statistics' update (contract in ops/cpu/norm.h), computed in f64 on the device
// from the f32 batch statistics: no host synchronization.
void batch_norm_update_running(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean,
                               const Tensor& var, int64_t m, double momentum);

}  // namespace trident::cuda
