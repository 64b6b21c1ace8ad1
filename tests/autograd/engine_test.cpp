#include <gtest/gtest.h>

#include "trident.h"

using namespace trident;

namespace {
Tensor leaf(std::vector<double> v, Shape s = {}) { return from_vector<double>(v, s).set_requires_grad(); }
std::vector<double> grad_of(const Tensor& t) { return t.grad().to_vector<double>(); }
}  // namespace

TEST(Autograd, SimpleChain) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = sum(mul(mul(x, x), 3.0));  // d/dx 3x^2 = 6x
  y.backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{6, 12, 18}));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), "SumBackward");
}

TEST(Autograd, DiamondGraphSumsBothPaths) {
  // a -> b = 2a, c = a^2 -> d = b * c = 2a^3: dd/da = 6a^2.
  Tensor a = leaf({2.0});
  Tensor b = mul(a, 2.0);
  Tensor c = mul(a, a);
  Tensor d = mul(b, c);
  d.backward();
  EXPECT_EQ(grad_of(a), (std::vector<double>{24.0}));
}

TEST(Autograd, SharedSubexpressionRunsOnce) {
  Tensor x = leaf({1.0, -2.0});
  Tensor s = add(x, 1.0);
  int runs = 0;
  s.register_hook([&](const Tensor&) {
    ++runs;
    return Tensor();
  });
  Tensor y = sum(add(add(mul(s, s), s), mul(s, 4.0)));  // s^2 + 5s: dy/dx = 2s + 5
  y.backward();
  EXPECT_EQ(runs, 1) << "s's node must run once with the summed gradient";
  EXPECT_EQ(grad_of(x), (std::vector<double>{9.0, 3.0}));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1.0, 2.0});
  sum(mul(x, 3.0)).backward();
  sum(mul(x, 2.0)).backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{5, 5}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  sum(x).backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{1, 1}));
  x.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(grad_of(x), (std::vector<double>{0, 0}));
}

TEST(Autograd, HeldGradIsNotChangedBehindTheUsersBack) {
  Tensor x = leaf({1.0});
  sum(x).backward();
  Tensor held = x.grad();
  sum(x).backward();
  EXPECT_EQ(held.item<double>(), 1.0);
  EXPECT_EQ(x.grad().item<double>(), 2.0);
}

TEST(Autograd, RetainGraphAllowsASecondBackward) {
  Tensor x = leaf({3.0});
  Tensor y = mul(x, x);
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{12.0}));
  try {
    y.backward();
    FAIL() << "a third backward through a freed graph must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MulBackward"), std::string::npos) << e.what();
  }
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = leaf({1.0});
  Tensor y;
  {
    NoGradGuard g;
    y = mul(x, 2.0);
    {
      autograd::EnableGradGuard e;
      EXPECT_TRUE(mul(x, 2.0).requires_grad());
    }
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_FALSE(y.grad_fn());
  EXPECT_THROW(y.backward(), Error);
  EXPECT_TRUE(mul(x, 2.0).requires_grad());
}

TEST(Autograd, DetachCutsTheGraphButSharesStorage) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = mul(x, 2.0);
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.storage(), y.storage());
  Tensor z = sum(add(mul(d, x), y));  // d is a constant: dz/dx = d + 2
  z.backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{4, 6}));
}

TEST(Autograd, HooksRunInOrderAndCanReplaceTheGradient) {
  Tensor x = leaf({1.0});
  Tensor y = mul(x, 3.0);
  std::vector<std::string> order;
  y.register_hook([&](const Tensor& g) {
    order.push_back("y1:" + std::to_string(g.item<double>()));
    return mul(g, 10.0);
  });
  y.register_hook([&](const Tensor& g) {
    order.push_back("y2:" + std::to_string(g.item<double>()));
    return Tensor();
  });
  x.register_hook([&](const Tensor& g) {
    order.push_back("x:" + std::to_string(g.item<double>()));
    return Tensor();
  });
  x.register_post_accumulate_grad_hook([&](const Tensor& p) {
    order.push_back("post:" + std::to_string(p.grad().item<double>()));
  });
  sum(y).backward();
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0], "y1:1.000000");
  EXPECT_EQ(order[1], "y2:10.000000");  // the second hook sees the first's replacement
  EXPECT_EQ(order[2], "x:30.000000");
  EXPECT_EQ(order[3], "post:30.000000");
  EXPECT_EQ(grad_of(x), (std::vector<double>{30.0}));
}

TEST(Autograd, PostAccumulateHookFiresOnceWithTheFinalGradient) {
  // A parameter used three times: the hook must fire once, after all three contributions.
  Tensor w = leaf({1.0});
  std::vector<double> seen;
  w.register_post_accumulate_grad_hook([&](const Tensor& p) { seen.push_back(p.grad().item<double>()); });
  Tensor x = from_vector<double>({2.0});
  Tensor h = mul(x, w);
  h = mul(h, w);
  h = mul(h, w);  // x w^3: d/dw = 3 x w^2 = 6
  h.backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], 6.0);
}

TEST(Autograd, PostAccumulateHooksFireInReverseOrderOfUse) {
  // Parameters used later in forward get their gradients first: what data parallelism
  // relies on to start all-reducing early.
  std::vector<Tensor> ws;
  std::vector<int> order;
  for (int i = 0; i < 4; ++i) {
    ws.push_back(leaf({1.0 + i}));
    ws.back().register_post_accumulate_grad_hook([&order, i](const Tensor&) { order.push_back(i); });
  }
  Tensor h = from_vector<double>({1.0});
  for (const Tensor& w : ws) h = mul(h, w);
  h.backward();
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0}));
}

TEST(Autograd, RetainGradKeepsNonLeafGradients) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = mul(x, 2.0);
  y.retain_grad();
  Tensor z = mul(y, y);
  sum(z).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{4, 8}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{8, 16}));
  Tensor w = mul(x, 2.0);
  sum(w).backward();
  EXPECT_FALSE(w.grad().defined()) << "non-leaves keep no gradient unless asked";
}

TEST(Autograd, InPlaceModificationOfASavedTensorIsAnError) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = mul(x, x);  // saves x
  {
    NoGradGuard g;
    add_(x, 1.0);
  }
  try {
    sum(y).backward();
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("modified by an in-place operation"), std::string::npos) << m;
    EXPECT_NE(m.find("version 0"), std::string::npos) << m;
    EXPECT_NE(m.find("MulBackward"), std::string::npos) << m;
  }
}

TEST(Autograd, InPlaceThroughAViewIsCaughtToo) {
  Tensor x = leaf({1.0, 2.0, 3.0, 4.0});
  Tensor base = mul(x, 1.0);
  Tensor y = mul(base, base);  // saves base
  Tensor v = reshape(base, {2, 2}).detach();
  {
    NoGradGuard g;
    mul_(v, 2.0);  // writes base's storage through a view
  }
  EXPECT_THROW(sum(y).backward(), Error);
}

TEST(Autograd, InPlaceOnTensorsThatRequireGradIsRefusedUnderGradMode) {
  Tensor x = leaf({1.0});
  EXPECT_THROW(add_(x, 1.0), Error);
  EXPECT_THROW(add_(zeros({1}, kF64), x), Error);
  NoGradGuard g;
  add_(x, 1.0);
  EXPECT_EQ(x.item<double>(), 2.0);
}

TEST(Autograd, BackwardWithExplicitGradient) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = mul(x, 3.0);
  y.backward(from_vector<double>({1.0, 10.0}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{3, 30}));
  Tensor z = mul(x, 3.0);
  EXPECT_THROW(z.backward(), Error);  // non-scalar without a gradient
  EXPECT_THROW(z.backward(from_vector<double>({1.0})), Error);
  EXPECT_THROW(z.backward(from_vector<float>({1.f, 1.f})), Error);
}

TEST(Autograd, MultipleRootsAndGradFunction) {
  Tensor x = leaf({2.0});
  Tensor a = mul(x, x), b = mul(x, 5.0);
  autograd::backward({a, b});
  EXPECT_EQ(grad_of(x), (std::vector<double>{9.0}));
  // grad() returns gradients without touching .grad.
  Tensor c = mul(mul(x, x), x);
  autograd::TensorList g = autograd::grad({c}, {x});
  EXPECT_EQ(g[0].item<double>(), 12.0);
  EXPECT_EQ(grad_of(x), (std::vector<double>{9.0}));
  Tensor unused = leaf({1.0});
  EXPECT_THROW(autograd::grad({mul(x, 2.0)}, {unused}), Error);
  EXPECT_FALSE(autograd::grad({mul(x, 2.0)}, {unused}, {}, false, /*allow_unused=*/true)[0].defined());
}

TEST(Autograd, OnlyFloatingLeavesRequireGrad) {
  EXPECT_THROW(zeros({2}, kI64).set_requires_grad(), Error);
  Tensor x = leaf({1.0});
  Tensor y = mul(x, 2.0);
  EXPECT_THROW(y.set_requires_grad(false), Error);
  EXPECT_TRUE(zeros({2}, TensorOptions(kF32).requires_grad()).requires_grad());
}

TEST(Autograd, GradientThroughDtypeCast) {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = sum(mul(x.to(kF32), 2.0));
  y.backward();
  EXPECT_EQ(x.grad().dtype(), kF64);
  EXPECT_EQ(grad_of(x), (std::vector<double>{2, 2}));
}

TEST(Autograd, DeepChainDoesNotOverflowTheStack) {
  Tensor x = leaf({1.0});
  Tensor h = x;
  for (int i = 0; i < 200000; ++i) h = add(h, 0.0);
  h.backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{1.0}));
}

// NOTE [Backward callbacks]
TEST(Autograd, QueuedCallbackRunsAfterEveryHookOfTheBackward) {
  std::vector<std::string> order;
  std::vector<Tensor> ws;
  for (int i = 0; i < 3; ++i) {
    ws.push_back(leaf({1.0 + i}));
    ws.back().register_post_accumulate_grad_hook([&order, i](const Tensor&) {
      order.push_back("hook" + std::to_string(i));
      if (i == 2) autograd::queue_callback([&order] { order.push_back("callback"); });
    });
  }
  Tensor h = from_vector<double>({1.0});
  for (const Tensor& w : ws) h = mul(h, w);
  h.backward();  // hooks fire 2, 1, 0; the callback queued by the first runs last
  EXPECT_EQ(order, (std::vector<std::string>{"hook2", "hook1", "hook0", "callback"}));
}

TEST(Autograd, QueuedCallbackOfANestedBackwardRunsAtTheOutermostEnd) {
  // autograd::checkpoint backpropagates through its segment in a nested backward; a callback
  // queued from a hook fired there must wait for the outer backward, whose later nodes still
  // produce gradients (here: w0's).
  std::vector<std::string> order;
  Tensor w0 = leaf({2.0}), w1 = leaf({3.0});
  w0.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("w0"); });
  w1.register_post_accumulate_grad_hook([&](const Tensor&) {
    order.push_back("w1 in backward " + std::to_string(autograd::current_backward_id() > 0));
    autograd::queue_callback([&] { order.push_back("callback"); });
  });
  Tensor x = mul(from_vector<double>({1.0}), w0);
  Tensor y = autograd::checkpoint([&](const autograd::TensorList& in) { return autograd::TensorList{mul(in[0], w1)}; }, {x})[0];
  y.backward();
  EXPECT_EQ(order, (std::vector<std::string>{"w1 in backward 1", "w0", "callback"}));
  EXPECT_EQ(autograd::current_backward_id(), 0u);
}

TEST(Autograd, QueuedCallbacksAreDroppedWhenBackwardFails) {
  int ran = 0;
  Tensor w = leaf({1.0}), v = leaf({1.0});
  w.register_post_accumulate_grad_hook([&](const Tensor&) { autograd::queue_callback([&] { ++ran; }); });
  v.register_post_accumulate_grad_hook([&](const Tensor&) { TRIDENT_CHECK(false, "hook failed on purpose"); });
  Tensor h = mul(mul(from_vector<double>({1.0}), v), w);
  EXPECT_THROW(h.backward(), Error);
  EXPECT_EQ(ran, 0);
  const uint64_t failed = autograd::current_backward_id();
  EXPECT_EQ(failed, 0u);
  // The next backward gets a new id and a clean queue.
  uint64_t seen = 0;
  Tensor u = leaf({1.0});
  u.register_post_accumulate_grad_hook([&](const Tensor&) { seen = autograd::current_backward_id(); });
  mul(u, 2.0).backward();
  EXPECT_GT(seen, 0u);
  EXPECT_EQ(ran, 0);
}

TEST(Autograd, QueueCallbackOutsideBackwardIsAnError) {
  try {
    autograd::queue_callback([] {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("no backward is running"), std::string::npos) << e.message();
  }
}
