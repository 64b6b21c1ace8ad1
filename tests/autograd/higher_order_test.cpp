// Higher-order gradients (NOTE [Higher-order gradients] in autograd/engine.h): create_graph,
// gradgradcheck over every op whose backward is recorded, the composite formulas against the
// kernels, the lazy error of the ops that are not, and the engine's pruning in grad().
#include <cmath>

#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {

using Fn = std::function<Tensor(const TensorList&)>;

struct Case {
  std::string name;
  Fn fn;
  TensorList inputs;
};

Tensor positive_leaf(const Shape& s, uint64_t seed) {  // values in [0.5, 2): away from log's and sqrt's poles
  Generator g(seed);
  return add(mul(rand(s, kF64, &g), 1.5), 0.5).detach().set_requires_grad();
}

Tensor idx(std::vector<int64_t> v, Shape s) { return reshape(from_vector<int64_t>(v), s); }

// Every op with a recorded backward, on small f64 inputs away from kinks and ties.
std::vector<Case> cases() {
  std::vector<Case> c;
  auto leaf = [](Shape s, uint64_t seed) { return rand_leaf(s, seed); };
  // arithmetic, with broadcasting
  c.push_back({"add", [](const TensorList& x) { return add(x[0], x[1]); }, {leaf({2, 3}, 1), leaf({3}, 2)}});
  c.push_back({"sub", [](const TensorList& x) { return sub(x[0], x[1]); }, {leaf({2, 3}, 1), leaf({2, 1}, 2)}});
  c.push_back({"mul", [](const TensorList& x) { return mul(x[0], x[1]); }, {leaf({2, 3}, 1), leaf({3}, 2)}});
  c.push_back({"div", [](const TensorList& x) { return div(x[0], x[1]); }, {leaf({2, 3}, 1), positive_leaf({3}, 2)}});
  c.push_back({"scalar ops", [](const TensorList& x) { return rsub(div(mul(add(sub(x[0], 1.0), 2.0), 3.0), 4.0), 5.0); },
               {leaf({4}, 3)}});
  c.push_back({"rdiv", [](const TensorList& x) { return rdiv(x[0], 2.0); }, {positive_leaf({4}, 4)}});
  c.push_back({"neg", [](const TensorList& x) { return mul(neg(x[0]), x[0]); }, {leaf({4}, 5)}});
  c.push_back({"maximum", [](const TensorList& x) { return mul(maximum(x[0], x[1]), x[0]); }, {leaf({5}, 6), leaf({5}, 7)}});
  c.push_back({"minimum scalar", [](const TensorList& x) { return mul(minimum(x[0], 0.3), x[0]); }, {leaf({5}, 8)}});
  // unary
  c.push_back({"tanh", [](const TensorList& x) { return tanh(x[0]); }, {leaf({5}, 9)}});
  c.push_back({"sigmoid", [](const TensorList& x) { return sigmoid(x[0]); }, {leaf({5}, 10)}});
  c.push_back({"exp", [](const TensorList& x) { return exp(x[0]); }, {leaf({5}, 11)}});
  c.push_back({"log", [](const TensorList& x) { return log(x[0]); }, {positive_leaf({5}, 12)}});
  c.push_back({"sqrt", [](const TensorList& x) { return sqrt(x[0]); }, {positive_leaf({5}, 13)}});
  c.push_back({"rsqrt", [](const TensorList& x) { return rsqrt(x[0]); }, {positive_leaf({5}, 14)}});
  c.push_back({"relu", [](const TensorList& x) { return mul(relu(x[0]), x[0]); }, {leaf({6}, 15)}});
  c.push_back({"abs", [](const TensorList& x) { return mul(abs(x[0]), x[0]); }, {leaf({6}, 16)}});
  c.push_back({"gelu", [](const TensorList& x) { return gelu(x[0]); }, {leaf({6}, 17)}});
  c.push_back({"gelu tanh", [](const TensorList& x) { return gelu(x[0], GeluApproximation::Tanh); }, {leaf({6}, 18)}});
  c.push_back({"pow", [](const TensorList& x) { return add(pow(x[0], 2.5), pow(x[0], -1.0)); }, {positive_leaf({5}, 19)}});
  c.push_back({"clamp", [](const TensorList& x) { return mul(clamp(x[0], -0.5, 0.7), x[0]); }, {leaf({6}, 20)}});
  // views and indexing
  c.push_back({"views", [](const TensorList& x) {
                 Tensor y = permute(reshape(x[0], {2, 3, 2}), {2, 0, 1});
                 return mul(squeeze(unsqueeze(transpose(y, 0, 2), 1)), expand(x[1], {3, 2, 2}));
               },
               {leaf({3, 4}, 21), leaf({2}, 22)}});
  c.push_back({"slice narrow select", [](const TensorList& x) {
                 return add(mul(slice(x[0], 1, 0, 5, 2), narrow(x[0], 1, 1, 3)), unsqueeze(select(x[0], 1, 4), 1));
               },
               {leaf({2, 5}, 23)}});
  c.push_back({"split cat stack pad", [](const TensorList& x) {
                 auto parts = split(x[0], 2, 1);
                 Tensor joined = cat({mul(parts[1], parts[0]), parts[0]}, 0);
                 return mul(pad(stack({joined, x[1]}, 0), {1, 2}), 1.5);
               },
               {leaf({2, 4}, 24), leaf({4, 2}, 25)}});
  c.push_back({"index_select gather scatter_add", [](const TensorList& x) {
                 Tensor a = index_select(x[0], 0, from_vector<int64_t>({2, 0, 2}));
                 Tensor b = gather(x[0], 1, idx({1, 0, 2, 2, 1, 0}, {3, 2}));
                 Tensor s = scatter_add(x[1], 1, idx({0, 2, 1, 0}, {2, 2}), mul(x[1], x[1]));
                 return add(sum(mul(a, a)), add(sum(mul(b, b)), sum(mul(s, s))));
               },
               {leaf({3, 3}, 26), leaf({2, 3}, 27)}});
  c.push_back({"embedding", [](const TensorList& x) {
                 Tensor e = embedding(x[0], idx({1, 3, 1, 0}, {2, 2}), 3);
                 return mul(e, e);
               },
               {leaf({4, 3}, 28)}});
  c.push_back({"where masked_fill", [](const TensorList& x) {
                 Tensor m = gt(from_vector<double>({1, -1, 1, -1, 1, -1}), 0.0);
                 return add(mul(where(m, x[0], x[1]), x[0]), mul(masked_fill(x[1], m, 0.5), x[1]));
               },
               {leaf({6}, 29), leaf({6}, 30)}});
  c.push_back({"clone", [](const TensorList& x) { return mul(x[0].clone(), x[0]); }, {leaf({3}, 31)}});
  // reductions
  c.push_back({"sum mean", [](const TensorList& x) { return mul(sum(mul(x[0], x[0]), {1}), mean(x[0])); }, {leaf({3, 4}, 32)}});
  c.push_back({"max min", [](const TensorList& x) {
                 return add(mul(max(x[0]), x[0]), unsqueeze(mul(min(x[0], 1).values, sum(x[0], {1})), 1));
               },
               {leaf({3, 4}, 33)}});
  c.push_back({"var std", [](const TensorList& x) { return add(unsqueeze(var(x[0], {1}), 1), std_dev(x[0], {0}, 0.0)); }, {leaf({3, 4}, 34)}});
  c.push_back({"logsumexp", [](const TensorList& x) { return logsumexp(x[0], {1}); }, {leaf({3, 4}, 35)}});
  c.push_back({"norms", [](const TensorList& x) {
                 const Tensor n = add(add(norm(x[0], 2.0, {1}), norm(x[0], 3.0, {1})), mul(norm(x[0], 1.0, {1}), norm(x[0], 1.0, {1})));
                 return add(unsqueeze(n, 1), mul(unsqueeze(norm(x[0], INFINITY, {1}), 1), x[0]));
               },
               {leaf({3, 4}, 36)}});
  // products
  c.push_back({"matmul", [](const TensorList& x) { return matmul(matmul(x[0], x[1]), x[2]); },
               {leaf({2, 3, 4}, 37), leaf({4, 2}, 38), leaf({2}, 39)}});
  c.push_back({"linear", [](const TensorList& x) { Tensor y = linear(x[0], x[1], x[2]); return mul(y, y); },
               {leaf({2, 3, 4}, 40), leaf({2, 4}, 41), leaf({2}, 42)}});
  c.push_back({"linear_gelu", [](const TensorList& x) { return linear_gelu(x[0], x[1], x[2], GeluApproximation::None); },
               {leaf({3, 4}, 43), leaf({2, 4}, 44), leaf({2}, 45)}});
  c.push_back({"linear_gelu tanh", [](const TensorList& x) { return linear_gelu(x[0], x[1], Tensor(), GeluApproximation::Tanh); },
               {leaf({3, 4}, 46), leaf({2, 4}, 47)}});
  // softmax and losses
  c.push_back({"softmax", [](const TensorList& x) { return softmax(x[0], 1); }, {leaf({2, 4}, 48)}});
  c.push_back({"log_softmax", [](const TensorList& x) { return log_softmax(x[0], 0); }, {leaf({3, 2}, 49)}});
  c.push_back({"cross_entropy", [](const TensorList& x) { return cross_entropy(x[0], from_vector<int64_t>({2, 0, 1})); },
               {leaf({3, 4}, 50)}});
  c.push_back({"cross_entropy weight ignore smoothing none", [](const TensorList& x) {
                 CrossEntropyOptions o;
                 o.weight = from_vector<double>({0.5, 1.0, 2.0});
                 o.ignore_index = 1;
                 o.label_smoothing = 0.2;
                 o.reduction = Reduction::None;
                 return cross_entropy(x[0], idx({2, 1, 0, 0, 2, 2}, {2, 3}), o);
               },
               {leaf({2, 3, 3}, 51)}});
  c.push_back({"cross_entropy weight smoothing mean", [](const TensorList& x) {
                 CrossEntropyOptions o;
                 o.weight = from_vector<double>({0.5, 1.0, 2.0});
                 o.ignore_index = 0;
                 o.label_smoothing = 0.1;
                 return cross_entropy(x[0], from_vector<int64_t>({2, 0, 1, 1}), o);
               },
               {leaf({4, 3}, 52)}});
  c.push_back({"nll_loss", [](const TensorList& x) {
                 NllLossOptions o;
                 o.reduction = Reduction::None;
                 return nll_loss(log_softmax(x[0], 1), from_vector<int64_t>({1, 0, 2}), o);
               },
               {leaf({3, 3}, 53)}});
  c.push_back({"mse_loss", [](const TensorList& x) { return mse_loss(mul(x[0], x[0]), x[1]); }, {leaf({2, 3}, 54), leaf({3}, 55)}});
  c.push_back({"bce_with_logits", [](const TensorList& x) {
                 return binary_cross_entropy_with_logits(x[0], sigmoid(x[1]), Reduction::Mean, from_vector<double>({0.5, 2.0, 1.5}));
               },
               {leaf({2, 3}, 56), leaf({2, 3}, 57)}});
  c.push_back({"bce_with_logits none", [](const TensorList& x) {
                 return binary_cross_entropy_with_logits(x[0], sigmoid(x[1]), Reduction::None);
               },
               {leaf({4}, 58), leaf({4}, 59)}});
  // normalization and dropout
  c.push_back({"layer_norm", [](const TensorList& x) { return layer_norm(x[0], {4}, x[1], x[2]); },
               {leaf({3, 4}, 60), leaf({4}, 61), leaf({4}, 62)}});
  c.push_back({"layer_norm no affine", [](const TensorList& x) { return layer_norm(x[0], {2, 3}); }, {leaf({2, 2, 3}, 63)}});
  c.push_back({"add_layer_norm", [](const TensorList& x) {
                 AddLayerNorm r = add_layer_norm(x[0], x[1], {4}, x[2], Tensor());
                 return add(r.out, mul(r.sum, r.sum));
               },
               {leaf({2, 4}, 64), leaf({2, 4}, 65), leaf({4}, 66)}});
  c.push_back({"dropout", [](const TensorList& x) {
                 Generator g(7);  // the same mask at every evaluation
                 return mul(dropout(x[0], 0.4, true, &g), x[0]);
               },
               {leaf({8}, 67)}});
  // attention (the recorded path recomputes the probabilities)
  c.push_back({"attention", [](const TensorList& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
               {leaf({2, 3, 4}, 68), leaf({2, 5, 4}, 69), leaf({2, 5, 3}, 70)}});
  c.push_back({"attention causal, heads as a permuted view", [](const TensorList& x) {
                 // q, k, v as [B, H, T, D] views of [B, T, H * D] rows (strided, not contiguous)
                 auto heads = [](const Tensor& t) { return permute(reshape(t, {1, 4, 2, 2}), {0, 2, 1, 3}); };
                 AttentionOptions o;
                 o.is_causal = true;
                 return scaled_dot_product_attention(heads(x[0]), heads(x[1]), heads(x[2]), o);
               },
               {leaf({1, 4, 4}, 71), leaf({1, 4, 4}, 72), leaf({1, 4, 4}, 73)}});
  c.push_back({"attention bool mask with a row that sees nothing", [](const TensorList& x) {
                 AttentionOptions o;
                 o.attn_mask = reshape(from_vector<uint8_t>({1, 0, 1, 0, 0, 0, 1, 1, 1}), {3, 3}).to(kBool);
                 return scaled_dot_product_attention(x[0], x[1], x[2], o);
               },
               {leaf({2, 3, 2}, 74), leaf({2, 3, 2}, 75), leaf({2, 3, 2}, 76)}});
  c.push_back({"attention float mask with grad", [](const TensorList& x) {
                 AttentionOptions o;
                 o.attn_mask = x[3];
                 o.scale = 0.7;
                 return scaled_dot_product_attention(x[0], x[1], x[2], o);
               },
               {leaf({2, 3, 2}, 77), leaf({2, 4, 2}, 78), leaf({2, 4, 3}, 79), leaf({3, 4}, 80)}});
  c.push_back({"attention with dropout, causal", [](const TensorList& x) {
                 Generator g(7);  // the same mask at every evaluation
                 AttentionOptions o;
                 o.dropout_p = 0.3;
                 o.is_causal = true;
                 o.generator = &g;
                 return scaled_dot_product_attention(x[0], x[1], x[2], o);
               },
               {leaf({2, 5, 4}, 84), leaf({2, 5, 4}, 85), leaf({2, 5, 3}, 86)}});
  // convolution, pooling, batch norm
  c.push_back({"conv2d", [](const TensorList& x) { return conv2d(x[0], x[1], x[2], {2, 1}, {1, 0}, {1, 2}); },
               {leaf({2, 2, 5, 5}, 90), leaf({3, 2, 2, 2}, 91), leaf({3}, 92)}});
  c.push_back({"conv2d groups", [](const TensorList& x) { Tensor y = conv2d(x[0], x[1], Tensor(), {1, 1}, {1, 1}, {1, 1}, 2); return mul(y, y); },
               {leaf({1, 4, 3, 3}, 93), leaf({2, 2, 3, 3}, 94)}});
  c.push_back({"max_pool2d", [](const TensorList& x) { Tensor y = max_pool2d(x[0], {2, 2}, Int2{1, 2}, {1, 0}); return mul(y, y); },
               {leaf({2, 2, 4, 4}, 95)}});
  c.push_back({"avg_pool2d", [](const TensorList& x) {
                 Tensor y = avg_pool2d(x[0], {3, 2}, Int2{2, 1}, {1, 1}, /*ceil_mode=*/true, /*count_include_pad=*/false);
                 return mul(y, y);
               },
               {leaf({1, 2, 5, 4}, 96)}});
  c.push_back({"adaptive_avg_pool2d", [](const TensorList& x) { Tensor y = adaptive_avg_pool2d(x[0], {2, 3}); return mul(y, y); },
               {leaf({2, 5, 4}, 97)}});
  c.push_back({"batch_norm training", [](const TensorList& x) {
                 return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], /*training=*/true, 0.1, 1e-5);
               },
               {leaf({3, 2, 2, 2}, 98), leaf({2}, 99), leaf({2}, 100)}});
  c.push_back({"batch_norm eval", [](const TensorList& x) {
                 Tensor y = batch_norm(x[0], from_vector<double>({0.1, -0.2}), from_vector<double>({0.8, 1.5}), x[1], Tensor(),
                                       /*training=*/false, 0.1, 1e-5);
                 return mul(y, y);
               },
               {leaf({3, 2, 4}, 101), leaf({2}, 102)}});
  return c;
}

}  // namespace

TEST(HigherOrder, GradgradcheckPassesForEveryRecordedBackward) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(grad_ok(gradgradcheck(c.fn, c.inputs)));
  }
}

// The composite formulas a create_graph backward records give the kernels' first-order
// gradients (the same values, only a different route).
TEST(HigherOrder, RecordedFormulasEqualTheKernels) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor y = c.fn(c.inputs);
    Tensor v = randn_like(y).set_requires_grad();  // every gradient depends on v, so carries a graph
    TensorList fast = autograd::grad({y}, c.inputs, {v}, /*retain_graph=*/true, /*allow_unused=*/true);
    TensorList recorded = autograd::grad({y}, c.inputs, {v}, true, true, /*create_graph=*/true);
    for (size_t i = 0; i < fast.size(); ++i) {
      if (!fast[i].defined()) {
        EXPECT_FALSE(recorded[i].defined());
        continue;
      }
      EXPECT_TRUE(recorded[i].requires_grad()) << "input " << i;
      EXPECT_TRUE(all_close(recorded[i].detach(), fast[i], 1e-12, 1e-12)) << "input " << i;
    }
  }
}

TEST(HigherOrder, DerivativesOfACubeByHand) {
  Tensor x = from_vector<double>({-1.5, 0.5, 2.0}).set_requires_grad();
  Tensor y = sum(mul(mul(x, x), x));
  Tensor g1 = autograd::grad({y}, {x}, {}, false, false, /*create_graph=*/true)[0];  // 3 x^2
  EXPECT_TRUE(all_close(g1.detach(), from_vector<double>({6.75, 0.75, 12.0})));
  Tensor g2 = autograd::grad({sum(g1)}, {x}, {}, false, false, true)[0];  // 6 x
  EXPECT_TRUE(all_close(g2.detach(), from_vector<double>({-9.0, 3.0, 12.0})));
  Tensor g3 = autograd::grad({sum(g2)}, {x})[0];  // 6
  EXPECT_TRUE(all_close(g3, from_vector<double>({6.0, 6.0, 6.0})));
  EXPECT_FALSE(g3.requires_grad());
}

// A Hessian-vector product of f(w) = 1/2 w^T A w + sum(tanh(w)) against the hand-computed
// Hessian A + diag(-2 tanh(w) (1 - tanh(w)^2)), A symmetric.
TEST(HigherOrder, HessianVectorProductByHand) {
  Tensor a = from_vector<double>({2, 1, 0, 1, 3, -1, 0, -1, 4}, {3, 3});
  Tensor w = from_vector<double>({0.3, -0.7, 1.1}).set_requires_grad();
  Tensor v = from_vector<double>({1.0, -2.0, 0.5});
  Tensor f = add(mul(sum(mul(w, matmul(a, w))), 0.5), sum(tanh(w)));
  Tensor g = autograd::grad({f}, {w}, {}, false, false, /*create_graph=*/true)[0];
  Tensor hv = autograd::grad({sum(mul(g, v))}, {w})[0];
  std::vector<double> wv = w.detach().to_vector<double>(), vv = v.to_vector<double>(), av = a.to_vector<double>();
  std::vector<double> expect(3);
  for (int i = 0; i < 3; ++i) {
    const double t = std::tanh(wv[static_cast<size_t>(i)]);
    for (int j = 0; j < 3; ++j) expect[static_cast<size_t>(i)] += av[static_cast<size_t>(3 * i + j)] * vv[static_cast<size_t>(j)];
    expect[static_cast<size_t>(i)] += -2 * t * (1 - t * t) * vv[static_cast<size_t>(i)];
  }
  EXPECT_TRUE(all_close(hv, from_vector<double>(expect), 1e-12, 1e-12));
}

// backward(create_graph) leaves a .grad that carries a graph; differentiating it gives the
// second derivative, and zero_grad breaks the leaf -> grad -> graph -> leaf cycle.
TEST(HigherOrder, BackwardWithCreateGraphKeepsTheGraphInGrad) {
  Tensor x = from_vector<double>({0.5, -1.0}).set_requires_grad();
  sum(exp(mul(x, 2.0))).backward({}, false, /*create_graph=*/true);  // 2 e^(2x)
  Tensor g = x.grad();
  ASSERT_TRUE(g.requires_grad());
  x.zero_grad();
  sum(g).backward();  // 4 e^(2x)
  EXPECT_TRUE(all_close(x.grad(), from_vector<double>({4 * std::exp(1.0), 4 * std::exp(-2.0)}), 1e-12));
  EXPECT_FALSE(x.grad().requires_grad());
  x.zero_grad();
}

// Saved outputs (tanh's, exp's) rejoin the graph through their node even when nothing else
// holds them: the second derivative of exp(x) is exp(x), not 0.
TEST(HigherOrder, SavedOutputsRejoinTheGraph) {
  Tensor x = from_vector<double>({0.2, -0.4}).set_requires_grad();
  Tensor g = autograd::grad({sum(exp(x))}, {x}, {}, false, false, true)[0];
  Tensor h = autograd::grad({sum(g)}, {x})[0];
  EXPECT_TRUE(all_close(h, exp(x.detach()), 1e-12));
  Tensor gt = autograd::grad({sum(tanh(x))}, {x}, {}, false, false, true)[0];
  Tensor ht = autograd::grad({sum(gt)}, {x})[0];
  Tensor t = tanh(x.detach());
  EXPECT_TRUE(all_close(ht, mul(mul(t, rsub(mul(t, t), 1.0)), -2.0), 1e-12));
}

// With dropout the recorded path draws the kernels' mask again: the second derivative of
// sum(out^2) with respect to v is 2 (P M)^T (P M) applied to the direction, which is zero in
// the dropped entries' columns only if the mask is the kernels'. Checked against that formula,
// with P M read off the output for v = identity.
TEST(HigherOrder, AttentionWithDropoutUsesTheKernelsMask) {
  Tensor q = rand_leaf({1, 4, 2}, 81), k = rand_leaf({1, 4, 2}, 82);
  auto attend = [&](const Tensor& v) {
    Generator g(5);
    AttentionOptions o;
    o.dropout_p = 0.5;
    o.generator = &g;
    return scaled_dot_product_attention(q, k, v, o);
  };
  std::vector<double> identity(16, 0.0);
  for (size_t i = 0; i < 4; ++i) identity[5 * i] = 1.0;
  const Tensor pm = attend(from_vector<double>(identity, {1, 4, 4})).detach();  // (P M) [1, 4, 4]
  Tensor v = rand_leaf({1, 4, 3}, 83);
  const Tensor dir = rand_leaf({1, 4, 3}, 84).detach();
  const Tensor out = attend(v);
  const Tensor gv = autograd::grad({sum(mul(out, out))}, {v}, {}, false, false, /*create_graph=*/true)[0];
  const Tensor hv = autograd::grad({sum(mul(gv, dir))}, {v})[0];
  const Tensor want = mul(matmul(transpose(pm, 1, 2), matmul(pm, dir)), 2.0);
  EXPECT_TRUE(all_close(hv, want, 1e-12, 1e-12));
  EXPECT_GT(sum(eq(pm, 0.0).to(kF64)).item<double>(), 0.0) << "some probabilities were dropped";
}

TEST(HigherOrder, GradRunsOnlyTheNodesItNeeds) {
  Tensor x = rand_leaf({3}, 73);
  Tensor h = mul(x, 2.0);
  Tensor other = exp(x);
  int fired = 0;
  other.register_hook([&](const Tensor&) {
    ++fired;
    return Tensor();
  });
  Tensor y = add(sum(mul(h, h)), sum(other));
  Tensor gh = autograd::grad({y}, {h})[0];  // 2 h
  EXPECT_TRUE(all_close(gh, mul(h.detach(), 2.0), 1e-12));
  EXPECT_EQ(fired, 0);
}

namespace {
struct Cube : autograd::Function<Cube> {
  static constexpr const char* name = "Cube";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, bool differentiable) {
    ctx.save_for_backward({x});
    ctx.set_differentiable_backward(differentiable);
    return mul(mul(x, x), x);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& g) {
    const Tensor x = ctx.saved_tensors()[0];
    return {mul(mul(mul(x, x), 3.0), g[0])};
  }
};

// Saves its output: d/dx e^x = e^x through the saved output.
struct Exp : autograd::Function<Exp> {
  static constexpr const char* name = "MyExp";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    Tensor y = exp(x);
    ctx.save_for_backward({y});
    ctx.set_differentiable_backward();
    return y;
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& g) { return {mul(g[0], ctx.saved_tensors()[0])}; }
};
}  // namespace

TEST(HigherOrder, UserFunctionsOptIn) {
  Tensor x = rand_leaf({4}, 74);
  EXPECT_TRUE(grad_ok(gradgradcheck([](const TensorList& in) { return Cube::apply(in[0], true); }, {x})));
  EXPECT_TRUE(grad_ok(gradgradcheck([](const TensorList& in) { return mul(Exp::apply(in[0]), in[0]); }, {x})));
  Tensor g = autograd::grad({sum(Cube::apply(x, false))}, {x}, {}, false, false, true)[0];
  EXPECT_TRUE(all_close(g.detach(), mul(mul(x.detach(), x.detach()), 3.0), 1e-12));
  expect_error([&] { autograd::grad({sum(g)}, {x}); }, {"CubeBackward", "not differentiable"});
}

// A node whose backward is not recorded (a user function that did not opt in) still gives
// first-order gradients under create_graph; only differentiating through it again fails, naming
// it, and a second gradient that does not need it (grad() prunes it) is fine.
TEST(HigherOrder, ANodeWithoutARecordedBackwardFailsOnlyWhenReachedAgain) {
  Tensor x = rand_leaf({3}, 84), s = rand_leaf({1}, 85);
  auto f = [&] { return add(sum(mul(Cube::apply(x, false), x)), sum(mul(mul(s, s), s))); };
  TensorList g = autograd::grad({f()}, {x, s}, {}, false, false, /*create_graph=*/true);
  TensorList plain = autograd::grad({f()}, {x, s});
  EXPECT_TRUE(all_close(g[0].detach(), plain[0], 1e-12));
  EXPECT_TRUE(g[0].requires_grad());
  Tensor hs = autograd::grad({sum(g[1])}, {s}, {}, true)[0];  // 6 s: the user function is not on the way
  EXPECT_TRUE(all_close(hs, mul(s.detach(), 6.0), 1e-12));
  expect_error([&] { autograd::grad({sum(mul(g[0], g[0]))}, {x}); }, {"CubeBackward", "not differentiable", "create_graph"});
}

TEST(HigherOrder, GradgradcheckCatchesAWrongSecondDerivative) {
  // A first-order-correct backward whose formula is a constant: recorded as differentiable, it
  // claims a zero second derivative where x^2's is 2.
  auto square_const = [](const TensorList& in) {
    Tensor x = in[0];
    Tensor out = mul(x.detach(), x.detach());
    autograd::record("SquareConstBackward", {x}, out,
                     [xv = x.detach()](const TensorList& g) { return TensorList{mul(mul(g[0], xv), 2.0)}; },
                     autograd::Backward::Differentiable);
    return out;
  };
  Tensor x = rand_leaf({3}, 75);
  EXPECT_TRUE(grad_ok(gradcheck(square_const, {x})));
  GradcheckResult r = gradgradcheck(square_const, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.report.find("gradcheck failed"), std::string::npos) << r.report;
}

// NOTE [Checkpoint and higher-order gradients]: a re-materialized function's backward is
// recorded too. gradgradcheck through checkpoint with two inputs (x and w enter through
// CheckpointInput nodes, and the second derivative has x-w cross terms) ...
TEST(HigherOrder, CheckpointPassesGradgradcheck) {
  const auto fn = [](const TensorList& in) {
    const auto inner = [](const TensorList& a) { return TensorList{mul(tanh(matmul(a[0], a[1])), sum(a[0]))}; };
    return autograd::checkpoint(inner, in)[0];
  };
  EXPECT_TRUE(grad_ok(gradgradcheck(fn, {rand_leaf({3, 4}, 41), rand_leaf({4, 2}, 42)})));
}

// ... and a Hessian-vector product through it, with the weights inside the function (their
// gradients reach .grad from the re-run's own backward, as recorded sums, so both passes are
// backward() calls), equals the one without checkpoint, for the weights and the input alike; so
// does a checkpoint nested in another.
TEST(HigherOrder, CheckpointHessianVectorProductEqualsThePlainOne) {
  Generator g(43);
  Tensor w1 = randn({4, 6}, kF64, &g).set_requires_grad(), w2 = randn({6, 3}, kF64, &g).set_requires_grad();
  Tensor x = randn({5, 4}, kF64, &g).set_requires_grad();
  const TensorList v{randn({4, 6}, kF64, &g), randn({6, 3}, kF64, &g), randn({5, 4}, kF64, &g)};
  const auto f = [&](const TensorList& in) { return TensorList{matmul(tanh(matmul(in[0], w1)), w2)}; };
  const auto nested = [&](const TensorList& in) {
    return autograd::checkpoint([&](const TensorList& a) { return TensorList{tanh(matmul(a[0], w1))}; }, in);
  };
  const TensorList params{w1, w2, x};
  auto hvp = [&](int how) {
    for (Tensor p : params) p.zero_grad();
    Tensor y;
    if (how == 0) y = f({x})[0];
    if (how == 1) y = autograd::checkpoint(f, {x})[0];
    if (how == 2) y = matmul(autograd::checkpoint(nested, {x})[0], w2);
    sum(mul(y, y)).backward({}, false, /*create_graph=*/true);
    Tensor dot = scalar_tensor(0.0, kF64);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(params[i].grad().requires_grad()) << "gradient " << i << " carries a graph";
      dot = add(dot, sum(mul(params[i].grad(), v[i])));
    }
    // backward(), not grad(): like PyTorch's reentrant checkpoint, the re-run of the first-order
    // pass gives the weights inside the function their gradients in .grad (autograd/checkpoint.h).
    for (Tensor p : params) p.zero_grad();
    dot.backward();
    TensorList h;
    for (Tensor p : params) {
      h.push_back(p.grad());
      p.zero_grad();
    }
    return h;
  };
  const TensorList plain = hvp(0), ckpt = hvp(1), twice = hvp(2);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(all_close(ckpt[i], plain[i], 1e-12, 1e-12)) << "parameter " << i;
    EXPECT_TRUE(all_close(twice[i], plain[i], 1e-12, 1e-12)) << "parameter " << i << ", nested checkpoints";
  }
}
