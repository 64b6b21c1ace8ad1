// The element-wise CUDA kernels (core/cuda/loops.cuh's vectorized and strided loops, with the
// functors of ops/cuda/arith.cu, compare.cu and unary.cu) and dropout's (ops/cuda/dropout.cu) on
// the SIMT emulator (NOTE [Kernels on the CPU emulator] in tests/simt/simt.h) against the CPU
// ops: 16-byte packs with a tail, broadcast strides, bool outputs and inputs, the tanh GELU of
// bf16 in its fast form (whose __expf the emulator computes exactly: the check is of the code
// around it), and dropout's keep mask bit for bit (the same Philox numbers for the same
// generator state). Both thread orders, same bits.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "ops/cuda/arith.cu"
#include "ops/cuda/compare.cu"
#include "ops/cuda/dropout.cu"
#include "ops/cuda/unary.cu"

#include <gtest/gtest.h>

#include <string>

#include "ops/cpu/dropout.h"
#include "ops/cpu/unary.h"
#include "simt/simt_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::simt_testing;
namespace cu = trident::cuda;

namespace {

simt::Order order_of(int o) { return o == 0 ? simt::Order::Forward : simt::Order::Reverse; }

TEST(SimtElementwise, BinaryCompareWhereAndUnaryMatchTheCpu) {
  Generator g(1);
  for (int o = 0; o < 2; ++o) {
    // Contiguous with a tail past the last pack (1001 elements): the vectorized loop.
    const Tensor a = randn({1001}, kF32, &g), b = randn({1001}, kF32, &g);
    const Tensor sum = nans({1001}, kF32);
    run_elementwise<float, float, float>(sum, {a, b}, cu::BinaryF<float>{BinaryOp::Add}, order_of(o));
    EXPECT_TRUE(same_bits(sum, add(a, b))) << "add";
    // Broadcast [5, 1, 7] against [1, 6, 7] in bf16: the strided loop.
    const Tensor x = randn({5, 1, 7}, kF64, &g).to(kBF16), y = randn({1, 6, 7}, kF64, &g).to(kBF16);
    const Tensor prod = nans({5, 6, 7}, kBF16);
    run_elementwise<BFloat16, BFloat16, BFloat16>(prod, {x, y}, cu::BinaryF<BFloat16>{BinaryOp::Mul}, order_of(o));
    EXPECT_TRUE(same_bits(prod, mul(x, y))) << "mul with broadcasting";
    const Tensor lt_out = full({5, 6, 7}, 0, DType::Bool);
    run_elementwise<bool, BFloat16, BFloat16>(lt_out, {x, y}, cu::CompareF<BFloat16>{CompareOp::Lt}, order_of(o));
    EXPECT_EQ(lt_out.to_vector<uint8_t>(), lt(x, y).to_vector<uint8_t>()) << "lt";
    const Tensor w = nans({5, 6, 7}, kBF16);
    run_elementwise<BFloat16, bool, BFloat16, BFloat16>(w, {lt_out, x, y}, cu::WhereF<BFloat16>{}, order_of(o));
    EXPECT_TRUE(same_bits(w, where(lt(x, y), expand(x, {5, 6, 7}), expand(y, {5, 6, 7})))) << "where";
    // The hot activations: ReLU and the tanh GELU (bf16: the fast form), and a switched op.
    const Tensor h = randn({4, 300}, kF64, &g).to(kBF16);
    const Tensor gelu_out = nans({4, 300}, kBF16), exp_out = nans({4, 300}, kBF16);
    run_elementwise<BFloat16, BFloat16>(gelu_out, {h}, cu::Fixed<cu::UnaryOp::GeluTanh>::F<BFloat16>{}, order_of(o));
    EXPECT_LE(relative_error(gelu_out, gelu(h.to(kF64), GeluApproximation::Tanh)), tolerance(kBF16, false)) << "gelu tanh";
    run_elementwise<BFloat16, BFloat16>(exp_out, {h}, cu::UnaryF<BFloat16>{cu::UnaryOp::Exp}, order_of(o));
    EXPECT_TRUE(same_bits(exp_out, exp(h))) << "exp";
  }
}

// NOTE [Relu into a narrower dtype]: f32 -> bf16 and f32 -> f16 (the vectorized loop, with a
// tail) and bf16 -> f32 on a transposed input (the strided loop), forward and backward, bit for
// bit the CPU's.
TEST(SimtElementwise, ReluIntoANarrowerDtypeMatchesTheCpu) {
  Generator g(3);
  for (int o = 0; o < 2; ++o) {
    const Tensor x = mul(randn({1001}, kF32, &g), 3.0), gy16 = randn({1001}, kF32, &g).to(kBF16);
    const Tensor y16 = nans({1001}, kBF16), yh = nans({1001}, kF16), gx = nans({1001}, kF32);
    run_elementwise<BFloat16, float>(y16, {x}, cu::ReluToF<BFloat16, float>{}, order_of(o));
    EXPECT_TRUE(same_bits(y16, relu(x, kBF16))) << "f32 -> bf16";
    run_elementwise<Half, float>(yh, {x}, cu::ReluToF<Half, float>{}, order_of(o));
    EXPECT_TRUE(same_bits(yh, relu(x, kF16))) << "f32 -> f16";
    run_elementwise<float, BFloat16, BFloat16>(gx, {gy16, y16}, cu::ReluToBackwardF<float, BFloat16>{}, order_of(o));
    EXPECT_TRUE(same_bits(gx, cpu::relu_to_backward(gy16, y16, kF32))) << "bf16 gradient -> f32";
    const Tensor xt = transpose(randn({30, 7}, kF64, &g).to(kBF16), 0, 1), wide = nans({7, 30}, kF32);
    run_elementwise<float, BFloat16>(wide, {xt}, cu::ReluToF<float, BFloat16>{}, order_of(o));
    EXPECT_TRUE(same_bits(wide, relu(xt, kF32))) << "bf16 -> f32, transposed";
  }
}

TEST(SimtElementwise, DropoutDropsWhatTheCpuDrops) {
  Generator g(2);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t n = 4099;  // a partial last Philox block of 4
    const Tensor x = randn({n}, kF64, &g).to(dt);
    const PhiloxState st{1234, 56};
    const double p = 0.3;
    const Tensor ref = cpu::dropout(x, st, p);
    for (int o = 0; o < 2; ++o) {
      const Tensor out = nans({n}, dt);
      const uint32_t threshold = math::dropout_threshold(p);
      const float scale = static_cast<float>(1.0 / (1.0 - p));
      const auto launch = [&]<typename T>() {
        simt::launch({dim3(2), dim3(256), 0, order_of(o)},
                     [&] { cu::dropout_kernel<T>(ptr<T>(x), ptr<T>(out), n, st.seed, st.offset, threshold, scale); });
      };
      if (dt == DType::F32) launch.template operator()<float>();
      else launch.template operator()<BFloat16>();
      EXPECT_TRUE(same_bits(out, ref));
    }
  }
}

}  // namespace
