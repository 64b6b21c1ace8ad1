#include "models/gpt2_generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "ops/index.h"
#include "ops/shape.h"

namespace trident::models {

namespace {

// The token of one row (NOTE in gpt2_generate.h): logits in double, u uniform in [0, 1).
int64_t sample_row(const double* logits, int64_t V, const SamplingOptions& o, double u) {
  if (o.greedy) return std::max_element(logits, logits + V) - logits;  // first of equal maxima
  std::vector<int64_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  int64_t keep = V;
  if (o.top_k > 0 && o.top_k < V) {
    const double kth = logits[order[static_cast<size_t>(o.top_k - 1)]];
    keep = o.top_k;
    while (keep < V && logits[order[static_cast<size_t>(keep)]] == kth) ++keep;  // ties with the k-th stay
  }
  // Softmax of logits / temperature over the kept tokens (the largest first, so exp <= 1).
  const double top = logits[order[0]] / o.temperature;
  std::vector<double> p(static_cast<size_t>(keep));
  double z = 0;
  for (int64_t i = 0; i < keep; ++i) z += p[static_cast<size_t>(i)] = std::exp(logits[order[static_cast<size_t>(i)]] / o.temperature - top);
  if (o.top_p < 1.0) {
    double before = 0;
    int64_t n = 0;
    while (n < keep && before < o.top_p * z) before += p[static_cast<size_t>(n++)];
    keep = std::max<int64_t>(n, 1);
    z = 0;
    for (int64_t i = 0; i < keep; ++i) z += p[static_cast<size_t>(i)];
  }
  double acc = 0;
  const double target = u * z;
  for (int64_t i = 0; i < keep; ++i) {
    acc += p[static_cast<size_t>(i)];
    if (target < acc) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(keep - 1)];  // u * z rounding past the last sum
}

// Restores a module's training mode on scope exit.
struct EvalScope {
  nn::Module& m;
  bool was;
  explicit EvalScope(nn::Module& m) : m(m), was(m.is_training()) { m.eval(); }
  ~EvalScope() { m.train(was); }
};

}  // namespace

Tensor sample_tokens(const Tensor& logits, const SamplingOptions& o, Generator* gen) {
  TRIDENT_CHECK(logits.dim() == 2 && logits.size(1) > 0 && is_floating(logits.dtype()),
                "sample_tokens: expected floating logits [B, V], got shape ", logits.sizes(), " of ", logits.dtype());
  if (!o.greedy) {
    TRIDENT_CHECK(o.temperature > 0 && std::isfinite(o.temperature), "sample_tokens: temperature must be positive, got ",
                  o.temperature, " (greedy decoding is SamplingOptions::greedy)");
    TRIDENT_CHECK(o.top_k >= 0, "sample_tokens: top_k must be >= 0, got ", o.top_k);
    TRIDENT_CHECK(o.top_p > 0 && o.top_p <= 1, "sample_tokens: top_p must be in (0, 1], got ", o.top_p);
  }
  const int64_t B = logits.size(0), V = logits.size(1);
  const std::vector<double> l = logits.to_vector<double>();
  std::vector<double> u(static_cast<size_t>(B), 0.0);
  if (!o.greedy) u = rand({B}, DType::F64, gen).to_vector<double>();
  std::vector<int64_t> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    out[static_cast<size_t>(b)] = sample_row(l.data() + b * V, V, o, u[static_cast<size_t>(b)]);
  return from_vector<int64_t>(out, {B});
}

Tensor generate(GPT2LMHeadModel& model, const Tensor& prompt, const GenerateOptions& o) {
  TRIDENT_CHECK(prompt.dim() == 2 && prompt.size(1) >= 1 && prompt.dtype() == DType::I64,
                "generate: the prompt must be i64 [B, T] with T >= 1, got shape ", prompt.sizes(), " of ", prompt.dtype());
  TRIDENT_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", o.max_new_tokens);
  NoGradGuard no_grad;
  EvalScope eval(model);
  const int64_t B = prompt.size(0), P = model.config().n_positions;
  std::vector<int64_t> tokens = prompt.to_vector<int64_t>();  // row-major [B, len]
  int64_t len = prompt.size(1);
  auto window = [&](int64_t from) {  // tokens [from, len) of every row, [B, len - from]
    std::vector<int64_t> w;
    for (int64_t b = 0; b < B; ++b) w.insert(w.end(), tokens.begin() + b * len + from, tokens.begin() + (b + 1) * len);
    return from_vector<int64_t>(w, {B, len - from});
  };
  // The model may be on a GPU: its inputs go to its device (make_cache makes the key/value cache
  // there); the tokens and the sampling stay on the host (one copy of the last logits per step),
  // and the result is a host tensor, as for a CPU model.
  const Device dev = model.parameters().front().device();
  auto on_device = [&](const Tensor& t) { return t.device() == dev ? t : t.to(dev); };
  auto last = [](const Tensor& logits) { return select(logits, 1, logits.size(1) - 1); };  // [B, V]
  // A window recomputed without the cache. Under sequence parallelism forward() needs a length
  // dividing by tp; forward_cached with a cache of its own pads (NOTE [Sequence-parallel
  // decoding]), the same values.
  auto recompute = [&](const Tensor& ids) {
    if (!model.config().factory().sequence_parallel()) return model.forward(ids).logits;
    GPT2KVCache scratch = model.make_cache(ids.size(0), ids.size(1));
    return model.forward_cached(ids, scratch);
  };

  GPT2KVCache cache;
  const bool cached = o.use_cache && len < P;
  Tensor logits;
  if (cached) {
    cache = model.make_cache(B, std::min(P, len + std::max<int64_t>(o.max_new_tokens, 1)));
    logits = last(model.forward_cached(on_device(prompt), cache, /*last_position_only=*/true));
  } else {
    logits = last(recompute(on_device(window(std::max<int64_t>(0, len - P)))));
  }
  std::vector<bool> done(static_cast<size_t>(B), false);
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    Tensor next = sample_tokens(logits, o.sampling, o.generator);
    std::vector<int64_t> nv = next.to_vector<int64_t>();
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      if (o.stop_token) {
        if (done[static_cast<size_t>(b)]) nv[static_cast<size_t>(b)] = *o.stop_token;
        if (nv[static_cast<size_t>(b)] == *o.stop_token) done[static_cast<size_t>(b)] = true;
      }
      all_done = all_done && done[static_cast<size_t>(b)];
    }
    if (o.stop_token) next = from_vector<int64_t>(nv, {B});
    std::vector<int64_t> grown;
    for (int64_t b = 0; b < B; ++b) {
      grown.insert(grown.end(), tokens.begin() + b * len, tokens.begin() + (b + 1) * len);
      grown.push_back(nv[static_cast<size_t>(b)]);
    }
    tokens.swap(grown);
    ++len;
    if (o.on_token) o.on_token(step, logits, next);
    if ((o.stop_token && all_done) || step + 1 == o.max_new_tokens) break;
    if (cached && cache.length < cache.capacity())
      logits = last(model.forward_cached(on_device(reshape(next, {B, 1})), cache));
    else
      logits = last(recompute(on_device(window(std::max<int64_t>(0, len - P)))));
  }
  return window(0);
}

}  // namespace trident::models
