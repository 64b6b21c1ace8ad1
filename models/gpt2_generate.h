// Text generation with GPT-2: greedy decoding or sampling (temperature, top-k, top-p) from a
// seeded Generator, with or without the key/value cache (the same tokens either way: the cache
// only avoids recomputing the keys and values of positions already seen).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "core/rng.h"
#include "models/gpt2.h"

namespace trident::models {

struct SamplingOptions {
  bool greedy = false;       // argmax (the lowest id among equal maxima); the rest is ignored
  double temperature = 1.0;  // > 0: logits are divided by it
  int64_t top_k = 0;         // keep the k largest logits (ties with the k-th kept too); 0: all
  double top_p = 1.0;        // in (0, 1]: keep the most likely tokens, in order, while the
                             // probability of those before them is below top_p (at least one)
};

// The next token of each row of logits [B, V] (any floating dtype): i64 [B]. Hugging Face's
// order: temperature, then top-k, then top-p, then a draw from the renormalized softmax. Each
// row uses one uniform number from `gen` (the default generator when null; greedy draws none),
// taken in row order by inverse CDF over the kept tokens sorted by decreasing probability
// (equal probabilities by increasing id), so a seed fixes the tokens.
Tensor sample_tokens(const Tensor& logits, const SamplingOptions& options, Generator* gen = nullptr);

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  SamplingOptions sampling;
  bool use_cache = true;
  // A row that produced it is finished: it gets stop_token from then on, and generation ends
  // when every row is finished.
  std::optional<int64_t> stop_token;
  Generator* generator = nullptr;  // for sampling; the default generator when null
  // Called after each new token: the step (0, 1, ...), the logits it was drawn from [B,
  // vocab_size] and the tokens [B] (to print text as it comes, or to compare runs).
  std::function<void(int64_t step, const Tensor& logits, const Tensor& tokens)> on_token;
};

// Continues prompt [B, T0] (i64, T0 >= 1) by up to max_new_tokens tokens: returns [B, T0 + n].
// The model runs in evaluation mode under NoGradGuard (its training mode is restored after).
// When the sequence outgrows the context (n_positions), each step sees only the last
// n_positions tokens, recomputed without the cache (positions restart at 0 in that window), with
// or without use_cache.
Tensor generate(GPT2LMHeadModel& model, const Tensor& prompt, const GenerateOptions& options = {});

}  // namespace trident::models
