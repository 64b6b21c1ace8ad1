// Autocast: mixed-precision compute under a scope, with f32 master weights.
//
// NOTE [Autocast]: inside an autocast::Guard(kBF16) (or kF16), ops follow a policy by kind,
// as PyTorch's autocast does:
//  - products (matmul, mm, bmm, linear, conv2d, scaled_dot_product_attention) cast their f32
//    inputs to the half type and compute there (tensor cores on a GPU; on the CPU, bf16 matmul and
//    linear on AMX tiles where the CPU has them, NOTE [AMX bf16 GEMM], and otherwise f32
//    arithmetic on the cast values, rounded once: the same results up to the order of the sums);
//  - softmax, log_softmax, the losses, layer_norm, batch_norm and the reductions (sum, mean,
//    var, std_dev, logsumexp, norm) cast half inputs up to f32 and return f32 (on the CPU,
//    cross-entropy's and batch_norm's bf16 inputs are read as they are instead of copied, the
//    same numbers: NOTE [Half-precision cross-entropy rows], NOTE [bf16 batch norm]);
//  - element-wise binary ops, where, cat and stack given mixed floating dtypes compute in the
//    wider one (outside autocast, mixing dtypes stays an error);
//  - everything else runs in its inputs' dtype.
// The casts are ordinary differentiable ops, so gradients reach the f32 parameters in f32. f64
// tensors are never lowered. The state is per thread; guards nest and restore on exit.
#pragma once

#include <utility>

#include "core/tensor.h"

namespace trident::autocast {

bool is_enabled();
DType dtype();

class Guard {
 public:
  explicit Guard(DType dtype = DType::BF16, bool enabled = true);
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

// For op implementations: while held, autocast is off (an op re-enters itself with its cast
// arguments under it, so the inner call does not cast again).
class Suspend {
 public:
  Suspend();
  ~Suspend();
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;

 private:
  bool prev_;
};

// f32 -> the autocast dtype (other dtypes and undefined tensors pass through).
Tensor lower(const Tensor& t);
// relu(t) for a consumer that lowers it (a convolution or a matrix product right after it): under
// autocast an f32 t gives relu(t, dtype()), the values of lower(relu(t)) in one pass and without
// the f32 relu output (ops/unary.h); otherwise relu(t).
Tensor lower_relu(const Tensor& t);
// f16/bf16 -> f32 (others pass through).
Tensor widen(const Tensor& t);
// Under autocast, two floating tensors of different dtypes cast to the wider one (f64 > f32 >
// f16, bf16; f16 with bf16 gives f32). Otherwise returned as they are.
std::pair<Tensor, Tensor> promote(const Tensor& a, const Tensor& b);
// The same for a list (cat, stack).
std::vector<Tensor> promote(const std::vector<Tensor>& ts);

}  // namespace trident::autocast
