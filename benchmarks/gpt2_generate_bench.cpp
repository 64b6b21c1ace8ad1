// GPT-2 text generation on the CPU: the 124M model (random weights, seeded; vocabulary 50257,
// context 1024), one sequence, a prompt of P tokens, then N greedy tokens with the key/value
// cache, through models::generate (what the `generate` program runs). The same model and loop
// written plainly in PyTorch is benchmarks/gpt2_generate_torch.py; scripts/bench-gpt2-vs-torch.sh
// with `generate` runs both with the same threads.
//
//   bench_gpt2_generate [threads] [prompt] [new] [runs]
//     -> {"prefill_ms": ..., "token_ms": ..., "tokens_per_s": ..., "threads": ...}
// prefill_ms: the prompt's forward pass and its first token (median of `runs` generations after
// a warm-up); token_ms: the median time of one more token (one position through the model with
// the cache, its logits, the argmax) over every later step of those runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/parallel.h"
#include "models/gpt2_generate.h"
#include "trident.h"

using namespace trident;
using namespace trident::models;

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  const int64_t P = argc > 2 ? std::atoll(argv[2]) : 64;
  const int64_t N = argc > 3 ? std::atoll(argv[3]) : 64;
  const int runs = argc > 4 ? std::atoi(argv[4]) : 3;
  if (threads > 0) set_num_threads(threads);
  Generator g(1);
  GPT2LMHeadModel model(GPT2Config::preset("124M"), &g);
  Generator data(2);
  const Tensor prompt = randint(0, 50257, {1, P}, DType::I64, &data);
  std::vector<double> prefill, token;
  int64_t last = 0;
  for (int r = 0; r < runs + 1; ++r) {
    std::vector<double> at;  // the time of each token
    const auto t0 = std::chrono::steady_clock::now();
    GenerateOptions o;
    o.max_new_tokens = N;
    o.sampling.greedy = true;
    o.on_token = [&](int64_t, const Tensor&, const Tensor&) {
      at.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    };
    const Tensor out = generate(model, prompt, o);
    last = out.to_vector<int64_t>().back();
    if (r == 0) continue;  // warm-up
    prefill.push_back(at.front());
    for (size_t i = 1; i < at.size(); ++i) token.push_back(at[i] - at[i - 1]);
  }
  if (std::getenv("TRIDENT_BENCH_PROFILE")) {  // where the decoding steps' time goes, to stderr
    NoGradGuard no_grad;
    model.eval();
    GPT2KVCache cache = model.make_cache(1, P + N);
    Tensor logits = model.forward_cached(prompt, cache);
    profiler::start();
    for (int64_t i = 1; i < N; ++i) {
      const Tensor next = argmax(select(logits, 1, logits.size(1) - 1), 1, /*keepdim=*/true);
      logits = model.forward_cached(next, cache);
    }
    std::fprintf(stderr, "%s\n", profiler::stop().table().c_str());
  }
  std::sort(prefill.begin(), prefill.end());
  std::sort(token.begin(), token.end());
  const double tok = token[token.size() / 2];
  std::printf("{\"prefill_ms\": %.2f, \"token_ms\": %.3f, \"tokens_per_s\": %.2f, \"threads\": %d, \"parameters\": %lld, "
              "\"last_token\": %lld}\n",
              prefill[prefill.size() / 2], tok, 1e3 / tok, get_num_threads(), static_cast<long long>(model.num_parameters()),
              static_cast<long long>(last));
  return 0;
}
