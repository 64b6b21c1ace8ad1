// The CUDA reduction kernels (ops/cuda/reduce.cu) on the SIMT emulator (NOTE [Kernels on the CPU
// emulator] in tests/simt/simt.h) against the CPU kernels in f64 on the same (rounded) inputs:
// the column kernels (NOTE [CUDA column reductions]) with and without 16-byte packs of columns
// (changed after the one GPU run: packs of 4 f32 or 8 bf16/f16 columns, a partial last block of
// columns, an unaligned x), r split across grid.y as a 132-multiprocessor GPU would split it,
// and the row kernels (a warp or the block per row, packed loads) for sums, means, extrema with
// their indices (ties, NaN), variance, log-sum-exp and norms. Both thread orders, same bits.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "ops/cuda/reduce.cu"

#include <gtest/gtest.h>

#include <string>

#include "ops/cpu/reduce.h"
#include "simt/simt_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::simt_testing;
namespace cu = trident::cuda;

namespace {

constexpr int kH200Sms = 132;

Tensor f64(const Tensor& t) { return t.to(kF64); }

const char* op_name(cu::RowOp op) {
  switch (op) {
    case cu::RowOp::Sum: return "sum";
    case cu::RowOp::Mean: return "mean";
    case cu::RowOp::Max: return "max";
    case cu::RowOp::Min: return "min";
    case cu::RowOp::ArgMax: return "argmax";
    case cu::RowOp::ArgMin: return "argmin";
    case cu::RowOp::Var: return "var";
    case cu::RowOp::LogSumExp: return "logsumexp";
    case cu::RowOp::NormP: return "norm p";
    case cu::RowOp::NormInf: return "norm inf";
    case cu::RowOp::NormNegInf: return "norm -inf";
    case cu::RowOp::Norm0: return "norm 0";
  }
  return "?";
}

// The CPU's result over `dims` (f64).
Tensor reference(cu::RowOp op, const Tensor& x, const std::vector<int64_t>& dims, float p) {
  switch (op) {
    case cu::RowOp::Sum: return cpu::reduce(cpu::ReduceKind::Sum, x, dims, false, kF64);
    case cu::RowOp::Mean: return cpu::reduce(cpu::ReduceKind::Mean, x, dims, false, kF64);
    case cu::RowOp::Max: return cpu::extreme(true, x, dims, false);
    case cu::RowOp::Min: return cpu::extreme(false, x, dims, false);
    case cu::RowOp::ArgMax: return cpu::extreme_index(true, x, dims, false).first;
    case cu::RowOp::ArgMin: return cpu::extreme_index(false, x, dims, false).first;
    case cu::RowOp::Var: return cpu::var(x, dims, 1.0, false, false);
    case cu::RowOp::LogSumExp: return cpu::logsumexp(x, dims, false);
    case cu::RowOp::NormP: return cpu::norm(x, p, dims, false);
    case cu::RowOp::NormInf: return cpu::norm(x, INFINITY, dims, false);
    case cu::RowOp::NormNegInf: return cpu::norm(x, -INFINITY, dims, false);
    case cu::RowOp::Norm0: return cpu::norm(x, 0.0, dims, false);
  }
  return Tensor();
}

template <typename T>
void column_case(DType dt, int64_t outer, int64_t r, int64_t inner, bool unaligned, bool expect_packed, uint64_t seed) {
  Generator g(seed);
  // An unaligned x: the same values one element into a larger buffer.
  const Tensor base = randn({outer * r * inner + 1}, kF64, &g).to(dt);
  const Tensor x = reshape(narrow(base, 0, unaligned ? 1 : 0, outer * r * inner), {outer, r, inner});
  for (cu::RowOp op : {cu::RowOp::Sum, cu::RowOp::Mean, cu::RowOp::Max, cu::RowOp::Min, cu::RowOp::NormP,
                       cu::RowOp::NormInf, cu::RowOp::Norm0}) {
    const float p = op == cu::RowOp::NormP ? 2.f : 0.f;
    SCOPED_TRACE(std::string(op_name(op)) + " " + std::string(dtype_name(dt)) + " [" + std::to_string(outer) + ", " +
                 std::to_string(r) + ", " + std::to_string(inner) + "]" + (unaligned ? " unaligned" : ""));
    const cu::ColLaunch l = cu::column_launch(op, outer, r, inner, p, 16 / static_cast<int64_t>(sizeof(T)),
                                              reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0, kH200Sms);
    EXPECT_EQ(l.packed, expect_packed);
    EXPECT_GT(l.prm.splits, 1) << "the case should split r";
    Tensor got[2];
    for (int o = 0; o < 2; ++o) {
      const simt::Order order = o == 0 ? simt::Order::Forward : simt::Order::Reverse;
      const Tensor partial = nans({l.prm.splits, outer, inner}, kF32);
      got[o] = nans({outer, inner}, dt);
      constexpr int V = 16 / sizeof(T);
      // The second run also gives grid.z fewer blocks than outer (as the host does past 65535),
      // so a block takes several outer indices in turn.
      dim3 grid = l.grid;
      if (o == 1) grid.z = std::min<unsigned>(grid.z, 2);
      simt::launch({grid, dim3(256), 0, order}, [&] {
        if (l.packed) cu::reduce_cols_kernel<T, V>(ptr<T>(x), l.prm, ptr<float>(partial));
        else cu::reduce_cols_kernel<T, 1>(ptr<T>(x), l.prm, ptr<float>(partial));
      });
      simt::launch({dim3(2), dim3(256), 0, order}, [&] { cu::finish_cols_kernel<T>(ptr<float>(partial), l.prm, ptr<T>(got[o])); });
    }
    EXPECT_TRUE(same_bits(got[0], got[1])) << "depends on the thread order or on grid.z";
    const bool exact = op == cu::RowOp::Max || op == cu::RowOp::Min || op == cu::RowOp::NormInf || op == cu::RowOp::Norm0;
    const Tensor ref = reference(op, f64(x), {1}, p);
    if (exact) {
      EXPECT_TRUE(same_bits(got[0], ref.to(dt))) << "an extremum or a count is exact";
    } else {
      EXPECT_LE(relative_error(got[0], ref), tolerance(dt, false));
    }
  }
}

TEST(SimtReduce, ColumnReductionsMatchTheCpu) {
  column_case<float>(DType::F32, 3, 1000, 132, false, true, 1);      // packs of 4; a partial last block of 128 columns
  column_case<BFloat16>(DType::BF16, 2, 700, 64, false, true, 2);    // packs of 8
  column_case<Half>(DType::F16, 3, 300, 70, false, false, 3);        // 70 columns: not a multiple of 8
  column_case<float>(DType::F32, 2, 500, 40, true, false, 4);        // x not 16-byte aligned
}

template <typename T>
void row_case(DType dt, int64_t rows, int64_t n, uint64_t seed) {
  Generator g(seed);
  Tensor x64 = randn({rows, n}, kF64, &g);
  {  // ties for the arg-extrema in row 1, a NaN in row 2 (wins both)
    double* d = static_cast<double*>(x64.data_ptr());
    d[n + 3] = d[n + n - 2] = 9.0;
    d[n + 5] = d[n + n - 1] = -9.0;
    if (rows > 2) d[2 * n + n / 2] = NAN;
  }
  const Tensor x = x64.to(dt);
  const bool packed = n % (16 / static_cast<int64_t>(sizeof(T))) == 0;
  for (cu::RowOp op : {cu::RowOp::Sum, cu::RowOp::Mean, cu::RowOp::Max, cu::RowOp::ArgMax, cu::RowOp::ArgMin,
                       cu::RowOp::Var, cu::RowOp::LogSumExp, cu::RowOp::NormP, cu::RowOp::NormNegInf}) {
    const float p = op == cu::RowOp::NormP ? 3.f : 0.f;
    SCOPED_TRACE(std::string(op_name(op)) + " " + std::string(dtype_name(dt)) + " rows " + std::to_string(rows) + " n " +
                 std::to_string(n));
    const cu::RowParams prm{op, rows, n, p, static_cast<float>(n - 1), false, cu::row_threads(n), packed};
    Tensor got[2], idx[2];
    for (int o = 0; o < 2; ++o) {
      got[o] = nans({rows}, dt);
      idx[o] = full({rows}, -7, DType::I64);
      simt::launch({dim3(2), dim3(256), 0, o == 0 ? simt::Order::Forward : simt::Order::Reverse},
                   [&] { cu::reduce_rows_kernel<T>(ptr<T>(x), prm, ptr<T>(got[o]), ptr<int64_t>(idx[o])); });
    }
    EXPECT_TRUE(same_bits(got[0], got[1]) && same_bits(idx[0], idx[1])) << "depends on the thread order";
    const bool indexed = op == cu::RowOp::ArgMax || op == cu::RowOp::ArgMin;
    const Tensor ref = reference(op, f64(x), {1}, p);
    if (indexed) {
      const auto [vals, ind] = cpu::extreme_index(op == cu::RowOp::ArgMax, f64(x), {1}, false);
      EXPECT_EQ(idx[0].template to_vector<int64_t>(), ind.template to_vector<int64_t>()) << "indices";
      EXPECT_TRUE(same_bits(got[0], vals.to(dt))) << "values";
    } else if (op == cu::RowOp::Max || op == cu::RowOp::NormNegInf) {
      EXPECT_TRUE(same_bits(got[0], ref.to(dt)));
    } else {
      // NaN rows give NaN on both sides; compare the others.
      const std::vector<double> a = got[0].template to_vector<double>(), b = ref.template to_vector<double>();
      for (int64_t i = 0; i < rows; ++i) {
        if (std::isnan(b[static_cast<size_t>(i)])) {
          EXPECT_TRUE(std::isnan(a[static_cast<size_t>(i)])) << "row " << i;
          continue;
        }
        EXPECT_NEAR(a[static_cast<size_t>(i)], b[static_cast<size_t>(i)], 2 * tolerance(dt, false) * (1 + std::abs(b[static_cast<size_t>(i)])))
            << "row " << i;
      }
    }
  }
}

TEST(SimtReduce, RowReductionsMatchTheCpu) {
  row_case<float>(DType::F32, 19, 100, 5);       // a warp per row
  row_case<BFloat16>(DType::BF16, 5, 1600, 6);   // the block per row, packed
  row_case<Half>(DType::F16, 9, 1030, 7);        // the block per row, not packed
}

}  // namespace
