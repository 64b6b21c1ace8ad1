// NOTE [AVX-512 kernels]: on a CPU with AVX-512 the f32 row kernels (softmax, cross-entropy,
// layer norm, dropout, the unary math, attention's exponentials) run a version compiled for
// x86-64-v4, which every other
// test then checks; here each kernel runs both ways, the AVX-512 version and the ISA clones the
// other CPUs run (set_cpu_avx512_kernels_enabled_for_testing), and each f32 result (outputs and
// gradients) is compared with f64 on the same f32 values. Row lengths are not multiples of 16
// (vector remainders), and the softmax and cross-entropy dims are both innermost (row kernels)
// and not (column blocks). On a CPU without AVX-512 only the clones run.
#include <cmath>
#include <functional>
#include <limits>

#include "ops/cpu/isa.h"
#include "ops/cpu/sgemm.h"
#include "test_util.h"

using namespace trident;
using namespace trident::testing;

namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}

// a (f32) against the f64 reference b: |a - b| <= k eps (|b| + max |b|). The second term
// covers elements that are small only by cancellation (a gradient's g - sum(g y), a centred
// value), whose error is set by the row's largest terms.
::testing::AssertionResult near_f64(const Tensor& a, const Tensor& b, double k) {
  return all_close(a.to(kF64), b, k * kEps, k * kEps * max_abs(b));
}

// fn on f32 leaves and on f64 leaves holding the same (f32-rounded) values; the output and
// every leaf's gradient (for an output gradient g, also f32-rounded) within k eps of f64.
void check_f32(const std::vector<Tensor>& inputs, const std::function<Tensor(const std::vector<Tensor>&)>& fn, double k,
               uint64_t seed) {
  std::vector<Tensor> x32, x64;
  for (const Tensor& in : inputs) {
    x32.push_back(in.to(kF32).detach().set_requires_grad());
    x64.push_back(x32.back().to(kF64).detach().set_requires_grad());
  }
  const Tensor y32 = fn(x32), y64 = fn(x64);
  ASSERT_EQ(y32.dtype(), kF32);
  Generator gen(seed);
  const Tensor g64 = randn(y64.sizes(), kF32, &gen).to(kF64);
  y32.backward(g64.to(kF32));
  y64.backward(g64);
  EXPECT_TRUE(near_f64(y32, y64, k)) << "output";
  for (size_t i = 0; i < x32.size(); ++i) EXPECT_TRUE(near_f64(x32[i].grad(), x64[i].grad(), k)) << "gradient of input " << i;
}

}  // namespace

TEST(Avx512Kernels, SoftmaxAndLogSoftmaxBothWaysMatchF64) {
  // Rows of 1003 (the row kernel), dim 1 of [3, 70, 37] and [2, 20, 150] (column blocks of 37
  // and of 64 + 64 + 22 columns); logits of scale 4.
  with_and_without_avx512([](bool) {
    uint64_t seed = 100;
    for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{{{5, 1003}, 1}, {{3, 70, 37}, 1}, {{2, 20, 150}, 1}}) {
      for (bool log : {false, true}) {
        SCOPED_TRACE(detail::str(shape_str(shape), " dim ", dim, log ? " log_softmax" : " softmax"));
        check_f32({rand_leaf(shape, seed, 4.0)},
                  [&, dim = dim](const std::vector<Tensor>& x) { return log ? log_softmax(x[0], dim) : softmax(x[0], dim); }, 32, seed + 1);
        seed += 2;
      }
    }
  });
}

TEST(Avx512Kernels, CrossEntropyBothWaysMatchesF64) {
  // [13, 1001] logits (rows) and [4, 50, 9] (classes in dim 1: column blocks), with an ignored
  // target, label smoothing 0.1, mean reduction.
  with_and_without_avx512([](bool) {
    const Tensor t2 = from_vector<int64_t>({3, 1000, 0, -100, 17, 512, 999, 1, 2, 600, 700, 800, 5}, {13});
    std::vector<int64_t> t3v;
    for (int64_t i = 0; i < 36; ++i) t3v.push_back(i == 7 ? -100 : (i * 7) % 50);
    const Tensor t3 = from_vector<int64_t>(t3v, {4, 9});
    CrossEntropyOptions opt;
    opt.label_smoothing = 0.1;
    for (const auto& [logits, target] : std::vector<std::pair<Tensor, Tensor>>{{rand_leaf({13, 1001}, 200, 3.0), t2},
                                                                             {rand_leaf({4, 50, 9}, 201, 3.0), t3}}) {
      SCOPED_TRACE(shape_str(logits.sizes()));
      check_f32({logits}, [&, target = target](const std::vector<Tensor>& x) { return cross_entropy(x[0], target, opt); }, 32, 202);
    }
  });
}

TEST(Avx512Kernels, LayerNormBothWaysMatchesF64) {
  // Rows of 777 with weight and bias: the gradients of all three.
  with_and_without_avx512([](bool) {
    check_f32({rand_leaf({29, 777}, 300, 2.0), rand_leaf({777}, 301), rand_leaf({777}, 302)},
              [](const std::vector<Tensor>& x) { return layer_norm(x[0], {777}, x[1], x[2]); }, 64, 303);
  });
}

TEST(Avx512Kernels, UnaryMathBothWaysMatchesF64) {
  // Each op of the fast f32 math (NOTE [Fast f32 math]) and its backward over 1001 values.
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(abs(x)); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::Tanh); }},
      {"sqrt", [](const Tensor& x) { return sqrt(abs(x)); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(abs(x)); }},
  };
  with_and_without_avx512([&](bool) {
    uint64_t seed = 400;
    for (const auto& [name, op] : ops) {
      SCOPED_TRACE(name);
      check_f32({rand_leaf({7, 143}, seed, 3.0)}, [&, op = op](const std::vector<Tensor>& x) { return op(x[0]); }, 16, seed + 1);
      seed += 2;
    }
  });
}

TEST(Avx512Kernels, DropoutBothWaysKeepsTheSameElementsAsF64) {
  // The same generator state drops the same elements in f32 and f64 (the Philox stream does
  // not depend on the dtype), and the kept f32 values are x / (1 - p) rounded once.
  const Tensor x = rand_leaf({3, 1001}, 500);
  with_and_without_avx512([&](bool) {
    Generator g32(501), g64(501);
    const std::vector<float> y32 = dropout(x.to(kF32), 0.3, true, &g32).to_vector<float>();
    const std::vector<double> y64 = dropout(x.to(kF32).to(kF64), 0.3, true, &g64).to_vector<double>();
    int64_t kept = 0;
    for (size_t i = 0; i < y32.size(); ++i) {
      ASSERT_EQ(y32[i] == 0.0f, y64[i] == 0.0) << "element " << i;
      kept += y32[i] != 0.0f;
      EXPECT_NEAR(y32[i], y64[i], kEps * std::fabs(y64[i])) << "element " << i;
    }
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, static_cast<int64_t>(y32.size()));
  });
}

TEST(Avx512Kernels, AttentionBothWaysMatchesF64) {
  // NOTE [Attention exp rows]: the f32 attention (forward and backward: q, k and v gradients)
  // against f64 on the same values. 70 queries (two blocks of 64 rows, the second short) and
  // 70 or 45 keys (rows of exponentials not a multiple of 16); causal; a boolean padding mask
  // with a fully masked query row; dropout 0.2 (a fresh generator of the same seed for each
  // dtype, so both drop the same elements).
  with_and_without_avx512([](bool) {
    uint64_t seed = 600;
    for (int variant = 0; variant < 3; ++variant) {
      const int64_t Tk = variant == 1 ? 45 : 70;
      SCOPED_TRACE(variant == 0 ? "causal" : variant == 1 ? "padding mask" : "causal with dropout");
      std::vector<bool> keep(static_cast<size_t>(70 * Tk));
      for (int64_t i = 0; i < 70; ++i)
        for (int64_t j = 0; j < Tk; ++j) keep[static_cast<size_t>(i * Tk + j)] = i != 5 && (j + i) % 7 != 3;
      const Tensor mask = from_vector<bool>(keep, {70, Tk});
      check_f32({rand_leaf({2, 3, 70, 24}, seed), rand_leaf({2, 3, Tk, 24}, seed + 1), rand_leaf({2, 3, Tk, 24}, seed + 2)},
                [&](const std::vector<Tensor>& x) {
                  Generator dropout_gen(seed + 3);
                  AttentionOptions o;
                  o.is_causal = variant != 1;
                  if (variant == 1) o.attn_mask = mask;
                  if (variant == 2) {
                    o.dropout_p = 0.2;
                    o.generator = &dropout_gen;
                  }
                  return scaled_dot_product_attention(x[0], x[1], x[2], o);
                },
                64, seed + 4);
      seed += 5;
    }
  });
}

// TRIDENT_CPU_AVX512=off keeps the AVX-512 kernels off for the whole process (the AVX2 forms
// run, as on a CPU without AVX-512); auto, empty or unset leaves them to the CPU; anything
// else is an error naming the variable.
TEST(Avx512Kernels, EnvironmentChoice) {
  EXPECT_TRUE(avx512_choice_from_env(nullptr));
  EXPECT_TRUE(avx512_choice_from_env(""));
  EXPECT_TRUE(avx512_choice_from_env("auto"));
  EXPECT_FALSE(avx512_choice_from_env("off"));
  for (const char* bad : {"on", "0", "OFF"}) {
    try {
      avx512_choice_from_env(bad);
      ADD_FAILURE() << "no error for TRIDENT_CPU_AVX512=" << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("TRIDENT_CPU_AVX512=") + bad + ": expected off or auto"),
                std::string::npos)
          << e.what();
    }
  }
}

// Run by ctest with TRIDENT_CPU_AVX512=off (ops.avx512_off) and with a bad value
// (ops.avx512_bad_value); skipped in the plain run.
TEST(Avx512Kernels, TheEnvironmentTurnsThemOffForTheProcess) {
  const char* env = std::getenv("TRIDENT_CPU_AVX512");
  if (env == nullptr || std::string(env) != "off") GTEST_SKIP() << "needs TRIDENT_CPU_AVX512=off (ctest ops.avx512_off)";
  EXPECT_FALSE(avx512_allowed_by_env());
  EXPECT_FALSE(cpu::cpu_avx512_kernels());
  EXPECT_FALSE(cpu::sgemm_avx512_available());
  // The ops still run, on the AVX2 forms: a product and a softmax against f64.
  Generator g(11);
  Tensor a = randn({37, 29}, kF32, &g), b = randn({29, 41}, kF32, &g);
  EXPECT_TRUE(all_close(matmul(a, b).to(kF64), matmul(a.to(kF64), b.to(kF64)), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(softmax(a, -1).to(kF64), softmax(a.to(kF64), -1), 1e-6, 1e-7));
}

TEST(Avx512Kernels, ABadEnvironmentValueIsReportedByTheFirstOp) {
  const char* env = std::getenv("TRIDENT_CPU_AVX512");
  if (env == nullptr || std::string(env) != "avx2") GTEST_SKIP() << "needs TRIDENT_CPU_AVX512=avx2 (ctest ops.avx512_bad_value)";
  for (int i = 0; i < 2; ++i) {  // every op, not only the first
    try {
      Tensor y = add(ones({4, 4}), ones({4, 4}));
      ADD_FAILURE() << "no error for TRIDENT_CPU_AVX512=avx2";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("TRIDENT_CPU_AVX512=avx2: expected off or auto"), std::string::npos) << e.what();
    }
  }
  try {
    set_num_threads(1);
    ADD_FAILURE() << "set_num_threads: no error for TRIDENT_CPU_AVX512=avx2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TRIDENT_CPU_AVX512=avx2"), std::string::npos) << e.what();
  }
}
