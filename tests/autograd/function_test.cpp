// User-defined differentiable functions (autograd/function.h, NOTE [User functions]).
#include <cmath>

#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::LambdaFunction;
using autograd::TensorList;

namespace {

// ---- a fused SwiGLU, out = silu(a) * b, written the way a user would: its own loops ----

template <typename T>
T sigmoid_of(T z) {
  return T(1) / (T(1) + std::exp(-z));
}

// Contiguous copies in, a fresh contiguous tensor out; f32 and f64.
Tensor swiglu_forward_kernel(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = a_in.contiguous(), b = b_in.contiguous();
  Tensor out = empty(a.sizes(), a.dtype());
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = pa[i] * sigmoid_of(pa[i]) * pb[i];
  };
  if (a.dtype() == DType::F64) run(0.0); else run(0.0f);
  return out;
}

// d/da silu(a) b = b s (1 + a (1 - s)), d/db = silu(a); `wrong` drops the a (1 - s) term.
TensorList swiglu_backward_kernel(const Tensor& g_in, const Tensor& a_in, const Tensor& b_in, bool wrong = false) {
  const Tensor g = g_in.contiguous(), a = a_in.contiguous(), b = b_in.contiguous();
  Tensor ga = empty(a.sizes(), a.dtype()), gb = empty(a.sizes(), a.dtype());
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const T *pg = g.data<T>(), *pa = a.data<T>(), *pb = b.data<T>();
    T *pga = ga.data<T>(), *pgb = gb.data<T>();
    for (int64_t i = 0; i < a.numel(); ++i) {
      const T s = sigmoid_of(pa[i]);
      pga[i] = pg[i] * pb[i] * s * (T(1) + (wrong ? T(0) : pa[i] * (T(1) - s)));
      pgb[i] = pg[i] * pa[i] * s;
    }
  };
  if (a.dtype() == DType::F64) run(0.0); else run(0.0f);
  return {ga, gb};
}

int g_swiglu_forwards = 0;  // counts forward calls (checkpoint re-runs forward)

struct SwiGLU : autograd::Function<SwiGLU> {
  static constexpr const char* name = "SwiGLU";
  static Tensor forward(FunctionCtx& ctx, const Tensor& a, const Tensor& b) {
    ++g_swiglu_forwards;
    TRIDENT_CHECK(a.sizes() == b.sizes(), "gate and value shapes differ: ", a.sizes(), " vs ", b.sizes());
    ctx.save_for_backward({a, b});
    return swiglu_forward_kernel(a, b);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    const TensorList s = ctx.saved_tensors();
    return swiglu_backward_kernel(grads[0], s[0], s[1]);
  }
};

struct WrongSwiGLU : autograd::Function<WrongSwiGLU> {
  static constexpr const char* name = "WrongSwiGLU";
  static Tensor forward(FunctionCtx& ctx, const Tensor& a, const Tensor& b) {
    ctx.save_for_backward({a, b});
    return swiglu_forward_kernel(a, b);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    const TensorList s = ctx.saved_tensors();
    return swiglu_backward_kernel(grads[0], s[0], s[1], /*wrong=*/true);
  }
};

Tensor swiglu_composed(const Tensor& a, const Tensor& b) { return mul(mul(a, sigmoid(a)), b); }

// y = x^2 + c, with c passed as a non-tensor argument and saved as a value.
struct SquarePlus : autograd::Function<SquarePlus> {
  static constexpr const char* name = "SquarePlus";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, double c) {
    ctx.save_for_backward({x});
    ctx.save("c", c);
    return add(mul(x, x), c);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    EXPECT_EQ(ctx.get<double>("c"), 0.5);
    return {mul(mul(grads[0], ctx.saved_tensors()[0]), 2.0)};
  }
};

// A function whose backward returns whatever the test puts in `result`.
LambdaFunction returning(const std::string& name, std::function<TensorList(const TensorList&)> result) {
  return LambdaFunction(
      name, [](FunctionCtx& ctx, const TensorList& in) { return TensorList{mul(in[0], in[1])}; },
      [result](FunctionCtx& ctx, const TensorList& g) { return result(g); });
}

}  // namespace

TEST(Function, ClassFormKnownValues) {
  Tensor x = from_vector<double>({1.0, -2.0, 0.5}).set_requires_grad();
  Tensor y = SquarePlus::apply(x, 0.5);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1.5, 4.5, 0.75}));
  ASSERT_TRUE(y.requires_grad());
  EXPECT_EQ(y.grad_fn()->name(), "SquarePlusBackward");
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2.0, -4.0, 1.0}));
}

TEST(Function, LambdaFormKnownValuesAndUndefinedInputs) {
  // out = x * w, with an optional bias input left undefined (it gets no gradient).
  LambdaFunction scale(
      "Scale",
      [](FunctionCtx& ctx, const TensorList& in) {
        EXPECT_FALSE(in[2].defined());
        EXPECT_FALSE(ctx.needs_input_grad(2));
        ctx.save_for_backward({in[0], in[1]});
        return TensorList{mul(in[0], in[1])};
      },
      [](FunctionCtx& ctx, const TensorList& g) {
        const TensorList s = ctx.saved_tensors();
        return TensorList{mul(g[0], s[1]), sum(mul(g[0], s[0])), Tensor()};
      });
  Tensor x = from_vector<double>({1.0, 2.0, 3.0}).set_requires_grad();
  Tensor w = scalar_tensor(2.0, kF64).set_requires_grad();
  Tensor y = scale({x, w, Tensor()})[0];
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{2.0, 4.0, 6.0}));
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2.0, 2.0, 2.0}));
  EXPECT_EQ(w.grad().item<double>(), 6.0);
}

TEST(Function, GradcheckPassesOnTheFusedSwiGLU) {
  Tensor a = rand_leaf({3, 5}, 11), b = rand_leaf({3, 5}, 12);
  GradcheckResult r = gradcheck([](const TensorList& in) { return SwiGLU::apply(in[0], in[1]); }, {a, b});
  EXPECT_TRUE(grad_ok(r));
  EXPECT_EQ(r.compared, 2 * 15 * 15);
}

TEST(Function, GradcheckCatchesAWrongBackwardAndNamesTheElement) {
  // Hand-computed worst element: the dropped term is g b s a (1 - s), largest in |.| at
  // a = 2, b = -3 (index [1, 0]): -3 * s(2)^2 * 2 * (1 - s(2)) = -0.5664...
  Tensor a = from_vector<double>({0.5, -1.0, 2.0, 0.1}, {2, 2}).set_requires_grad();
  Tensor b = from_vector<double>({1.0, 2.0, -3.0, 0.5}, {2, 2}).set_requires_grad();
  GradcheckResult r = gradcheck([](const TensorList& in) { return WrongSwiGLU::apply(in[0], in[1]); }, {a, b});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.input, 0);
  EXPECT_EQ(r.input_index, 2);
  EXPECT_EQ(r.output_index, 2);
  const double s = 1.0 / (1.0 + std::exp(-2.0));
  EXPECT_NEAR(r.analytic, -3.0 * s, 1e-12);
  EXPECT_NEAR(r.numeric, -3.0 * s * (1.0 + 2.0 * (1.0 - s)), 1e-6);
  EXPECT_EQ(r.mismatches, 4);  // every diagonal entry of d out / d a (a != 0 everywhere)
  EXPECT_NE(r.report.find("d output 0[1, 0] / d input 0[1, 0] (value 2): analytic -2.64239"), std::string::npos)
      << r.report;
}

TEST(Function, WrongGradientCountNamesTheFunction) {
  Tensor x = rand_leaf({2}, 1), w = rand_leaf({2}, 2);
  Tensor y = returning("MyProduct", [](const TensorList& g) { return TensorList{g[0]}; })({x, w})[0];
  expect_error([&] { sum(y).backward(); },
               {"MyProductBackward", "MyProduct.backward returned 1 gradient, but MyProduct has 2 tensor inputs"});
}

TEST(Function, WrongGradientShapeOrDtypeNamesTheFunction) {
  Tensor x = rand_leaf({2, 3}, 1), w = rand_leaf({2, 3}, 2);
  Tensor y = returning("MyProduct", [](const TensorList& g) { return TensorList{g[0], sum(g[0], {0})}; })({x, w})[0];
  expect_error([&] { sum(y).backward(); },
               {"MyProduct.backward returned a gradient of shape [3] for input 1, which has shape [2, 3]"});
  Tensor z = returning("MyProduct", [](const TensorList& g) { return TensorList{g[0], g[0].to(DType::F32)}; })({x, w})[0];
  expect_error([&] { sum(z).backward(); }, {"MyProduct.backward returned a gradient of dtype f32 for input 1, which has dtype f64"});
  // A gradient for an undefined input is a mistake too.
  LambdaFunction f(
      "Opt", [](FunctionCtx&, const TensorList& in) { return TensorList{mul(in[0], 2.0)}; },
      [](FunctionCtx&, const TensorList& g) { return TensorList{g[0], g[0]}; });
  Tensor u = f({x, Tensor()})[0];
  expect_error([&] { sum(u).backward(); }, {"Opt.backward returned a gradient for input 1, which was an undefined tensor"});
}

TEST(Function, ErrorsInForwardNameTheFunction) {
  Tensor a = rand_leaf({2, 3}, 1), b = rand_leaf({3, 2}, 2);
  expect_error([&] { SwiGLU::apply(a, b); }, {"in forward of SwiGLU", "gate and value shapes differ: [2, 3] vs [3, 2]"});
}

TEST(Function, NoGradGuardRecordsNothing) {
  Tensor a = rand_leaf({4}, 1), b = rand_leaf({4}, 2);
  bool needs = true;
  LambdaFunction f(
      "Probe",
      [&](FunctionCtx& ctx, const TensorList& in) {
        needs = ctx.needs_input_grad(0) || ctx.needs_input_grad(1);
        return TensorList{mul(in[0], in[1])};
      },
      [](FunctionCtx&, const TensorList& g) -> TensorList { ADD_FAILURE() << "backward must not run"; return {g[0], g[0]}; });
  {
    NoGradGuard ng;
    Tensor y = f({a, b})[0];
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(y.grad_fn());
    EXPECT_FALSE(needs);
  }
  // Nothing requires grad: nothing is recorded either.
  Tensor y = f({a.detach(), b.detach()})[0];
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(all_close(y, mul(a, b).detach()));
}

TEST(Function, NeedsInputGradLetsBackwardSkipWork) {
  Tensor a = rand_leaf({4}, 1);
  Tensor b = rand_leaf({4}, 2).detach();  // a constant
  std::vector<bool> seen;
  LambdaFunction f(
      "Product",
      [&](FunctionCtx& ctx, const TensorList& in) {
        ctx.save_for_backward(in);
        return TensorList{mul(in[0], in[1])};
      },
      [&](FunctionCtx& ctx, const TensorList& g) {
        seen = {ctx.needs_input_grad(0), ctx.needs_input_grad(1)};
        const TensorList s = ctx.saved_tensors();
        return TensorList{mul(g[0], s[1]), ctx.needs_input_grad(1) ? mul(g[0], s[0]) : Tensor()};
      });
  sum(f({a, b})[0]).backward();
  EXPECT_EQ(seen, (std::vector<bool>{true, false}));
  EXPECT_TRUE(all_close(a.grad(), b));
}

TEST(Function, NonDifferentiableAndUnusedOutputs) {
  // Outputs: y = 2x (used), the argmax (int64: non-differentiable by dtype), a 0/1 mask in f64
  // marked non-differentiable, and z = x^3 (differentiable, unused by the loss).
  TensorList seen;
  LambdaFunction f(
      "Multi",
      [](FunctionCtx& ctx, const TensorList& in) {
        Tensor mask = gt(in[0], 0.0).to(DType::F64);
        ctx.mark_non_differentiable({mask});
        ctx.save_for_backward({in[0]});
        return TensorList{mul(in[0], 2.0), argmax(in[0]), mask, mul(mul(in[0], in[0]), in[0])};
      },
      [&](FunctionCtx& ctx, const TensorList& g) {
        seen = g;
        const Tensor x = ctx.saved_tensors()[0];
        return TensorList{add(mul(g[0], 2.0), mul(mul(mul(x, x), 3.0), g[3]))};
      });
  Tensor x = from_vector<double>({1.0, -2.0, 3.0}).set_requires_grad();
  TensorList out = f({x});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad());
  EXPECT_EQ(out[1].item<int64_t>(), 2);
  EXPECT_FALSE(out[2].requires_grad());
  EXPECT_EQ(out[2].to_vector<double>(), (std::vector<double>{1.0, 0.0, 1.0}));
  EXPECT_TRUE(out[3].requires_grad());
  sum(out[0]).backward();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_TRUE(seen[0].defined());
  EXPECT_FALSE(seen[1].defined());
  EXPECT_FALSE(seen[2].defined());
  ASSERT_TRUE(seen[3].defined());  // no gradient reached z: the engine gives zeros
  EXPECT_EQ(seen[3].to_vector<double>(), (std::vector<double>{0.0, 0.0, 0.0}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2.0, 2.0, 2.0}));
}

TEST(Function, SavedTensorsAreVersionChecked) {
  Tensor a = rand_leaf({3}, 1), b = rand_leaf({3}, 2);
  Tensor y = SwiGLU::apply(a, b);
  {
    NoGradGuard ng;
    add_(b, 1.0);  // modifies a saved input in place
  }
  expect_error([&] { sum(y).backward(); }, {"in backward of SwiGLUBackward", "SwiGLU: saved tensor 1",
                                            "modified by an in-place operation"});
}

TEST(Function, SavedValuesAreTyped) {
  LambdaFunction f(
      "Valued",
      [](FunctionCtx& ctx, const TensorList& in) {
        ctx.save("k", int64_t{3});
        return TensorList{mul(in[0], 3.0)};
      },
      [](FunctionCtx& ctx, const TensorList& g) {
        EXPECT_TRUE(ctx.has("k"));
        EXPECT_EQ(ctx.get<int64_t>("k"), 3);
        expect_error([&] { ctx.get<int64_t>("scale"); }, {"Valued: no value saved under \"scale\" (saved: k)"});
        expect_error([&] { ctx.get<double>("k"); }, {"Valued: the value saved under \"k\" has type"});
        return TensorList{mul(g[0], static_cast<double>(ctx.get<int64_t>("k")))};
      });
  Tensor x = rand_leaf({2}, 3);
  sum(f({x})[0]).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3.0, 3.0}));
}

TEST(Function, HooksOnOutputsAndInputs) {
  Tensor a = rand_leaf({3}, 1), b = rand_leaf({3}, 2);
  Tensor y = SwiGLU::apply(a, b);
  y.register_hook([](const Tensor& g) { return mul(g, 10.0); });  // scales what reaches the node
  int post = 0;
  a.register_hook([](const Tensor& g) { return mul(g, 0.5); });
  a.register_post_accumulate_grad_hook([&](const Tensor&) { ++post; });
  y.retain_grad();
  sum(y).backward();
  EXPECT_EQ(post, 1);
  EXPECT_TRUE(all_close(y.grad(), full({3}, 10.0, kF64)));
  const TensorList want = swiglu_backward_kernel(full({3}, 10.0, kF64), a.detach(), b.detach());
  EXPECT_TRUE(all_close(a.grad(), mul(want[0], 0.5), 1e-12));
  EXPECT_TRUE(all_close(b.grad(), want[1], 1e-12));
}

TEST(Function, CheckpointRematerializesThroughIt) {
  manual_seed(3);
  nn::Linear fc(6, 8, true, kF64);
  Tensor x = rand_leaf({4, 6}, 5), v = rand_leaf({4, 8}, 6);
  auto block = [&](const TensorList& in) { return TensorList{SwiGLU::apply(fc.forward(in[0]), in[1])}; };
  auto run = [&](bool ckpt) {
    x.zero_grad();
    v.zero_grad();
    fc.zero_grad();
    g_swiglu_forwards = 0;
    Tensor y = ckpt ? autograd::checkpoint(block, {x, v})[0] : block({x, v})[0];
    Tensor loss = sum(mul(y, y));
    loss.backward();
    return std::make_pair(g_swiglu_forwards, TensorList{loss.detach(), x.grad(), v.grad(), fc.weight.grad()});
  };
  const auto [plain_calls, plain] = run(false);
  const auto [ckpt_calls, ckpt] = run(true);
  EXPECT_EQ(plain_calls, 1);
  EXPECT_EQ(ckpt_calls, 2);  // forward, then the re-run during backward
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(all_close(plain[i], ckpt[i], 1e-12, 1e-14)) << "quantity " << i;
}

TEST(Function, ReturningAnInputAndBackwardTwice) {
  LambdaFunction identity(
      "Identity", [](FunctionCtx&, const TensorList& in) { return TensorList{in[0]}; },
      [](FunctionCtx&, const TensorList& g) { return TensorList{g[0]}; });
  Tensor x = rand_leaf({2}, 1);
  Tensor y = identity({x})[0];
  EXPECT_FALSE(y.is_same(x));
  EXPECT_TRUE(y.requires_grad());
  Tensor loss = sum(mul(y, 3.0));
  loss.backward({}, /*retain_graph=*/true);
  loss.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{6.0, 6.0}));
  expect_error([&] { loss.backward(); }, {"second time"});
}

// ---- a user-defined function inside a model trains like its composition from built-in ops ----

// y = swiglu(x Wg, x Wu) Wd over bare parameter tensors (examples/custom_op trains the same kind
// of block built from nn::Linear modules, against the installed package).
TEST(Function, ModelWithItTrainsLikeTheComposition) {
  Generator data(7);
  const Tensor x = randn({32, 6}, kF32, &data);
  const Tensor target = tanh(matmul(x, randn({6, 1}, kF32, &data)));
  std::vector<double> losses[2];
  for (int fused = 0; fused < 2; ++fused) {
    Generator init(42);  // the same initial weights for both runs
    std::vector<Tensor> w;
    for (const Shape& shape : {Shape{6, 16}, Shape{6, 16}, Shape{16, 1}})
      w.push_back(mul(randn(shape, kF32, &init), 0.4).set_requires_grad());
    nn::optim::SGD opt(w, {.lr = 0.05, .momentum = 0.9});
    for (int step = 0; step < 40; ++step) {
      const Tensor gate = matmul(x, w[0]), up = matmul(x, w[1]);
      const Tensor hidden = fused == 1 ? SwiGLU::apply(gate, up) : swiglu_composed(gate, up);
      Tensor loss = mse_loss(matmul(hidden, w[2]), target);
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses[fused].push_back(loss.item<double>());
    }
  }
  // f32 everywhere: the fused kernel and the composition round differently (a few ulps per
  // element), which 40 steps of SGD must not amplify beyond 1e-5 relative.
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-5 * losses[0][i]) << "step " << i;
  EXPECT_LT(losses[0].back(), 0.5 * losses[0].front());  // and it does train
}
