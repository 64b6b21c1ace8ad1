// CPU kernels of layer norm and batch norm (ops/norm.h has the contract). Inputs may be any
// floating dtype and any layout; f16/bf16 are computed in f32 and every result comes back in
// the compute dtype (f32 or f64): the wrapper casts to the caller's dtypes.
#pragma once

#include "core/tensor.h"

namespace trident::cpu {

struct NormGrads {
  Tensor dx, dw, db;  // undefined where not asked for
};

// ---- layer norm over rows of `cols` elements (x has rows * cols elements) ----
struct LayerNormForward {
  Tensor y;           // x's shape
  Tensor mean, rstd;  // [rows], saved for backward
};
LayerNormForward layer_norm(const Tensor& x, int64_t rows, int64_t cols, const Tensor& weight, const Tensor& bias,
                            double eps);
NormGrads layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                              const Tensor& weight, int64_t rows, int64_t cols, bool need_dx, bool need_dw, bool need_db);

// ---- residual add + layer norm (NOTE [Fused residual layer norm] in ops/norm.h) ----
struct AddLayerNormForward {
  Tensor sum;         // x + residual in x's dtype (rounded to it, as add rounds)
  Tensor y;           // layer_norm(sum), in the compute dtype (the CUDA kernel: x's dtype)
  Tensor mean, rstd;  // [rows], saved for backward
};
// x and residual: same shape, dtype and device, rows * cols elements.
AddLayerNormForward add_layer_norm(const Tensor& x, const Tensor& residual, int64_t rows, int64_t cols,
                                   const Tensor& weight, const Tensor& bias, double eps);

// ---- batch norm: x viewed as [n, channels, spatial] ----
struct BatchNormForward {
  Tensor y;           // x's shape
  Tensor mean, rstd;  // [channels]: the statistics used (batch or running), saved for backward
  Tensor var;         // [channels]: the biased batch variance (training only; for the running estimate)
};
// training: statistics of the batch; eval: mean = running_mean, rstd = 1 / sqrt(running_var + eps).
BatchNormForward batch_norm(const Tensor& x, int64_t n, int64_t channels, int64_t spatial, const Tensor& running_mean,
                            const Tensor& running_var, const Tensor& weight, const Tensor& bias, bool training,
                            double eps);
NormGrads batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                              const Tensor& weight, int64_t n, int64_t channels, int64_t spatial, bool training,
                              bool need_dx, bool need_dw, bool need_db);
// Training's update of the running statistics, in place (copy_: their dtype, a version bump):
// running = (1 - momentum) running + momentum batch, with var made unbiased by m / (m - 1)
// (m = n * spatial > 1), computed in f64 from the batch statistics `mean` and `var` of
// batch_norm. Called by the wrapper under NoGradGuard.
void batch_norm_update_running(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean,
                               const Tensor& var, int64_t m, double momentum);

}  // namespace trident::cpu
