// CPU reduction kernels. `dims` are sorted, unique and wrapped (see reduction_dims).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace trident::cpu {

enum class ReduceKind { Sum, Mean };
Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, DType out_dtype);

}  // namespace trident::cpu
