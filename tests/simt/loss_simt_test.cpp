// The CUDA loss kernels (ops/cuda/loss.cu) on the SIMT emulator (NOTE [Kernels on the CPU
// emulator] in tests/simt/simt.h) against the CPU kernels in f64 on the same (rounded) inputs:
// the fused cross-entropy forward and backward with one thread, a warp or the block per position
// (inner > 1 with few classes, short rows, rows of 1500 classes), class weights, label smoothing
// (the weights' total from the device), ignore_index, and rows whose first classes are masked
// to -inf (fixed after the one GPU run); the two-stage device totals; NLL forward and backward;
// the first invalid target; the squared-error sum. Both thread orders, same bits.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "ops/cuda/loss.cu"

#include <gtest/gtest.h>

#include <string>

#include "ops/cpu/loss.h"
#include "simt/simt_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::simt_testing;
namespace cu = trident::cuda;

namespace {

Tensor f64(const Tensor& t) { return t.defined() ? t.to(kF64) : t; }
simt::Order order_of(int o) { return o == 0 ? simt::Order::Forward : simt::Order::Reverse; }

// The device totals of `partial` ([nb, width] doubles), as finish_totals.
std::vector<double> totals(const Tensor& partial, int nb, int width, simt::Order order) {
  const Tensor out = nans({width}, kF64);
  simt::launch({dim3(1), dim3(cu::kReduceThreads), 0, order},
               [&] { cu::sum_partials_kernel(ptr<double>(partial), nb, width, ptr<double>(out)); });
  return out.to_vector<double>();
}

struct CeCase {
  std::string name;
  int64_t n, classes, inner;
  bool weighted = false;
  double smoothing = 0.0;
  bool masked = false;  // the first classes of every row at -inf
};

template <typename T>
void ce_case(DType dt, const CeCase& c, uint64_t seed) {
  SCOPED_TRACE(c.name + " " + std::string(dtype_name(dt)));
  Generator g(seed);
  Tensor x64 = mul(randn({c.n, c.classes, c.inner}, kF64, &g), 3.0);
  if (c.masked) {
    double* d = static_cast<double*>(x64.data_ptr());
    for (int64_t i = 0; i < c.n; ++i)
      for (int64_t k = 0; k < std::min<int64_t>(c.classes / 2, 300); ++k)
        for (int64_t j = 0; j < c.inner; ++j) d[(i * c.classes + k) * c.inner + j] = -INFINITY;
  }
  const Tensor x = x64.to(dt);
  const int64_t npos = c.n * c.inner;
  std::vector<int64_t> tv(static_cast<size_t>(npos));
  for (int64_t i = 0; i < npos; ++i)  // targets past the masked classes; every 7th ignored
    tv[static_cast<size_t>(i)] = i % 7 == 3 ? -100 : c.classes - 1 - (i * 13) % std::max<int64_t>(1, c.classes / 2);
  const Tensor tgt = from_vector<int64_t>(tv, {npos});
  const Tensor w = c.weighted ? add(rand({c.classes}, kF32, &g), 0.5) : Tensor();
  const Tensor gy = randn({npos}, kF32, &g);
  cpu::ClassLossArgs args;
  args.n = c.n;
  args.classes = c.classes;
  args.inner = c.inner;
  args.label_smoothing = c.smoothing;
  const double scale = 0.25;

  const cu::CeArgs a = cu::ce_launch_args(args);
  const int blocks = cu::position_blocks(npos, a.tpr);
  Tensor loss[2], rmax[2], rlog[2], gx[2];
  std::vector<double> tot[2];
  for (int o = 0; o < 2; ++o) {
    const simt::Order order = order_of(o);
    cu::CeArgs ao = a;
    const Tensor w_total = nans({1}, kF64);
    if (c.weighted && c.smoothing != 0.0) {
      simt::launch({dim3(1), dim3(cu::kReduceThreads), 0, order},
                   [&] { cu::weight_total_kernel(ptr<float>(w), c.classes, ptr<double>(w_total)); });
      ao.w_total_dev = ptr<double>(w_total);
    }
    loss[o] = nans({npos}, kF32);
    rmax[o] = nans({npos}, kF32);
    rlog[o] = nans({npos}, kF32);
    gx[o] = nans({c.n, c.classes, c.inner}, dt);
    simt::launch({dim3(static_cast<unsigned>(blocks)), dim3(cu::kReduceThreads), 0, order}, [&] {
      cu::ce_forward_kernel<T>(ptr<T>(x), ptr<int64_t>(tgt), ptr<float>(w), ao, ptr<float>(loss[o]), ptr<float>(rmax[o]),
                               ptr<float>(rlog[o]));
    });
    const int nb = cu::partial_blocks(npos);
    const Tensor partial = nans({nb, 2}, kF64);
    simt::launch({dim3(static_cast<unsigned>(nb)), dim3(cu::kReduceThreads), 0, order}, [&] {
      cu::class_totals_kernel(ptr<float>(loss[o]), ptr<int64_t>(tgt), ptr<float>(w), npos, a.ignore, ptr<double>(partial));
    });
    tot[o] = totals(partial, nb, 2, order);
    simt::launch({dim3(static_cast<unsigned>(blocks)), dim3(cu::kReduceThreads), 0, order}, [&] {
      cu::ce_backward_kernel<T>(ptr<T>(x), ptr<int64_t>(tgt), ptr<float>(w), ao, ptr<float>(rmax[o]), ptr<float>(rlog[o]),
                                ptr<float>(gy), true, static_cast<float>(scale), ptr<T>(gx[o]));
    });
  }
  EXPECT_TRUE(same_bits(loss[0], loss[1]) && same_bits(gx[0], gx[1]) && tot[0] == tot[1]) << "depends on the thread order";
  const cpu::CrossEntropyForward ref = cpu::cross_entropy_forward(f64(x), tgt, f64(w), args);
  EXPECT_LE(relative_error(loss[0], ref.loss), 2e-5) << "loss";
  EXPECT_LE(relative_error(rmax[0], ref.row_max), 1e-6) << "row max";
  if (std::isinf(ref.loss_sum)) {  // smoothing over -inf logits: an infinite loss on both sides
    EXPECT_EQ(tot[0][0], ref.loss_sum) << "loss sum";
  } else {
    EXPECT_NEAR(tot[0][0], ref.loss_sum, 2e-5 * std::abs(ref.loss_sum)) << "loss sum";
  }
  EXPECT_NEAR(tot[0][1], ref.total_weight, 1e-6 * ref.total_weight) << "total weight";
  const Tensor gref =
      cpu::cross_entropy_backward(f64(gy), scale, f64(x), tgt, f64(w), ref.row_max, ref.row_logsum, args);
  EXPECT_LE(relative_error(gx[0], gref), tolerance(dt, true)) << "gx";
}

TEST(SimtLoss, CrossEntropyMatchesTheCpu) {
  const std::vector<CeCase> cases = {
      {"warp_per_row", 37, 100, 1},
      {"block_per_row_weighted_smoothed", 5, 1500, 1, true, 0.1},
      {"thread_per_position", 3, 10, 17, false, 0.05},
      {"masked_first_classes_warp", 9, 700, 1, true, 0.0, true},
      {"masked_first_classes_block", 3, 2000, 1, false, 0.1, true},
      {"masked_thread_per_position", 4, 12, 9, true, 0.2, true},
  };
  uint64_t seed = 1;
  for (const CeCase& c : cases) {
    ce_case<float>(DType::F32, c, seed++);
    ce_case<BFloat16>(DType::BF16, c, seed++);
  }
}

TEST(SimtLoss, BinaryCrossEntropyWithLogitsMatchesTheCpu) {
  Generator g(3);
  const Tensor x = mul(randn({9, 13}, kF32, &g), 5.0), y = rand({9, 13}, kF32, &g), pw = add(rand({13}, kF32, &g), 0.5);
  const Tensor gy = randn({9, 13}, kF32, &g);
  for (int o = 0; o < 2; ++o) {
    const Tensor out = nans({9, 13}, kF32), gx = nans({9, 13}, kF32), gt = nans({9, 13}, kF32);
    run_elementwise<float, float, float, float>(out, {x, y, pw}, cu::BceF<float>{}, order_of(o));
    run_elementwise<float, float, float, float, float>(gx, {x, y, pw, gy}, cu::BceGradF<float>{0.5f, true}, order_of(o));
    run_elementwise<float, float, float, float, float>(gt, {x, y, pw, gy}, cu::BceGradF<float>{0.5f, false}, order_of(o));
    EXPECT_LE(relative_error(out, cpu::bce_with_logits(x.to(kF64), y.to(kF64), pw.to(kF64))), 1e-6) << "loss";
    const auto [rx, ry] = cpu::bce_with_logits_backward(gy.to(kF64), 0.5, x.to(kF64), y.to(kF64), pw.to(kF64), true, true);
    EXPECT_LE(relative_error(gx, rx), 1e-6) << "d/dx";
    EXPECT_LE(relative_error(gt, ry), 1e-6) << "d/dy";
  }
}

TEST(SimtLoss, NllFirstInvalidTargetAndSquaredErrorMatchTheCpu) {
  Generator g(40);
  const int64_t n = 6, classes = 11, inner = 5, npos = n * inner;
  const Tensor lp = randn({n, classes, inner}, kF32, &g), w = add(rand({classes}, kF32, &g), 0.5);
  std::vector<int64_t> tv(static_cast<size_t>(npos));
  for (int64_t i = 0; i < npos; ++i) tv[static_cast<size_t>(i)] = i % 6 == 1 ? -100 : (i * 7) % classes;
  const Tensor tgt = from_vector<int64_t>(tv, {npos});
  const Tensor gy = randn({npos}, kF32, &g);
  cpu::ClassLossArgs args;
  args.n = n;
  args.classes = classes;
  args.inner = inner;
  Tensor loss[2], gx[2];
  for (int o = 0; o < 2; ++o) {
    loss[o] = nans({npos}, kF32);
    gx[o] = zeros({n, classes, inner}, kF32);  // as the host: zeros, then the target entries
    simt::launch({dim3(2), dim3(cu::kThreads), 0, order_of(o)}, [&] {
      cu::nll_forward_kernel<float>(ptr<float>(lp), ptr<int64_t>(tgt), ptr<float>(w), npos, classes, inner, -100,
                                    ptr<float>(loss[o]));
    });
    simt::launch({dim3(2), dim3(cu::kThreads), 0, order_of(o)}, [&] {
      cu::nll_backward_kernel<float>(ptr<int64_t>(tgt), ptr<float>(w), ptr<float>(gy), true, 0.5f, npos, classes, inner,
                                     -100, ptr<float>(gx[o]));
    });
  }
  EXPECT_TRUE(same_bits(loss[0], loss[1]) && same_bits(gx[0], gx[1]));
  const cpu::NllLossForward ref = cpu::nll_loss_forward(f64(lp), tgt, f64(w), args);
  EXPECT_LE(relative_error(loss[0], ref.loss), 1e-6) << "nll loss";
  EXPECT_LE(relative_error(gx[0], cpu::nll_loss_backward(f64(gy), 0.5, tgt, f64(w), args, kF64)), 1e-6) << "nll gx";

  // The first invalid target, over several blocks of stage one.
  const int64_t big = 3 * 4096 * 2 + 5;
  for (int64_t bad : {int64_t{-1}, int64_t{9000}, int64_t{20000}, big - 1}) {
    std::vector<int64_t> t(static_cast<size_t>(big), 3);
    if (bad >= 0) t[static_cast<size_t>(bad)] = classes;
    if (bad >= 0) t[static_cast<size_t>(big - 1)] = -5;  // a later one too
    const Tensor tt = from_vector<int64_t>(t, {big});
    const int nb = cu::partial_blocks(big);
    const Tensor partial = full({nb}, -7, kI64), out = full({1}, -7, kI64);
    simt::launch({dim3(static_cast<unsigned>(nb)), dim3(cu::kReduceThreads)},
                 [&] { cu::invalid_target_kernel(ptr<int64_t>(tt), big, classes, -100, ptr<int64_t>(partial)); });
    simt::launch({dim3(1), dim3(cu::kReduceThreads)},
                 [&] { cu::min_partials_kernel(ptr<int64_t>(partial), nb, big, ptr<int64_t>(out)); });
    EXPECT_EQ(out.item<int64_t>(), bad < 0 ? big : bad) << "bad at " << bad;
    EXPECT_EQ(cpu::first_invalid_target(tt, classes, -100), bad);
  }

  const Tensor a = randn({5000}, kF32, &g), b = randn({5000}, kF32, &g);
  const int nb = cu::partial_blocks(5000);
  const Tensor partial = nans({nb}, kF64);
  simt::launch({dim3(static_cast<unsigned>(nb)), dim3(cu::kReduceThreads)},
               [&] { cu::squared_error_partials_kernel<float>(ptr<float>(a), ptr<float>(b), 5000, ptr<double>(partial)); });
  const double sse = totals(partial, nb, 1, simt::Order::Forward)[0];
  // The kernel squares in f32 (relative error <= 2^-24 each, all terms positive) and sums in f64.
  EXPECT_NEAR(sse, cpu::squared_error_sum(f64(a), f64(b)), 6e-8 * sse);
}

}  // namespace
