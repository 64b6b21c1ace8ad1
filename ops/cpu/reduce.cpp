#include "ops/cpu/reduce.h"

#include "ops/cpu/reduce_loop.h"
#include "ops/reduce.h"

namespace trident::cpu {

Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, DType out_dtype) {
  Tensor out = empty(reduced_shape(x.sizes(), dims, keepdim), out_dtype);
  int64_t count = 1;
  for (int64_t d : dims) count *= x.size(d);
  TRIDENT_DISPATCH_ALL(x.dtype(), "sum", [&] {
    using In = scalar_t;
    using A = acc_t<In>;
    // Floats keep their dtype; integers and bool sum to i64.
    using Out = std::conditional_t<std::is_floating_point_v<compute_t<In>>, In, int64_t>;
    TRIDENT_ASSERT(out.dtype() == dtype_of<Out>, "sum of ", x.dtype(), " into ", out.dtype());
    Out* o = static_cast<Out*>(out.data_ptr());
    const auto add = [](A acc, compute_t<In> v) { return acc + static_cast<A>(v); };
    if (kind == ReduceKind::Sum) {
      reduce_loop<In, Out, A>(x, dims, o, A(0), add, [](A acc) { return static_cast<Out>(acc); });
    } else {
      // 0 / 0 = NaN for an empty mean, as in PyTorch.
      const double n = static_cast<double>(count);
      reduce_loop<In, Out, A>(x, dims, o, A(0), add, [n](A acc) { return static_cast<Out>(static_cast<double>(acc) / n); });
    }
  });
  return out;
}

}  // namespace trident::cpu
