// The indexing family on a GPU (ops/cuda/index.h) against the CPU on fresh random inputs:
// index_select, gather, scatter_add, embedding (with padding_idx) and one_hot, forward and
// gradients, in f32, f16 and bf16; repeated indices; errors worded as on the CPU; embedding
// backward bit-identical from run to run. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda/allocator.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

using namespace trident;
using trident::testing::error_message;
using trident::testing::relative_error;

namespace {

const Device kGPU = Device::cuda(0);


// Sums of a few f32 (or f64 on the CPU) terms rounded once to the dtype: its half ulp, with room
// for the f32 accumulation and the upstream product.
double tolerance(DType dt) {
  switch (dt) {
    case DType::F32: return 1e-6;
    case DType::F16: return 1e-3;
    case DType::BF16: return 8e-3;
    default: return 0;
  }
}

// scatter_add rounds to the dtype after every add (as the CPU does for f16/bf16): a few roundings
// per element here, whose errors add up like a random walk.
double scatter_tolerance(DType dt) { return 3 * tolerance(dt); }

// Indices in [0, limit) with many repeats: half from a few hot values, half uniform.
Tensor skewed_indices(const Shape& s, int64_t limit, Generator& g) {
  const Tensor hot = randint(0, std::min<int64_t>(limit, 5), s, kI64, &g);
  const Tensor any = randint(0, limit, s, kI64, &g);
  return where(gt(rand(s, kF64, &g), 0.5), hot, any);
}

class CudaIndex : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    TRIDENT_REQUIRE_CUDA();
    cuda::set_poison_allocations(true);  // an element a kernel forgets to write is NaN
  }
  void TearDown() override { cuda::set_poison_allocations(false); }
};

// Forward (exact: data movement) and the gradient (index_add_) against the f64 CPU.
TEST_P(CudaIndex, IndexSelectMatchesTheCpu) {
  const DType dt = GetParam();
  Generator g(11);
  for (const Shape& s : std::vector<Shape>{{7, 33, 5}, {40, 3}, {1000}}) {
    for (int64_t dim = 0; dim < static_cast<int64_t>(s.size()); ++dim) {
      SCOPED_TRACE("shape " + shape_str(s) + " dim " + std::to_string(dim));
      const Tensor x = randn(s, kF64, &g).to(dt);
      const Tensor idx = skewed_indices({s[static_cast<size_t>(dim)] + 3}, s[static_cast<size_t>(dim)], g);
      Tensor xr = x.to(kF64).detach().set_requires_grad();
      Tensor xd = x.to(kGPU).detach().set_requires_grad();
      const Tensor ref = index_select(xr, dim, idx);
      const Tensor got = index_select(xd, dim, idx.to(kGPU));
      ASSERT_EQ(got.device(), kGPU);
      EXPECT_EQ(got.to_vector<double>(), ref.to_vector<double>());
      const Tensor w = randn(ref.sizes(), kF64, &g).to(dt);
      sum(mul(ref, w.to(kF64))).backward();
      sum(mul(got, w.to(kGPU))).backward();
      EXPECT_LE(relative_error(xd.grad(), xr.grad()), tolerance(dt));
    }
  }
  // Any dtype moves: i64 and a transposed (non-contiguous) input; an i32 index.
  const Tensor xi = randint(-50, 50, {9, 6}, kI64, &g);
  const Tensor ii = from_vector<int32_t>({5, 0, 5, 2});
  EXPECT_EQ(index_select(transpose(xi.to(kGPU), 0, 1), 1, ii.to(kGPU)).to_vector<int64_t>(),
            index_select(transpose(xi, 0, 1), 1, ii).to_vector<int64_t>());
}

TEST_P(CudaIndex, GatherMatchesTheCpu) {
  const DType dt = GetParam();
  Generator g(12);
  const Shape xs{6, 9, 5};
  for (int64_t dim = 0; dim < 3; ++dim) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    Shape is{4, 7, 3};
    is[static_cast<size_t>(dim)] = 11;  // longer than x along dim: repeats
    const Tensor x = randn(xs, kF64, &g).to(dt);
    const Tensor idx = skewed_indices(is, xs[static_cast<size_t>(dim)], g);
    Tensor xr = x.to(kF64).detach().set_requires_grad();
    Tensor xd = x.to(kGPU).detach().set_requires_grad();
    const Tensor ref = gather(xr, dim, idx);
    const Tensor got = gather(xd, dim, idx.to(kGPU));
    EXPECT_EQ(got.to_vector<double>(), ref.to_vector<double>());
    const Tensor w = randn(ref.sizes(), kF64, &g).to(dt);
    sum(mul(ref, w.to(kF64))).backward();  // the gradient is a scatter_add with repeats
    sum(mul(got, w.to(kGPU))).backward();
    EXPECT_LE(relative_error(xd.grad(), xr.grad()), scatter_tolerance(dt));
  }
  // A permuted input reads through its strides.
  const Tensor x = randn({5, 8}, kF64, &g).to(dt);
  const Tensor idx = randint(0, 5, {8, 3}, kI64, &g);
  EXPECT_EQ(gather(transpose(x.to(kGPU), 0, 1), 1, idx.to(kGPU)).to_vector<double>(),
            gather(transpose(x, 0, 1), 1, idx).to_vector<double>());
}

TEST_P(CudaIndex, ScatterAddMatchesTheCpu) {
  const DType dt = GetParam();
  Generator g(13);
  const Shape xs{6, 9, 5}, ss{5, 11, 6};
  for (int64_t dim = 0; dim < 3; ++dim) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    Shape is{4, 8, 3};
    is[static_cast<size_t>(dim)] = 5;
    const Tensor x = randn(xs, kF64, &g).to(dt), src = randn(ss, kF64, &g).to(dt);
    const Tensor idx = skewed_indices(is, xs[static_cast<size_t>(dim)], g);
    Tensor xr = x.to(kF64).detach().set_requires_grad(), sr = src.to(kF64).detach().set_requires_grad();
    Tensor xd = x.to(kGPU).detach().set_requires_grad(), sd = src.to(kGPU).detach().set_requires_grad();
    const Tensor ref = scatter_add(xr, dim, idx, sr);
    const Tensor got = scatter_add(xd, dim, idx.to(kGPU), sd);
    ASSERT_EQ(got.device(), kGPU);
    EXPECT_LE(relative_error(got, ref), scatter_tolerance(dt));
    const Tensor w = randn(ref.sizes(), kF64, &g).to(dt);
    sum(mul(ref, w.to(kF64))).backward();
    sum(mul(got, w.to(kGPU))).backward();
    EXPECT_EQ(xd.grad().to_vector<double>(), xr.grad().to_vector<double>());  // the identity
    EXPECT_EQ(sd.grad().to_vector<double>(), sr.grad().to_vector<double>());  // a gather, 0 off index
  }
}

TEST_P(CudaIndex, EmbeddingWithPaddingMatchesTheCpuAndIsBitReproducible) {
  const DType dt = GetParam();
  Generator g(14);
  struct Case {
    int64_t rows, width;
    Shape idx;
    std::optional<int64_t> pad;
  };
  // GPT-2's vocabulary and a batch of tokens; a narrow table with a negative padding_idx.
  for (const Case& c : std::vector<Case>{{50257, 96, {4, 64}, 3}, {37, 33, {3, 50}, -2}, {10, 1, {17}, std::nullopt}}) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " width " + std::to_string(c.width));
    const Tensor wt = randn({c.rows, c.width}, kF64, &g).to(dt);
    Tensor idx = skewed_indices(c.idx, c.rows, g);
    if (c.pad) {  // make sure the padding row is looked up, several times
      const int64_t pad_row = *c.pad < 0 ? *c.pad + c.rows : *c.pad;
      idx = where(lt(rand(c.idx, kF64, &g), 0.2), full(c.idx, static_cast<double>(pad_row), kI64), idx);
    }
    Tensor wr = wt.to(kF64).detach().set_requires_grad();
    Tensor wd = wt.to(kGPU).detach().set_requires_grad();
    const Tensor ref = embedding(wr, idx, c.pad);
    const Tensor got = embedding(wd, idx.to(kGPU), c.pad);
    ASSERT_EQ(got.sizes(), ref.sizes());
    EXPECT_EQ(got.to_vector<double>(), ref.to_vector<double>());
    const Tensor up = randn(ref.sizes(), kF64, &g).to(dt);
    sum(mul(ref, up.to(kF64))).backward();
    sum(mul(got, up.to(kGPU))).backward();
    const Tensor gd = wd.grad().to(kCPU);
    EXPECT_LE(relative_error(gd, wr.grad()), tolerance(dt));
    if (c.pad) {
      const int64_t pad_row = *c.pad < 0 ? *c.pad + c.rows : *c.pad;
      const std::vector<double> row = select(gd, 0, pad_row).to_vector<double>();
      EXPECT_EQ(row, std::vector<double>(static_cast<size_t>(c.width), 0.0)) << "padding row " << pad_row;
    }
    // Run again: the same bits (no atomics in index_add_).
    Tensor wd2 = wt.to(kGPU).detach().set_requires_grad();
    sum(mul(embedding(wd2, idx.to(kGPU), c.pad), up.to(kGPU))).backward();
    const Tensor a = gd.to(kF32), b = wd2.grad().to(kCPU).to(kF32);
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << "embedding backward is not bit-reproducible";
  }
  // i32 indices and a 0-dim index.
  const Tensor wt = randn({6, 4}, kF64, &g).to(dt);
  EXPECT_EQ(embedding(wt.to(kGPU), from_vector<int32_t>({5, 0, 5}).to(kGPU)).to_vector<double>(),
            embedding(wt, from_vector<int32_t>({5, 0, 5})).to_vector<double>());
  EXPECT_EQ(embedding(wt.to(kGPU), scalar_tensor(2, kI64).to(kGPU)).sizes(), (Shape{4}));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaIndex, ::testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

TEST(CudaIndexOps, IntegerScatterAddAndOneHotAreExact) {
  TRIDENT_REQUIRE_CUDA();
  Generator g(15);
  const Tensor x = randint(-9, 9, {5, 7}, kI64, &g), src = randint(-9, 9, {6, 7}, kI64, &g);
  const Tensor idx = randint(0, 5, {6, 7}, kI64, &g);
  EXPECT_EQ(scatter_add(x.to(kGPU), 0, idx.to(kGPU), src.to(kGPU)).to_vector<int64_t>(),
            scatter_add(x, 0, idx, src).to_vector<int64_t>());
  const Tensor xi = x.to(kI32), si = src.to(kI32);
  const Tensor idx1 = randint(0, 7, {5, 7}, kI64, &g);  // along dim 1, with repeats
  EXPECT_EQ(scatter_add(xi.to(kGPU), 1, idx1.to(kGPU), si.to(kGPU)).to_vector<int64_t>(),
            scatter_add(xi, 1, idx1, si).to_vector<int64_t>());
  for (const Shape& s : std::vector<Shape>{{3, 17}, {1000}, {0}}) {
    const Tensor i = randint(0, 13, s, kI64, &g);
    EXPECT_EQ(one_hot(i.to(kGPU), 13).to_vector<int64_t>(), one_hot(i, 13).to_vector<int64_t>());
    if (i.numel() > 0) {  // num_classes inferred from the largest index (a device reduction)
      const Tensor got = one_hot(i.to(kGPU));
      const Tensor ref = one_hot(i);
      EXPECT_EQ(got.sizes(), ref.sizes());
      EXPECT_EQ(got.to_vector<int64_t>(), ref.to_vector<int64_t>());
    }
  }
  // The largest index is found wherever it is (the last element of a long tensor).
  Tensor big = zeros({70001}, kI64);
  big.data<int64_t>()[70000] = 40;
  EXPECT_EQ(one_hot(big.to(kGPU)).size(1), 41);
}

// An index out of range is the CPU's error, word for word (the device finds the first bad entry).
TEST(CudaIndexOps, OutOfRangeIndicesGiveTheCpuError) {
  TRIDENT_REQUIRE_CUDA();
  const Tensor x = randn({5, 4});
  const Tensor xd = x.to(kGPU);
  auto same = [](const std::function<void()>& cpu, const std::function<void()>& gpu, const std::string& part) {
    const std::string want = error_message(cpu), got = error_message(gpu);
    EXPECT_NE(want.find(part), std::string::npos) << want;
    EXPECT_EQ(got, want);
  };
  // Many bad entries: the first is reported; it lies past a whole block of good ones.
  Tensor long_idx = zeros({10000}, kI64);
  long_idx.data<int64_t>()[4097] = 7;
  long_idx.data<int64_t>()[9000] = -1;
  same([&] { index_select(x, 0, long_idx); }, [&] { index_select(xd, 0, long_idx.to(kGPU)); }, "index 7 at position [4097]");
  const Tensor neg = from_vector<int64_t>({0, 1, -3, 2}, {2, 2});
  same([&] { embedding(x, neg); }, [&] { embedding(xd, neg.to(kGPU)); }, "index -3 at position [1, 0]");
  const Tensor gi = from_vector<int64_t>({0, 4, 1, 0}, {2, 2});
  same([&] { gather(x, 1, gi); }, [&] { gather(xd, 1, gi.to(kGPU)); }, "index 4 at position [0, 1]");
  same([&] { scatter_add(x, 1, gi, ones({2, 2})); }, [&] { scatter_add(xd, 1, gi.to(kGPU), ones({2, 2}, kGPU)); },
       "index 4 at position [0, 1]");
  same([&] { one_hot(gi, 3); }, [&] { one_hot(gi.to(kGPU), 3); }, "num_classes 3");
  // The index must be on the data's device.
  const std::string mixed = error_message([&] { index_select(xd, 0, from_vector<int64_t>({0})); });
  EXPECT_NE(mixed.find("cuda:0"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("index_select"), std::string::npos) << mixed;
}

}  // namespace
