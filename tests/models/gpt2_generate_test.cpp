// GPT-2 text generation: the key/value cache gives what full recomputation gives, greedy decoding
// is the argmax of the full forward, and sampling keeps the tokens temperature, top-k and top-p
// allow, with the probabilities they give (computed by hand here).
#include "models_test_util.h"

#include <cmath>
#include <map>

using namespace trident;
using namespace trident::models;
using namespace trident::testing;

namespace {

GPT2Config gen_config() {
  GPT2Config c = GPT2Config::preset("tiny");
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 29;
  c.padded_vocab_size = 32;
  c.n_positions = 12;
  return c;
}

Tensor prompt(int64_t B, int64_t T, uint64_t seed) {
  Generator g(seed);
  return randint(0, 29, {B, T}, DType::I64, &g);
}

}  // namespace

TEST(GPT2Generate, CachedLogitsEqualFullRecomputation) {
  Generator init(1);
  GPT2LMHeadModel m(gen_config(), &init);
  m.eval();
  NoGradGuard ng;
  const Tensor seq = prompt(2, 9, 2);
  const Tensor full = m.forward(seq).logits;  // [2, 9, 29]
  GPT2KVCache cache = m.make_cache(2, 12);
  // A prompt of 4 positions, then one at a time, then two at once.
  std::vector<std::pair<int64_t, int64_t>> chunks = {{0, 4}, {4, 1}, {5, 1}, {6, 2}, {8, 1}};
  for (auto [start, len] : chunks) {
    const Tensor step = m.forward_cached(narrow(seq, 1, start, len), cache);
    EXPECT_EQ(cache.length, start + len);
    EXPECT_TRUE(all_close(step, narrow(full, 1, start, len), 1e-5, 1e-6)) << "positions " << start << "+" << len;
  }
  expect_error([&] { m.forward_cached(narrow(seq, 1, 0, 4), cache); }, {"cache"});
}

// forward_cached(..., last_position_only): the last new position's logits, [B, 1, V], and the
// cache advanced as by a full step (the next steps' logits the same).
TEST(GPT2Generate, LastPositionOnlyGivesTheLastLogitsAndTheSameCache) {
  Generator init(5);
  GPT2LMHeadModel m(gen_config(), &init);
  m.eval();
  NoGradGuard ng;
  const Tensor seq = prompt(2, 9, 6);
  const Tensor full = m.forward(seq).logits;
  GPT2KVCache a = m.make_cache(2, 12), b = m.make_cache(2, 12);
  const Tensor last = m.forward_cached(narrow(seq, 1, 0, 5), a, /*last_position_only=*/true);
  const Tensor all = m.forward_cached(narrow(seq, 1, 0, 5), b);
  EXPECT_EQ(last.sizes(), (Shape{2, 1, 29}));
  EXPECT_TRUE(all_close(last, narrow(all, 1, 4, 1), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(last, narrow(full, 1, 4, 1), 1e-5, 1e-6));
  EXPECT_EQ(a.length, 5);
  for (size_t i = 0; i < a.keys.size(); ++i) {
    EXPECT_TRUE(all_close(a.keys[i], b.keys[i], 0, 0)) << "layer " << i;
    EXPECT_TRUE(all_close(a.values[i], b.values[i], 0, 0)) << "layer " << i;
  }
  const Tensor next = m.forward_cached(narrow(seq, 1, 5, 2), a, /*last_position_only=*/true);
  EXPECT_TRUE(all_close(next, narrow(full, 1, 6, 1), 1e-5, 1e-6)) << "a second step";
}

TEST(GPT2Generate, GreedyIsTheArgmaxOfTheFullForwardWithAndWithoutCache) {
  Generator init(3);
  GPT2LMHeadModel m(gen_config(), &init);
  const Tensor p = prompt(2, 3, 4);
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.sampling.greedy = true;
  o.use_cache = true;
  const Tensor cached = generate(m, p, o);
  o.use_cache = false;
  const Tensor plain = generate(m, p, o);
  ASSERT_EQ(cached.sizes(), (Shape{2, 9}));
  EXPECT_EQ(cached.to_vector<int64_t>(), plain.to_vector<int64_t>());
  EXPECT_EQ(narrow(cached, 1, 0, 3).to_vector<int64_t>(), p.to_vector<int64_t>()) << "the prompt is kept";
  EXPECT_TRUE(m.is_training()) << "training mode restored";
  // Independently: each new token is the argmax of the last position's logits of the full model.
  m.eval();
  NoGradGuard ng;
  for (int64_t t = 3; t < 9; ++t) {
    const std::vector<float> logits = narrow(m.forward(narrow(cached, 1, 0, t)).logits, 1, t - 1, 1).contiguous().to_vector<float>();
    const std::vector<int64_t> got = cached.to_vector<int64_t>();
    for (int64_t b = 0; b < 2; ++b) {
      int64_t best = 0;
      for (int64_t v = 1; v < 29; ++v)
        if (logits[static_cast<size_t>(b * 29 + v)] > logits[static_cast<size_t>(b * 29 + best)]) best = v;
      EXPECT_EQ(got[static_cast<size_t>(b * 9 + t)], best) << "row " << b << " position " << t;
    }
  }
}

TEST(GPT2Generate, SamplingWithCacheGivesTheTokensOfRecomputation) {
  Generator init(5);
  GPT2LMHeadModel m(gen_config(), &init);
  const Tensor p = prompt(3, 2, 6);
  GenerateOptions o;
  o.max_new_tokens = 14;  // 16 positions: past the context of 12, where the window slides
  o.sampling.temperature = 0.8;
  o.sampling.top_k = 10;
  o.sampling.top_p = 0.9;
  Generator g1(7), g2(7);
  o.generator = &g1;
  o.use_cache = true;
  const Tensor a = generate(m, p, o);
  o.generator = &g2;
  o.use_cache = false;
  const Tensor b = generate(m, p, o);
  EXPECT_EQ(a.sizes(), (Shape{3, 16}));
  EXPECT_EQ(a.to_vector<int64_t>(), b.to_vector<int64_t>());
  for (int64_t v : a.to_vector<int64_t>()) EXPECT_TRUE(v >= 0 && v < 29) << v << " is outside the vocabulary";
}

TEST(GPT2Generate, StopTokenFinishesRows) {
  Generator init(8);
  GPT2LMHeadModel m(gen_config(), &init);
  GenerateOptions o;
  o.max_new_tokens = 5;
  o.sampling.greedy = true;
  const Tensor free_run = generate(m, prompt(1, 3, 9), o);
  const int64_t first = free_run.to_vector<int64_t>()[3];
  o.stop_token = first;
  const Tensor stopped = generate(m, prompt(1, 3, 9), o);
  EXPECT_EQ(stopped.sizes(), (Shape{1, 4})) << "the only row produced the stop token at once";
}

TEST(GPT2Generate, SampleTokensFollowsTemperatureTopKAndTopP) {
  // One row of logits log([0.5, 0.3, 0.15, 0.05]): hand-computed probabilities.
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  std::vector<float> row;
  for (double q : probs) row.push_back(static_cast<float>(std::log(q)));
  const int64_t N = 20000;
  std::vector<float> rows;
  for (int64_t i = 0; i < N; ++i) rows.insert(rows.end(), row.begin(), row.end());
  const Tensor logits = from_vector<float>(rows, {N, 4});
  auto freq = [&](const SamplingOptions& o) {
    Generator g(11);
    const std::vector<int64_t> t = sample_tokens(logits, o, &g).to_vector<int64_t>();
    std::vector<double> f(4, 0.0);
    for (int64_t v : t) f[static_cast<size_t>(v)] += 1.0 / static_cast<double>(N);
    return f;
  };
  // 3 sigma of a frequency over 20000 draws is under 0.011.
  const double tol = 0.011;
  SamplingOptions plain;
  std::vector<double> f = freq(plain);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(f[i], probs[i], tol) << "token " << i;
  // Temperature 2: p^(1/2) renormalized = [.7071, .5477, .3873, .2236] / 1.8657.
  SamplingOptions hot;
  hot.temperature = 2.0;
  f = freq(hot);
  const double want_hot[] = {0.37900, 0.29357, 0.20759, 0.11984};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(f[i], want_hot[i], tol) << "token " << i;
  // top-k 2: [0.5, 0.3] / 0.8.
  SamplingOptions k2;
  k2.top_k = 2;
  f = freq(k2);
  EXPECT_NEAR(f[0], 0.625, tol);
  EXPECT_NEAR(f[1], 0.375, tol);
  EXPECT_EQ(f[2] + f[3], 0.0);
  // top-p 0.85: the mass before each token, in order, is 0, 0.5, 0.8 (all < 0.85: kept), 0.95
  // (dropped): [0.5, 0.3, 0.15] / 0.95.
  SamplingOptions p85;
  p85.top_p = 0.85;
  f = freq(p85);
  EXPECT_NEAR(f[0], 0.5 / 0.95, tol);
  EXPECT_NEAR(f[2], 0.15 / 0.95, tol);
  EXPECT_EQ(f[3], 0.0);
  // top-p 0.7: 0.5 < 0.7 keeps the second, 0.8 >= 0.7 stops: [0.5, 0.3] / 0.8.
  SamplingOptions p70;
  p70.top_p = 0.7;
  f = freq(p70);
  EXPECT_NEAR(f[0], 0.625, tol);
  EXPECT_EQ(f[2] + f[3], 0.0);
  // Greedy: the argmax, the lowest id among equal maxima.
  SamplingOptions greedy;
  greedy.greedy = true;
  EXPECT_EQ(sample_tokens(from_vector<float>({1, 3, 3, 2}, {1, 4}), greedy).to_vector<int64_t>(), (std::vector<int64_t>{1}));
  // Same seed, same tokens.
  Generator a(3), b(3);
  EXPECT_EQ(sample_tokens(logits, plain, &a).to_vector<int64_t>(), sample_tokens(logits, plain, &b).to_vector<int64_t>());
}
