// The CUDA kernels of the outside-project example (examples/custom_op/swiglu_cuda.cu: SwiGLU
// forward and backward on TensorArg views) on the SIMT emulator (NOTE [Kernels on the CPU
// emulator] in tests/simt/simt.h), against the example's own per-element math run on the CPU,
// on a transposed (strided) input and in f32 and f64.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "examples/custom_op/swiglu_cuda.cu"

#include <gtest/gtest.h>

#include "simt/simt_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::simt_testing;

namespace {

template <typename T>
void swiglu_case(DType dt) {
  SCOPED_TRACE(dtype_name(dt));
  Generator g(8);
  const Tensor a = transpose(mul(randn({37, 29}, kF64, &g), 4.0).to(dt), 0, 1);  // [29, 37], strided
  const Tensor b = randn({29, 37}, kF64, &g).to(dt), gy = randn({29, 37}, kF64, &g).to(dt);
  const int64_t n = b.numel();
  const std::vector<double> av = a.contiguous().to_vector<double>(), bv = b.to_vector<double>(), gv = gy.to_vector<double>();
  std::vector<double> want(static_cast<size_t>(n)), wga(static_cast<size_t>(n)), wgb(static_cast<size_t>(n));
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = static_cast<double>(swiglu_math::forward<T>(static_cast<T>(av[i]), static_cast<T>(bv[i])));
    T ga, gb;
    swiglu_math::backward<T>(static_cast<T>(gv[i]), static_cast<T>(av[i]), static_cast<T>(bv[i]), ga, gb);
    wga[i] = static_cast<double>(ga);
    wgb[i] = static_cast<double>(gb);
  }
  for (int o = 0; o < 2; ++o) {
    const simt::Order order = o == 0 ? simt::Order::Forward : simt::Order::Reverse;
    const Tensor out = nans({29, 37}, dt), ga = nans({29, 37}, dt), gb = nans({29, 37}, dt);
    // As the example's launchers: its block count and threads.
    simt::launch({dim3(static_cast<unsigned>(custom_op::blocks_for(n))), dim3(custom_op::kThreads), 0, order}, [&] {
      custom_op::forward_kernel<T>(tensor_arg<const T>(a), tensor_arg<const T>(b), tensor_arg<T>(out));
    });
    simt::launch({dim3(static_cast<unsigned>(custom_op::blocks_for(n))), dim3(custom_op::kThreads), 0, order}, [&] {
      custom_op::backward_kernel<T>(tensor_arg<const T>(gy), tensor_arg<const T>(a), tensor_arg<const T>(b),
                                    tensor_arg<T>(ga), tensor_arg<T>(gb));
    });
    EXPECT_EQ(out.to_vector<double>(), want);
    EXPECT_EQ(ga.to_vector<double>(), wga);
    EXPECT_EQ(gb.to_vector<double>(), wgb);
  }
}

TEST(SimtCustomOp, SwigluKernelsMatchTheirCpuMath) {
  swiglu_case<float>(DType::F32);
  swiglu_case<double>(DType::F64);
}

}  // namespace
