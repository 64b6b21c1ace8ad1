#include "autograd/checkpoint.h"
#include "test_util.h"

#include <cmath>

using namespace trident;
using namespace trident::nn;
using namespace trident::testing;
using autograd::TensorList;

namespace {
void set(const Tensor& t, const std::vector<double>& v) {
  NoGradGuard g;
  copy_(t, from_vector<double>(v, t.sizes()));
}
}  // namespace

TEST(Layers, LinearHandComputed) {
  Linear l(2, 3);
  set(l.weight, {1, 0, 0, 1, 1, 1});
  set(l.bias, {0, 1, 2});
  EXPECT_EQ(l.forward(from_vector<float>({1, 2}, {1, 2})).to_vector<float>(), (std::vector<float>{1, 3, 5}));
  EXPECT_EQ(l.weight.sizes(), (Shape{3, 2}));
  // PyTorch's init: weights and bias within +-1/sqrt(in).
  Linear big(100, 50);
  for (float v : big.weight.to_vector<float>()) EXPECT_LE(std::fabs(v), 0.1f);
  for (float v : big.bias.to_vector<float>()) EXPECT_LE(std::fabs(v), 0.1f);
}

TEST(Layers, Conv2dMatchesTheOpAndInitBound) {
  Conv2dOptions o;
  o.padding = {1, 1};
  o.groups = 2;
  Conv2d c(4, 6, {3, 3}, o);
  EXPECT_EQ(c.weight.sizes(), (Shape{6, 2, 3, 3}));
  Tensor x = randn({2, 4, 5, 5});
  EXPECT_TRUE(all_close(c.forward(x), conv2d(x, c.weight, c.bias, {1, 1}, {1, 1}, {1, 1}, 2), 0, 0));
  const double bound = 1.0 / std::sqrt(2.0 * 9.0);
  for (float v : c.weight.to_vector<float>()) EXPECT_LE(std::fabs(v), bound + 1e-7);
  EXPECT_THROW(Conv2d(3, 4, {3, 3}, Conv2dOptions{{1, 1}, {0, 0}, {1, 1}, 2, true}), Error);
}

TEST(Layers, LayerNormHandComputed) {
  LayerNorm ln(Shape{4}, 0.0);
  set(ln.weight, {1, 2, 1, 1});
  set(ln.bias, {0, 0, 0, 10});
  // x = [1, 2, 3, 4]: mean 2.5, var 1.25 -> normalized (x - 2.5) / sqrt(1.25).
  const std::vector<double> y = ln.forward(from_vector<double>({1, 2, 3, 4}).to(kF32)).to_vector<double>();
  const double s = std::sqrt(1.25);
  const double ref[] = {-1.5 / s, 2 * -0.5 / s, 0.5 / s, 1.5 / s + 10};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[static_cast<size_t>(i)], ref[i], 1e-6);
}

TEST(Layers, BatchNorm2dTrainingUpdatesRunningStatsEvalUsesThem) {
  BatchNorm2d bn(1, 0.0, 0.5);
  // One channel, values 1..4: batch mean 2.5, biased var 1.25, unbiased var 5/3.
  Tensor x = reshape(arange(1, 5, 1, kF32), {1, 1, 2, 2});
  const std::vector<float> y = bn.forward(x).to_vector<float>();
  EXPECT_NEAR(y[0], -1.5 / std::sqrt(1.25), 1e-6);
  EXPECT_NEAR(bn.running_mean.item<double>(), 0.5 * 0 + 0.5 * 2.5, 1e-7);
  EXPECT_NEAR(bn.running_var.item<double>(), 0.5 * 1 + 0.5 * (5.0 / 3.0), 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  bn.eval();
  const double rm = bn.running_mean.item<double>(), rv = bn.running_var.item<double>();
  const std::vector<float> e = bn.forward(x).to_vector<float>();
  EXPECT_NEAR(e[3], (4 - rm) / std::sqrt(rv), 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1) << "evaluation does not count";
  EXPECT_THROW(bn.forward(zeros({1, 2, 2, 2})), Error);
}

TEST(Layers, BatchNorm2dDeferredCommitsMiniBatchStatisticsOnce) {
  // NOTE [Deferred batch norm]: two micro-batches {1, 2} and {3, 4, 5, 6} (one channel). Each is
  // normalized by its own statistics, while the running statistics wait for commit_deferred()
  // and then move once by those of all six values: mean 3.5, unbiased var 17.5 / 5 = 3.5.
  BatchNorm2d bn(1, 0.0, 0.5);
  bn.deferred = true;
  const std::vector<float> y = bn.forward(reshape(arange(1, 3, 1, kF32), {1, 1, 1, 2})).to_vector<float>();
  EXPECT_NEAR(y[0], -1.0, 1e-6);  // (1 - 1.5) / sqrt(0.25)
  bn.forward(reshape(arange(3, 7, 1, kF32), {2, 1, 1, 2}));
  EXPECT_EQ(bn.running_mean.item<double>(), 0.0);
  EXPECT_EQ(bn.running_var.item<double>(), 1.0);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 0);
  EXPECT_EQ(bn.deferred_count(), 6);
  bn.commit_deferred();
  EXPECT_NEAR(bn.running_mean.item<double>(), 0.5 * 3.5, 1e-7);
  EXPECT_NEAR(bn.running_var.item<double>(), 0.5 * 1 + 0.5 * 3.5, 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  EXPECT_EQ(bn.deferred_count(), 0);
  bn.commit_deferred();  // nothing gathered: nothing moves
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  // Evaluation uses the running statistics and gathers nothing.
  bn.eval();
  bn.forward(reshape(arange(1, 3, 1, kF32), {1, 1, 1, 2}));
  EXPECT_EQ(bn.deferred_count(), 0);
}

TEST(Layers, DeferredBatchNormsCommitTheReducedTotals) {
  // nn::commit_deferred_batch_norms packs the totals of every module into one host tensor for a
  // sum over data-parallel ranks. Here "rank 0" saw {1, 2} and "rank 1" {3, 4, 5, 6} (the
  // reduction adds rank 1's totals, as an all-reduce would): the running statistics move by all
  // six values, mean 3.5 and unbiased var 3.5, as one module committing all six does. A second
  // module of two channels (only rank 0's values, 1..4 and 5..8) keeps its own totals apart.
  BatchNorm2d a(1, 0.0, 0.5), b(2, 0.0, 0.5);
  const std::vector<BatchNorm2d*> both{&a, &b};
  for (BatchNorm2d* bn : both) bn->deferred = true;
  a.forward(reshape(arange(1, 3, 1, kF32), {1, 1, 1, 2}));
  b.forward(reshape(arange(1, 9, 1, kF32), {1, 2, 2, 2}));
  int calls = 0;
  commit_deferred_batch_norms(both, [&](Tensor& t) {
    ++calls;
    // a: sums (1), squares (1); b: sums (2), squares (2); then the counts of a and b.
    ASSERT_EQ(t.sizes(), (Shape{8}));
    ASSERT_EQ(t.dtype(), DType::F64);
    // From the op's f32 mean and variance: within their rounding.
    const std::vector<double> mine = t.to_vector<double>(), want{3, 5, 10, 26, 30, 174, 2, 4};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(mine[i], want[i], 1e-6 * want[i]) << i;
    // Rank 1's totals: a saw 3 + 4 + 5 + 6 = 18 and 9 + 16 + 25 + 36 = 86 over 4 values; b nothing.
    t = from_vector<double>({3 + 18.0, 5 + 86.0, 10, 26, 30, 174, 2 + 4.0, 4}, {8});
  });
  EXPECT_EQ(calls, 1);
  EXPECT_NEAR(a.running_mean.item<double>(), 0.5 * 3.5, 1e-7);
  EXPECT_NEAR(a.running_var.item<double>(), 0.5 + 0.5 * 3.5, 1e-6);
  // b: channel 0 holds 1..4 (mean 2.5, unbiased var 5/3), channel 1 5..8 (mean 6.5, var 5/3).
  const std::vector<float> bm = b.running_mean.to_vector<float>(), bv = b.running_var.to_vector<float>();
  EXPECT_NEAR(bm[0], 0.5 * 2.5, 1e-6);
  EXPECT_NEAR(bm[1], 0.5 * 6.5, 1e-6);
  EXPECT_NEAR(bv[0], 0.5 + 0.5 * 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(bv[1], 0.5 + 0.5 * 5.0 / 3.0, 1e-6);
  for (BatchNorm2d* bn : both) {
    EXPECT_EQ(bn->deferred_count(), 0);
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  }
  // Without a reduction, each module commits its own totals; nothing gathered, nothing moves.
  commit_deferred_batch_norms(both);
  EXPECT_EQ(a.num_batches_tracked.item<int64_t>(), 1);
  // defer_batch_norms finds each module once and sets it to defer.
  Sequential seq;
  auto c = std::make_shared<BatchNorm2d>(3);
  seq.push_back(c);
  const std::vector<BatchNorm2d*> found = defer_batch_norms(seq);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], c.get());
  EXPECT_TRUE(c->deferred);
  // Totals of the wrong size are an error naming the shapes.
  EXPECT_THROW(a.commit_deferred(zeros({4}, DType::F64), 4), Error);
}

TEST(Layers, BatchNorm2dUnderCheckpointUpdatesRunningStatsOnce) {
  // The re-run in backward (autograd::is_recomputing()) must not move the running statistics
  // again: values 1..4 give mean 2.5 and unbiased var 5/3, applied once with momentum 0.5.
  BatchNorm2d bn(1, 0.0, 0.5);
  Tensor x = reshape(arange(1, 5, 1, kF32), {1, 1, 2, 2});
  x.set_requires_grad(true);
  autograd::TensorList out = autograd::checkpoint([&](const autograd::TensorList& in) {
    return autograd::TensorList{bn.forward(in[0])};
  }, {x});
  EXPECT_FALSE(autograd::is_recomputing());
  sum(mul(out[0], out[0])).backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_NEAR(bn.running_mean.item<double>(), 1.25, 1e-7);
  EXPECT_NEAR(bn.running_var.item<double>(), 0.5 + 0.5 * (5.0 / 3.0), 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
}

TEST(Layers, EmbeddingPaddingRowStaysZeroAndGetsNoGradient) {
  Embedding e(5, 3, 1);
  EXPECT_EQ(select(e.weight.detach(), 0, 1).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  Tensor out = e.forward(from_vector<int64_t>({1, 2, 1}, {3}));
  EXPECT_EQ(out.sizes(), (Shape{3, 3}));
  sum(out).backward();
  const std::vector<float> g = e.weight.grad().to_vector<float>();
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(g[static_cast<size_t>(3 + j)], 0.f);  // padding row
    EXPECT_EQ(g[static_cast<size_t>(6 + j)], 1.f);  // row 2 used once
  }
  Embedding neg(5, 3, -1);
  EXPECT_EQ(*neg.padding_idx, 4);
  EXPECT_THROW(Embedding(5, 3, 7), Error);
}

TEST(Layers, DropoutActivationsPoolingFlattenIdentity) {
  Dropout d(0.5);
  Tensor x = ones({1000});
  const std::vector<float> y = d.forward(x).to_vector<float>();
  int zeros_seen = 0;
  for (float v : y) {
    EXPECT_TRUE(v == 0.f || v == 2.f);
    zeros_seen += v == 0.f;
  }
  EXPECT_GT(zeros_seen, 400);
  EXPECT_LT(zeros_seen, 600);
  d.eval();
  EXPECT_TRUE(d.forward(x).is_same(x));
  EXPECT_THROW(Dropout(1.5), Error);
  Tensor v = from_vector<float>({-1, 0.5});
  EXPECT_EQ(ReLU().forward(v).to_vector<float>(), (std::vector<float>{0, 0.5}));
  EXPECT_TRUE(all_close(GELU(GeluApproximation::Tanh).forward(v), gelu(v, GeluApproximation::Tanh), 0, 0));
  EXPECT_TRUE(all_close(GELU().forward(v), gelu(v), 0, 0));
  Tensor img = reshape(arange(16, kF32), {1, 1, 4, 4});
  EXPECT_EQ(MaxPool2d({2, 2}).forward(img).to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_EQ(AvgPool2d({2, 2}).forward(img).to_vector<float>(), (std::vector<float>{2.5, 4.5, 10.5, 12.5}));
  EXPECT_EQ(AdaptiveAvgPool2d({1, 1}).forward(img).to_vector<float>(), (std::vector<float>{7.5}));
  EXPECT_EQ(Flatten().forward(img).sizes(), (Shape{1, 16}));
  EXPECT_TRUE(Identity().forward(img).is_same(img));
}

TEST(Layers, MultiheadSelfAttentionMatchesItsComposition) {
  Generator g(3);
  MultiheadSelfAttention mha(8, 2, {true, 0.0, true}, kF64, &g);
  Tensor x = randn({2, 5, 8}, kF64, &g);
  // By hand: project, split heads, attend causally, merge, project.
  Tensor qkv = linear(x, mha.qkv->weight, mha.qkv->bias);
  std::vector<Tensor> parts = split(qkv, 8, 2);
  auto heads = [](const Tensor& t) { return permute(reshape(t, {2, 5, 2, 4}), {0, 2, 1, 3}); };
  Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  Tensor s = div(matmul(q, transpose(k, -1, -2)), 2.0);  // sqrt(4)
  Tensor causal = from_vector<bool>({1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, {5, 5});
  Tensor att = softmax(masked_fill(s, logical_not(causal), -INFINITY), -1);
  Tensor ref = linear(reshape(permute(matmul(att, v), {0, 2, 1, 3}), {2, 5, 8}), mha.proj->weight, mha.proj->bias);
  EXPECT_TRUE(all_close(mha.forward(x), ref, 1e-12, 1e-12));
  EXPECT_THROW(MultiheadSelfAttention(8, 3), Error);
  EXPECT_THROW(mha.forward(randn({2, 5, 6}, kF64)), Error);
}

TEST(LayersGradcheck, MultiheadSelfAttentionAndBlock) {
  Generator g(4);
  MultiheadSelfAttention mha(4, 2, {true, 0.0, true}, kF64, &g);
  Tensor x = rand_leaf({1, 3, 4}, 5);
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return mha.forward(in[0]); }, {x})));
  // The parameters too: the module's own weight is a gradcheck input, perturbed in place.
  Tensor w = mha.qkv->weight;
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return mha.forward(in[0]); }, {x, w})));
}

TEST(Init, DeterministicForASeedAndTheRightScale) {
  Tensor a = empty({256, 128}), b = empty({256, 128});
  Generator g1(7), g2(7);
  init::kaiming_uniform_(a, 0.0, init::FanMode::FanIn, "relu", &g1);
  init::kaiming_uniform_(b, 0.0, init::FanMode::FanIn, "relu", &g2);
  EXPECT_TRUE(all_close(a, b, 0, 0));
  const double bound = std::sqrt(3.0) * std::sqrt(2.0) / std::sqrt(128.0);
  double m2 = 0;
  for (float v : a.to_vector<float>()) {
    EXPECT_LE(std::fabs(v), bound);
    m2 += static_cast<double>(v) * v;
  }
  // Var of U(-b, b) is b^2 / 3 = 2 / fan_in; 32768 samples: relative sd of the estimate ~0.8%.
  EXPECT_NEAR(m2 / a.numel(), 2.0 / 128.0, 0.05 * 2.0 / 128.0);
  Tensor n = empty({512, 256});
  init::xavier_normal_(n, 1.0, &g1);
  double s2 = 0;
  for (float v : n.to_vector<float>()) s2 += static_cast<double>(v) * v;
  EXPECT_NEAR(s2 / n.numel(), 2.0 / (512 + 256), 0.05 * 2.0 / (512 + 256));
  Tensor r = empty({768, 768});
  init::gpt2_residual_normal_(r, 12, &g1);
  double r2 = 0;
  for (float v : r.to_vector<float>()) r2 += static_cast<double>(v) * v;
  const double want = 0.02 * 0.02 / 24.0;
  EXPECT_NEAR(r2 / r.numel(), want, 0.02 * want);
  EXPECT_EQ(init::fans(empty({6, 4, 3, 3})), (std::pair<int64_t, int64_t>{36, 54}));
  EXPECT_DOUBLE_EQ(init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu", 0.2), std::sqrt(2.0 / 1.04));
  EXPECT_THROW(init::calculate_gain("swish"), Error);
  EXPECT_THROW(init::fans(empty({5})), Error);
  Tensor p = zeros({3}).set_requires_grad();
  init::ones_(p);  // parameters are initialized without recording
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

// NOTE [Skipped draws]: under the guard each initializer leaves its generator (the default one
// when none is given) where the real draw leaves it, for odd sizes and both widths, writes
// nothing, and the draws after it are the ones after a real draw; the guard nests and restores.
TEST(Init, SkippedDrawsAdvanceTheGeneratorAsTheDrawsWould) {
  auto inits = [](Generator* g) {
    init::normal_(empty({7, 3}), 0.0, 1.0, g);
    init::uniform_(empty({5}, DType::F64), -1.0, 1.0, g);
    init::normal_(empty({3}, DType::F64), 0.0, 2.0, g);
    init::kaiming_normal_(empty({6, 4, 3, 3}), 0.0, init::FanMode::FanOut, "relu", g);
    init::xavier_uniform_(empty({9, 2}, DType::BF16), 1.0, g);
    init::normal_(empty({1}), 0.0, 1.0, g);
  };
  Generator real(5), skipped(5);
  manual_seed(8);
  inits(&real);
  init::normal_(empty({11}));  // the default generator
  const PhiloxState default_after = default_generator().state();
  manual_seed(8);
  EXPECT_FALSE(init::SkipDrawsGuard::active());
  {
    const init::SkipDrawsGuard skip;
    EXPECT_TRUE(init::SkipDrawsGuard::active());
    {
      const init::SkipDrawsGuard inner(false);  // nested, disabled: still skipping
      EXPECT_TRUE(init::SkipDrawsGuard::active());
    }
    inits(&skipped);
    const Tensor untouched = full({11}, 3.0);
    init::normal_(untouched);
    EXPECT_EQ(untouched.to_vector<float>(), std::vector<float>(11, 3.0f)) << "nothing written";
  }
  EXPECT_FALSE(init::SkipDrawsGuard::active());
  EXPECT_EQ(skipped.state(), real.state());
  EXPECT_EQ(default_generator().state(), default_after);
  Tensor a = empty({4}), b = empty({4});
  init::normal_(a, 0.0, 1.0, &real);
  init::normal_(b, 0.0, 1.0, &skipped);
  EXPECT_TRUE(all_close(a, b, 0, 0));
}

TEST(Training, AnMlpAndAConvnetLearnSyntheticTasks) {
  manual_seed(11);
  Generator g(11);
  // MLP: regress y = sum(x^2) on 8-D inputs.
  Sequential mlp({std::make_shared<Linear>(8, 32), std::make_shared<GELU>(), std::make_shared<Linear>(32, 1)});
  auto sgd = [](Module& m, double lr) {
    NoGradGuard ng;
    for (Tensor& p : m.parameters()) sub_(p, mul(p.grad(), lr));
    m.zero_grad();
  };
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor x = randn({64, 8}, kF32, &g);
    Tensor y = sum(mul(x, x), {1}, true);
    Tensor loss = mse_loss(mlp.forward(x), y);
    loss.backward();
    sgd(mlp, 0.01);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  EXPECT_LT(last, 0.25 * first) << first << " -> " << last;
  // Convnet: tell a bright top half from a bright bottom half in 8x8 images.
  Sequential cnn({std::make_shared<Conv2d>(1, 4, Int2{3, 3}, Conv2dOptions{{1, 1}, {1, 1}, {1, 1}, 1, true}),
                  std::make_shared<BatchNorm2d>(4), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(Int2{2, 2}),
                  std::make_shared<Flatten>(), std::make_shared<Linear>(64, 2)});
  int correct = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor labels = randint(0, 2, {32}, kI64, &g);
    std::vector<float> px(32 * 64);
    const std::vector<int64_t> lv = labels.to_vector<int64_t>();
    const std::vector<float> noise = rand({32 * 64}, kF32, &g).to_vector<float>();
    for (int i = 0; i < 32; ++i)
      for (int p = 0; p < 64; ++p)
        px[static_cast<size_t>(i * 64 + p)] = noise[static_cast<size_t>(i * 64 + p)] + ((p < 32) == (lv[static_cast<size_t>(i)] == 0) ? 1.f : 0.f);
    Tensor logits = cnn.forward(from_vector<float>(px, {32, 1, 8, 8}));
    Tensor loss = cross_entropy(logits, labels);
    loss.backward();
    sgd(cnn, 0.1);
    if (step >= 180) {
      const std::vector<int64_t> pred = argmax(logits, 1).to_vector<int64_t>();
      for (int i = 0; i < 32; ++i) correct += pred[static_cast<size_t>(i)] == lv[static_cast<size_t>(i)];
    }
  }
  EXPECT_GT(correct, 0.95 * 20 * 32) << "accuracy over the last 20 batches";
}
