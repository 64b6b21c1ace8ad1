// The CUDA indexing kernels (ops/cuda/index.cu) on the SIMT emulator (NOTE [Kernels on the CPU
// emulator] in tests/simt/simt.h) against the CPU kernels: the index-range reductions (first
// entry out of range, largest entry) over several blocks, index_select in every copy unit,
// gather with an entry out of range, scatter_add into overlapping destinations, the
// deterministic index_add_ of embedding gradients (the keys kernel, a stable sort, which cub's
// radix sort is and std::stable_sort here stands in for, and the row kernel, padding entries
// skipped), one_hot. Both thread orders, same bits.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "ops/cuda/index.cu"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "ops/cpu/index.h"
#include "simt/simt_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::simt_testing;
namespace cu = trident::cuda;

namespace {

simt::Order order_of(int o) { return o == 0 ? simt::Order::Forward : simt::Order::Reverse; }

// As reduce_index: stage one per block, stage two in one block.
int64_t reduce_index(const Tensor& index, int64_t limit, cu::IndexReduce kind, simt::Order order) {
  const int64_t n = index.numel();
  const int nb = cu::partial_blocks(n);
  const Tensor partial = full({nb}, -7, kI64), out = full({1}, -7, kI64);
  simt::launch({dim3(static_cast<unsigned>(nb)), dim3(cu::kReduceThreads), 0, order},
               [&] { cu::index_partials_kernel(ptr<int64_t>(index), n, limit, kind, ptr<int64_t>(partial)); });
  simt::launch({dim3(1), dim3(cu::kReduceThreads), 0, order},
               [&] { cu::index_combine_kernel(ptr<int64_t>(partial), nb, kind, n, ptr<int64_t>(out)); });
  return out.item<int64_t>();
}

TEST(SimtIndex, RangeReductionsFindTheFirstBadAndTheLargestEntry) {
  const int64_t n = 3 * 4096 + 77;
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * 37) % 1000;
  for (int o = 0; o < 2; ++o) {
    EXPECT_EQ(reduce_index(from_vector<int64_t>(v, {n}), 1000, cu::IndexReduce::FirstBad, order_of(o)), n);
    EXPECT_EQ(reduce_index(from_vector<int64_t>(v, {n}), 1000, cu::IndexReduce::Max, order_of(o)), 999);
    std::vector<int64_t> w = v;
    w[9000] = -1;       // in the third block of stage one
    w[n - 1] = 5000;    // and a later one
    EXPECT_EQ(reduce_index(from_vector<int64_t>(w, {n}), 1000, cu::IndexReduce::FirstBad, order_of(o)), 9000);
    EXPECT_EQ(reduce_index(from_vector<int64_t>(w, {n}), 1000, cu::IndexReduce::Max, order_of(o)), 5000);
  }
}

// index_select along dim 1 of x [outer, rows, inner] in the unit the host would pick.
void index_select_case(DType dt, int64_t inner, size_t expect_unit) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " inner " + std::to_string(inner));
  Generator g(3);
  const int64_t outer = 3, rows = 7;
  const Tensor x = randn({outer, rows, inner}, kF64, &g).to(dt);
  const Tensor idx = from_vector<int64_t>({6, 0, 3, 3, 5}, {5});
  const int64_t n = idx.numel();
  const Tensor ref = cpu::index_select(x, 1, idx);
  Tensor out[2];
  for (int o = 0; o < 2; ++o) {
    out[o] = full({outer, n, inner}, -3, dt);
    const uint64_t row_bytes = static_cast<uint64_t>(inner) * x.element_size();
    const size_t unit = cu::copy_unit(row_bytes, reinterpret_cast<uintptr_t>(x.data_ptr()),
                                      reinterpret_cast<uintptr_t>(out[o].data_ptr()));
    EXPECT_EQ(unit, expect_unit);
    const auto upr = static_cast<int64_t>(row_bytes / unit);
    const int64_t total = out[o].numel() * static_cast<int64_t>(x.element_size()) / static_cast<int64_t>(unit);
    cu::dispatch_by_bytes(unit, [&](auto tag) {
      using U = typename decltype(tag)::type;
      simt::launch({dim3(2), dim3(cu::kThreads), 0, order_of(o)}, [&] {
        cu::index_select_kernel<U>(ptr<U>(x), ptr<int64_t>(idx), ptr<U>(out[o]), total, n, rows, upr);
      });
    });
    EXPECT_TRUE(same_bits(out[o], ref));
  }
}

TEST(SimtIndex, IndexSelectCopiesRowsInEveryUnit) {
  index_select_case(DType::F32, 8, 16);   // 32-byte rows
  index_select_case(DType::F32, 6, 8);    // 24-byte rows
  index_select_case(DType::BF16, 6, 4);   // 12-byte rows
  index_select_case(DType::F16, 3, 2);    // 6-byte rows
  index_select_case(DType::U8, 5, 1);     // 5-byte rows
}

TEST(SimtIndex, GatherAndScatterAddMatchTheCpu) {
  Generator g(5);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = randn({4, 5, 6}, kF64, &g).to(dt);
    std::vector<int64_t> iv(4 * 3 * 6);
    for (size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<int64_t>((i * 7) % 5);
    const Tensor idx = from_vector<int64_t>(iv, {4, 3, 6});
    const Tensor src = randn({4, 3, 6}, kF64, &g).to(dt);
    bool ok = false;
    const Tensor gref = cpu::gather(x, 1, idx, &ok);
    ASSERT_TRUE(ok);
    const Tensor sref = zeros({4, 5, 6}, dt);
    ASSERT_TRUE(cpu::scatter_add_(sref, 1, idx, src));
    const cu::IndexGeom gg = cu::index_geom("gather", idx, 1, x.size(1), x, nullptr);
    const Tensor out0 = zeros({4, 5, 6}, dt);
    const cu::IndexGeom sg = cu::index_geom("scatter_add", idx, 1, out0.size(1), out0, &src);
    const int64_t lines = idx.numel() / 3, inner = 6;
    for (int o = 0; o < 2; ++o) {
      const Tensor got = nans({4, 3, 6}, dt), bad = zeros({1}, kI32);
      cu::dispatch_by_bytes(x.element_size(), [&](auto tag) {
        using U = typename decltype(tag)::type;
        simt::launch({dim3(2), dim3(cu::kThreads), 0, order_of(o)},
                     [&] { cu::gather_kernel<U>(ptr<U>(x), ptr<int64_t>(idx), ptr<U>(got), idx.numel(), gg, ptr<int>(bad)); });
      });
      EXPECT_EQ(bad.item<int32_t>(), 0);
      EXPECT_TRUE(same_bits(got, gref)) << "gather";
      const Tensor out = zeros({4, 5, 6}, dt), sbad = zeros({1}, kI32);
      const auto scatter = [&]<typename T>() {
        simt::launch({dim3(2), dim3(cu::kThreads), 0, order_of(o)}, [&] {
          cu::scatter_add_kernel<T>(ptr<T>(out), ptr<T>(src), ptr<int64_t>(idx), lines, inner, sg, ptr<int>(sbad));
        });
      };
      if (dt == DType::F32) scatter.template operator()<float>();
      else scatter.template operator()<BFloat16>();
      EXPECT_EQ(sbad.item<int32_t>(), 0);
      EXPECT_TRUE(same_bits(out, sref)) << "scatter_add: the same additions in the same order";
    }
    // An entry out of range: flagged, and its output (garbage by contract) written as zero.
    std::vector<int64_t> bv = iv;
    bv[7] = 5;
    const Tensor bidx = from_vector<int64_t>(bv, {4, 3, 6});
    const Tensor got = nans({4, 3, 6}, dt), bad = zeros({1}, kI32);
    cu::dispatch_by_bytes(x.element_size(), [&](auto tag) {
      using U = typename decltype(tag)::type;
      simt::launch({dim3(2), dim3(cu::kThreads)},
                   [&] { cu::gather_kernel<U>(ptr<U>(x), ptr<int64_t>(bidx), ptr<U>(got), bidx.numel(), gg, ptr<int>(bad)); });
    });
    EXPECT_EQ(bad.item<int32_t>(), 1);
  }
}

TEST(SimtIndex, IndexAddOfEmbeddingGradientsMatchesTheCpu) {
  Generator g(7);
  const int64_t rows = 10, n = 60, skip = 4;
  for (int64_t inner : {int64_t{8}, int64_t{300}}) {
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " inner " + std::to_string(inner));
      std::vector<int64_t> iv(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) iv[static_cast<size_t>(i)] = (i * i + 3) % rows;  // repeats; some rows never hit
      const Tensor idx = from_vector<int64_t>(iv, {n});
      const Tensor src = randn({n, inner}, kF64, &g).to(dt);
      const Tensor dest0 = randn({rows, inner}, kF64, &g).to(dt);
      const Tensor ref = dest0.clone();
      cpu::index_add_(ref, 0, idx, src, skip);
      Tensor got[2];
      for (int o = 0; o < 2; ++o) {
        const Tensor dest = dest0.clone();
        std::vector<uint64_t> keys_in(static_cast<size_t>(n)), pos_in(static_cast<size_t>(n));
        simt::launch({dim3(1), dim3(cu::kThreads), 0, order_of(o)}, [&] {
          cu::index_add_keys_kernel(ptr<int64_t>(idx), n, rows, skip, keys_in.data(), pos_in.data());
        });
        // cub::DeviceRadixSort::SortPairs is stable: sort the positions by key, ties in order.
        std::vector<size_t> perm(static_cast<size_t>(n));
        std::iota(perm.begin(), perm.end(), size_t{0});
        std::stable_sort(perm.begin(), perm.end(), [&](size_t a, size_t b) { return keys_in[a] < keys_in[b]; });
        std::vector<uint64_t> keys(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
        for (size_t i = 0; i < perm.size(); ++i) {
          keys[i] = keys_in[perm[i]];
          pos[i] = pos_in[perm[i]];
        }
        const int threads = inner >= 256 ? 256 : static_cast<int>((inner + 31) / 32 * 32);  // as the host
        const auto rows_kernel = [&]<typename T>() {
          simt::launch({dim3(static_cast<unsigned>(n), 1), dim3(static_cast<unsigned>(threads)), 0, order_of(o)}, [&] {
            cu::index_add_rows_kernel<T>(ptr<T>(dest), ptr<T>(src), keys.data(), pos.data(), n, rows, inner, 1);
          });
        };
        if (dt == DType::F32) rows_kernel.template operator()<float>();
        else rows_kernel.template operator()<BFloat16>();
        got[o] = dest;
      }
      EXPECT_TRUE(same_bits(got[0], got[1])) << "depends on the thread order";
      // The kernel sums a row in f32 in entry order; the CPU sums f32 rows in f64 (bf16 in f32,
      // as the kernel: the same bits).
      if (dt == DType::F32) {
        EXPECT_LE(relative_error(got[0], ref), 1e-6);
      } else {
        EXPECT_TRUE(same_bits(got[0], ref));
      }
    }
  }
}

TEST(SimtIndex, OneHotMatchesTheCpu) {
  const Tensor idx = from_vector<int64_t>({3, 0, 2, 2, 4, 1, 0}, {7});
  const Tensor ref = cpu::one_hot(idx, 5);
  for (int o = 0; o < 2; ++o) {
    const Tensor out = full({7, 5}, -1, kI64);
    simt::launch({dim3(1), dim3(cu::kThreads), 0, order_of(o)},
                 [&] { cu::one_hot_kernel(ptr<int64_t>(idx), ptr<int64_t>(out), 35, 5); });
    EXPECT_EQ(out.to_vector<int64_t>(), ref.to_vector<int64_t>());
  }
}

}  // namespace
