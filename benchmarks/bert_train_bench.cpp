// BERT pre-training throughput on the CPU: BertForPreTraining with vocabulary 30522, 4 layers,
// 4 heads, hidden 256, intermediate 1024, sequences of 128 tokens, batch 8, AdamW, no dropout;
// both heads (masked LM on the masked positions only, next sentence). The batch is the same
// formula on both sides (bert_train_torch.py): sequence b holds 128 - 8 b tokens (the rest is
// padding, masked out of attention), its second half is segment 1, and position p > 0 is masked
// when (7 p + 3 b) mod 20 < 3 (about 15%, 125 positions in all); token ids are random.
// The same model written plainly in PyTorch is benchmarks/bert_train_torch.py;
// scripts/bench-bert-vs-torch.sh runs both with the same threads.
//
//   bench_bert_train [threads] [steps] [fp32|bf16]
//     -> {"tokens_per_s": ..., "step_ms": ..., "threads": ..., "masked": ..., ...}
// bf16: the forward under autocast (NOTE [Autocast]).
// Prints the median step time of `steps` timed steps (after 3 warm-up steps); tokens/s counts
// every position of the batch, padding included (as the PyTorch side does). With
// TRIDENT_BENCH_PROFILE set, the op profile of one more step goes to stderr.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmarks/train_step_bench.h"
#include "core/parallel.h"
#include "trident.h"

using namespace trident;
using namespace trident::models;

namespace {
constexpr int64_t kB = 8, kT = 128, kV = 30522;

// The batch described above (bert_train_torch.py's batch() computes the same).
Batch make_batch(Generator* gen) {
  std::vector<int64_t> mask(kB * kT), types(kB * kT), labels(kB * kT, -100), nsp(kB);
  const Tensor ids = randint(1, kV, {kB, kT}, DType::I64, gen);
  const std::vector<int64_t> id = ids.to_vector<int64_t>();
  for (int64_t b = 0; b < kB; ++b) {
    const int64_t len = kT - 8 * b;
    nsp[static_cast<size_t>(b)] = b % 2;
    for (int64_t p = 0; p < kT; ++p) {
      const auto i = static_cast<size_t>(b * kT + p);
      mask[i] = p < len ? 1 : 0;
      types[i] = p < len && p >= len / 2 ? 1 : 0;
      if (p > 0 && p < len && (7 * p + 3 * b) % 20 < 3) labels[i] = id[i];
    }
  }
  Batch batch;
  batch.set("input_ids", ids);
  batch.set("token_type_ids", from_vector<int64_t>(types, {kB, kT}));
  batch.set("attention_mask", from_vector<int64_t>(mask, {kB, kT}));
  batch.set("mlm_labels", from_vector<int64_t>(labels, {kB, kT}));
  batch.set("next_sentence_label", from_vector<int64_t>(nsp, {kB}));
  return batch;
}
}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  const bool bf16 = argc > 3 && std::string(argv[3]) == "bf16";
  if (threads > 0) set_num_threads(threads);
  BertConfig c = BertConfig::preset("tiny");
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.hidden_size = 256;
  c.intermediate_size = 1024;
  c.vocab_size = kV;
  c.padded_vocab_size = 0;
  c.max_position_embeddings = kT;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  Generator g(1);
  BertForPreTraining model(c, &g);
  nn::optim::AdamW opt(model.parameters(), {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .weight_decay = 0.01});
  Generator data(2);
  const Batch batch = make_batch(&data);
  const int64_t masked = sum(ne(batch.get("mlm_labels"), -100)).item<int64_t>();
  const bench::StepTiming t = bench::time_training_steps(steps, bf16, opt, [&] { return model.forward(batch).loss; });
  const double med = t.median_ms;
  std::printf(
      "{\"tokens_per_s\": %.1f, \"step_ms\": %.2f, \"threads\": %d, \"parameters\": %lld, \"masked\": %lld, "
      "\"last_loss\": %.4f}\n",
      static_cast<double>(kB * kT) / (med / 1e3), med, get_num_threads(), static_cast<long long>(model.num_parameters()),
      static_cast<long long>(masked), t.last_loss);
  return 0;
}
