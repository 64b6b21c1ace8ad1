// The CUDA layer-norm and batch-norm kernels (ops/cuda/norm.cu) on the SIMT emulator (NOTE
// [Kernels on the CPU emulator] in tests/simt/simt.h) against the CPU kernels in f64 on the same
// (rounded) inputs: layer norm with and without the residual add (add_layer_norm, added after
// the one GPU run) and its affine parameters, rows short enough for a warp and long enough for the
// whole block, dx and the two-stage dw/db; batch norm's training statistics, eval statistics,
// apply, backward sums and dx, and the running-statistics update, with planes smaller and larger
// than a block. f32, f16 and bf16; every launch in both thread orders, bit-identical.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "ops/cuda/norm.cu"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "ops/cpu/norm.h"
#include "simt/simt_test_util.h"
#include "test_util.h"

using namespace trident;
using trident::simt_testing::nans;
using trident::simt_testing::relative_error;
using trident::simt_testing::same_bits;
using trident::simt_testing::tolerance;
using trident::simt_testing::in_both_orders;
namespace cu = trident::cuda;

namespace {

template <typename T>
T* mp(const Tensor& t) {
  return trident::simt_testing::ptr<T>(t);
}

Tensor f64(const Tensor& t) { return t.defined() ? t.to(kF64) : t; }

template <typename T>
void layer_norm_case(DType dt, int64_t rows, int64_t cols, bool residual, bool affine, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) +
               (residual ? " residual" : "") + (affine ? " affine" : ""));
  Generator g(seed);
  const Tensor x = randn({rows, cols}, kF64, &g).to(dt), r = randn({rows, cols}, kF64, &g).to(dt);
  const Tensor w = affine ? add(randn({cols}, kF64, &g), 1.0).to(dt) : Tensor();
  const Tensor b = affine ? randn({cols}, kF64, &g).to(dt) : Tensor();
  const Tensor gy = randn({rows, cols}, kF64, &g).to(dt);
  const double eps = 1e-5;
  const int tpr = cu::threads_per_row(cols);
  const cu::RowChunks rc = cu::dwdb_chunks(rows, cols);
  const unsigned blocks = 3;  // grid-stride loops: fewer blocks than rows on purpose
  const auto out = in_both_orders(
      [&] {
        return std::vector<Tensor>{nans({rows, cols}, dt),       nans({rows}, kF32),
                                   nans({rows}, kF32),           residual ? nans({rows, cols}, dt) : Tensor(),
                                   nans({rows, cols}, dt),       nans({rc.chunks, cols}, kF32),
                                   nans({rc.chunks, cols}, kF32), nans({cols}, dt),
                                   nans({cols}, dt)};
      },
      [&](const std::vector<Tensor>& o, simt::Order order) {
        simt::launch({dim3(blocks), dim3(cu::kBlock), 0, order}, [&] {
          cu::layer_norm_kernel<T>(mp<T>(x), residual ? mp<T>(r) : nullptr, mp<T>(o[3]), mp<T>(w), mp<T>(b), mp<T>(o[0]),
                                   mp<float>(o[1]), mp<float>(o[2]), rows, cols, tpr, static_cast<float>(eps));
        });
        const Tensor& xs = residual ? o[3] : x;  // backward sees the normalized input
        simt::launch({dim3(blocks), dim3(cu::kBlock), 0, order}, [&] {
          cu::layer_norm_dx_kernel<T>(mp<T>(gy), mp<T>(xs), mp<float>(o[1]), mp<float>(o[2]), mp<T>(w), mp<T>(o[4]), rows,
                                      cols, tpr);
        });
        const dim3 grid(static_cast<unsigned>((cols + cu::kColTile - 1) / cu::kColTile), static_cast<unsigned>(rc.chunks));
        simt::launch({grid, dim3(cu::kBlock), 0, order}, [&] {
          cu::layer_norm_dwdb_partial_kernel<T>(mp<T>(gy), mp<T>(xs), mp<float>(o[1]), mp<float>(o[2]), mp<float>(o[5]),
                                                mp<float>(o[6]), rows, cols, rc.rows_per_chunk);
        });
        simt::launch({dim3(2), dim3(cu::kBlock), 0, order}, [&] {
          cu::column_sum_kernel<T>(mp<float>(o[5]), rc.chunks, cols, mp<T>(o[7]));
        });
        simt::launch({dim3(2), dim3(cu::kBlock), 0, order}, [&] {
          cu::column_sum_kernel<T>(mp<float>(o[6]), rc.chunks, cols, mp<T>(o[8]));
        });
      });
  // Reference: the CPU in f64 on the values the kernel normalized (x + r rounded to T).
  const Tensor xs = residual ? add(x, r) : x;
  if (residual) {
    EXPECT_TRUE(same_bits(out[3], xs)) << "sum";  // both round the f32 sum to T once
  }
  const cpu::LayerNormForward ref = cpu::layer_norm(f64(xs), rows, cols, f64(w), f64(b), eps);
  EXPECT_LE(relative_error(out[0], ref.y), tolerance(dt, false)) << "y";
  EXPECT_LE(relative_error(out[1], ref.mean), 1e-5) << "mean";
  EXPECT_LE(relative_error(out[2], ref.rstd), 1e-5) << "rstd";
  const cpu::NormGrads gr =
      cpu::layer_norm_backward(f64(gy), f64(xs), ref.mean, ref.rstd, f64(w), rows, cols, true, true, true);
  EXPECT_LE(relative_error(out[4], gr.dx), tolerance(dt, true)) << "dx";
  EXPECT_LE(relative_error(out[7], gr.dw), tolerance(dt, true)) << "dw";
  EXPECT_LE(relative_error(out[8], gr.db), tolerance(dt, true)) << "db";
}

TEST(SimtNorm, LayerNormAndAddLayerNormMatchTheCpuInF64) {
  uint64_t seed = 1;
  for (bool residual : {false, true}) {
    layer_norm_case<float>(DType::F32, 37, 100, residual, true, seed++);      // a warp per row
    layer_norm_case<BFloat16>(DType::BF16, 5, 1500, residual, true, seed++);  // the block per row
    layer_norm_case<Half>(DType::F16, 70, 64, residual, false, seed++);       // 3 dw/db chunks
  }
}

template <typename T>
void batch_norm_case(DType dt, int64_t n, int64_t channels, int64_t spatial, bool affine, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " n " + std::to_string(n) + " channels " + std::to_string(channels) +
               " spatial " + std::to_string(spatial));
  Generator g(seed);
  const Tensor x = add(mul(randn({n, channels, spatial}, kF64, &g), 2.0), 0.5).to(dt);
  const Tensor w = affine ? add(randn({channels}, kF64, &g), 1.0).to(dt) : Tensor();
  const Tensor b = affine ? randn({channels}, kF64, &g).to(dt) : Tensor();
  const Tensor gy = randn({n, channels, spatial}, kF64, &g).to(dt);
  const Tensor rm = randn({channels}, kF32, &g), rv = add(rand({channels}, kF32, &g), 0.5);
  const double eps = 1e-5, momentum = 0.1;
  const int64_t numel = n * channels * spatial;
  const bool narrow = numel <= 0xffffffffLL;
  const int64_t m = n * spatial;
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    const auto out = in_both_orders(
        [&] {
          return std::vector<Tensor>{nans({n, channels, spatial}, dt), nans({channels}, kF32), nans({channels}, kF32),
                                     nans({channels}, kF32),           nans({channels}, dt),   nans({channels}, dt),
                                     nans({3, channels}, kF32),        nans({n, channels, spatial}, dt),
                                     nans({channels}, kF64),           nans({channels}, kF64)};
        },
        [&](const std::vector<Tensor>& o, simt::Order order) {
          // y, mean, rstd, var, dw, db, coef, dx, new running mean and var.
          const unsigned stat_blocks = static_cast<unsigned>(std::min<int64_t>(channels, 65535));
          if (training) {
            simt::launch({dim3(stat_blocks), dim3(cu::kBlock), 0, order}, [&] {
              cu::batch_norm_stats_kernel<T>(mp<T>(x), mp<float>(o[1]), mp<float>(o[3]), mp<float>(o[2]), n, channels,
                                             spatial, eps);
            });
          } else {
            simt::launch({dim3(1), dim3(cu::kBlock), 0, order}, [&] {
              cu::batch_norm_running_stats_kernel(mp<float>(rm), mp<float>(rv), mp<float>(o[1]), mp<float>(o[2]), channels,
                                                  eps);
            });
          }
          simt::launch({dim3(4), dim3(cu::kBlock), 0, order}, [&] {
            cu::batch_norm_apply_kernel<T>(mp<T>(x), mp<float>(o[1]), mp<float>(o[2]), mp<T>(w), mp<T>(b), mp<T>(o[0]),
                                           numel, channels, spatial, narrow);
          });
          simt::launch({dim3(stat_blocks), dim3(cu::kBlock), 0, order}, [&] {
            cu::batch_norm_backward_sums_kernel<T>(mp<T>(gy), mp<T>(x), mp<float>(o[1]), mp<float>(o[2]), mp<T>(w),
                                                   mp<T>(o[4]), mp<T>(o[5]), mp<float>(o[6]), n, channels, spatial,
                                                   training, true);
          });
          simt::launch({dim3(4), dim3(cu::kBlock), 0, order}, [&] {
            cu::batch_norm_dx_kernel<T>(mp<T>(gy), mp<T>(x), mp<float>(o[1]), mp<float>(o[6]), mp<T>(o[7]), numel,
                                        channels, spatial, narrow);
          });
          if (training) {
            const double unbias = static_cast<double>(m) / static_cast<double>(m - 1);
            simt::launch({dim3(1), dim3(cu::kBlock), 0, order}, [&] {
              cu::batch_norm_update_running_kernel(mp<float>(rm), mp<float>(rv), mp<float>(o[1]), mp<float>(o[3]),
                                                   mp<double>(o[8]), mp<double>(o[9]), channels, momentum, unbias);
            });
          }
        });
    const cpu::BatchNormForward ref = cpu::batch_norm(f64(x), n, channels, spatial, f64(rm), f64(rv), f64(w), f64(b), training, eps);
    EXPECT_LE(relative_error(out[0], ref.y), tolerance(dt, false)) << "y";
    EXPECT_LE(relative_error(out[1], ref.mean), 1e-5) << "mean";
    EXPECT_LE(relative_error(out[2], ref.rstd), 1e-5) << "rstd";
    const cpu::NormGrads gr = cpu::batch_norm_backward(f64(gy), f64(x), ref.mean, ref.rstd, f64(w), n, channels, spatial,
                                                       training, true, true, true);
    EXPECT_LE(relative_error(out[7], gr.dx), tolerance(dt, true)) << "dx";
    EXPECT_LE(relative_error(out[4], gr.dw), tolerance(dt, true)) << "dw";
    EXPECT_LE(relative_error(out[5], gr.db), tolerance(dt, true)) << "db";
    if (training) {
      EXPECT_LE(relative_error(out[3], ref.var), 1e-5) << "var";
      const Tensor nm = f64(rm), nv = f64(rv);
      cpu::batch_norm_update_running(nm, nv, ref.mean, ref.var, m, momentum);
      EXPECT_LE(relative_error(out[8], nm), 1e-6) << "running mean";
      EXPECT_LE(relative_error(out[9], nv), 1e-6) << "running var";
    }
  }
}

TEST(SimtNorm, BatchNormMatchesTheCpuInF64) {
  batch_norm_case<float>(DType::F32, 3, 5, 63, true, 1);      // planes smaller than a block
  batch_norm_case<BFloat16>(DType::BF16, 2, 3, 300, true, 2);  // larger: the walk wraps rows
  batch_norm_case<Half>(DType::F16, 4, 6, 1, false, 3);        // one position per plane
}

}  // namespace
