// The CUDA softmax kernels (ops/cuda/softmax.cu) on the SIMT emulator (NOTE [Kernels on the CPU
// emulator] in tests/simt/simt.h) against the CPU in f64 on the same (rounded) inputs: every
// register bucket (NOTE [Register softmax]) with a warp and with the block per row, packed and
// unpacked rows, and rows too long for registers, which take the general kernels (on the one
// GPU run the host divided by a zero pack width there; fixed since); softmax and log-softmax,
// forward and backward. The host's choice of kernel (plan_rows, can_pack) is the one under test;
// the switch over buckets is repeated here. Both thread orders, same bits.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "ops/cuda/softmax.cu"

#include <gtest/gtest.h>

#include <string>

#include "ops/cpu/softmax.h"
#include "simt/simt_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::simt_testing;
namespace cu = trident::cuda;

namespace {

// launch_regs / launch_regs_backward, or the general kernels when the plan has no bucket.
template <typename T, int E>
void launch_bucket(const simt::Launch& cfg, const T* x, const T* gy, T* out, int64_t rows, int n, int tpr, bool log,
                   bool backward, bool packed) {
  simt::launch(cfg, [&] {
    if (backward) cu::softmax_backward_regs_kernel<T, E>(gy, x, out, rows, n, tpr, log, packed);
    else cu::softmax_regs_kernel<T, E>(x, out, rows, n, tpr, log, packed);
  });
}

template <typename T>
void run(const cu::RowPlan& plan, const simt::Launch& cfg, const T* x, const T* gy, T* out, int64_t rows, int64_t n, bool log,
         bool backward) {
  const bool packed = cu::can_pack<T>(plan.per_thread, static_cast<int>(n), x) &&
                      cu::can_pack<T>(plan.per_thread, static_cast<int>(n), out) &&
                      (!backward || cu::can_pack<T>(plan.per_thread, static_cast<int>(n), gy));
  const int ni = static_cast<int>(n);
  switch (plan.per_thread) {
    case 4: return launch_bucket<T, 4>(cfg, x, gy, out, rows, ni, plan.tpr, log, backward, packed);
    case 8: return launch_bucket<T, 8>(cfg, x, gy, out, rows, ni, plan.tpr, log, backward, packed);
    case 16: return launch_bucket<T, 16>(cfg, x, gy, out, rows, ni, plan.tpr, log, backward, packed);
    case 32: return launch_bucket<T, 32>(cfg, x, gy, out, rows, ni, plan.tpr, log, backward, packed);
    default:
      simt::launch(cfg, [&] {
        if (backward) cu::softmax_backward_kernel<T>(gy, x, out, rows, n, plan.tpr, log);
        else cu::softmax_kernel<T>(x, out, rows, n, plan.tpr, log);
      });
  }
}

template <typename T>
void softmax_case(DType dt, int64_t rows, int64_t n, int expect_tpr, int expect_e, uint64_t seed) {
  const cu::RowPlan plan = cu::plan_rows(n);
  EXPECT_EQ(plan.tpr, expect_tpr) << "n " << n;
  EXPECT_EQ(plan.per_thread, expect_e) << "n " << n;
  Generator g(seed);
  const Tensor x = mul(randn({rows, n}, kF64, &g), 4.0).to(dt), gy = randn({rows, n}, kF64, &g).to(dt);
  for (bool log : {false, true}) {
    SCOPED_TRACE(std::string(log ? "log_softmax " : "softmax ") + std::string(dtype_name(dt)) + " rows " +
                 std::to_string(rows) + " n " + std::to_string(n));
    Tensor y[2], gx[2];
    for (int o = 0; o < 2; ++o) {
      const simt::Launch cfg{dim3(2), dim3(cu::kBlock), 0, o == 0 ? simt::Order::Forward : simt::Order::Reverse};
      y[o] = nans({rows, n}, dt);
      gx[o] = nans({rows, n}, dt);
      run<T>(plan, cfg, ptr<T>(x), nullptr, ptr<T>(y[o]), rows, n, log, false);
      run<T>(plan, cfg, ptr<T>(y[o]), ptr<T>(gy), ptr<T>(gx[o]), rows, n, log, true);
    }
    EXPECT_TRUE(same_bits(y[0], y[1]) && same_bits(gx[0], gx[1])) << "depends on the thread order";
    EXPECT_LE(relative_error(y[0], cpu::softmax(x.to(kF64), 1, log)), tolerance(dt, false)) << "y";
    // The backward from the kernel's own (rounded) y, as on the GPU.
    EXPECT_LE(relative_error(gx[0], cpu::softmax_backward(gy.to(kF64), y[0].to(kF64), 1, log)), tolerance(dt, true)) << "gx";
  }
}

TEST(SimtSoftmax, EveryBucketAndTheGeneralKernelsMatchTheCpu) {
  softmax_case<float>(DType::F32, 11, 100, 32, 4, 1);       // a warp, 4 per thread, packed
  softmax_case<BFloat16>(DType::BF16, 5, 1000, 32, 32, 2);  // a warp, 32 per thread, packed by 8
  softmax_case<Half>(DType::F16, 3, 1030, 256, 8, 3);       // the block, not packed
  softmax_case<float>(DType::F32, 3, 3000, 256, 16, 4);     // the block, 16 per thread
  softmax_case<BFloat16>(DType::BF16, 2, 9000, 256, 0, 5);  // beyond the registers: the general kernels
  softmax_case<float>(DType::F32, 9, 37, 32, 4, 6);         // odd rows: not packed
}

}  // namespace
