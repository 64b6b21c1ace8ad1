// Tiny GPT-2, BERT and AmoebaNet-D models and batches for the pipeline tests: every rank builds
// the same model from the same seed and the same batch, so each can also train the serial
// reference itself.
#pragma once

#include <memory>
#include <string>

#include "core/factory.h"
#include "core/rng.h"
#include "models/amoebanet_layered.h"
#include "models/bert.h"
#include "models/gpt2.h"
#include "models/models_test_util.h"

namespace trident::testing {

// GPT-2: embedding, n_layer blocks, head (n_layer + 2 layers), tied word embedding.
inline models::GPT2Config pipeline_gpt2_config(int64_t n_layer = 4, int64_t n_embd = 16, double dropout = 0.0) {
  models::GPT2Config c = small_gpt2_config(dropout);
  c.n_layer = n_layer;
  c.n_embd = n_embd;
  c.n_positions = 32;
  return c;
}

// BERT: embeddings, 4 encoder layers, heads (6 layers), MLM decoder tied to the word embedding.
inline models::BertConfig pipeline_bert_config() {
  models::BertConfig c = small_bert_config();
  c.num_hidden_layers = 4;
  return c;
}

// AmoebaNet-D(3, 4) on 12x12 images of 5 classes, with the auxiliary head and no dropout:
// stem, cell_0, reduction_cell_0, cell_1, aux_head, reduction_cell_1, cell_2, classifier (8
// layers; maps 10, 5, 3). The state crossing a stage boundary is {cur} after the stem, {cur,
// prev} after a cell and {cur, prev, aux} after the auxiliary head. Batch norm needs two images
// per micro-batch (the auxiliary head's last map is 1x1), hence kAmoebaBatch.
constexpr int64_t kAmoebaBatch = 16;
inline models::AmoebaNetConfig pipeline_amoebanet_config() {
  models::AmoebaNetConfig c;
  c.genotype = "D";
  c.num_cells = 3;
  c.filters = 4;
  c.num_classes = 5;
  c.image_size = 12;
  c.stem = models::AmoebaNetConfig::Stem::Small;
  c.stem_filters = 4;
  c.aux_head = true;
  c.dropout = 0.0;
  return c;
}

inline std::shared_ptr<models::LayeredModel> make_pipeline_model(const std::string& kind, double dropout = 0.0,
                                                                  int64_t n_embd = 16) {
  Generator g(1234);
  if (kind == "amoebanet")
    return std::make_shared<models::AmoebaNetLayered>(std::make_shared<models::AmoebaNet>(pipeline_amoebanet_config(), &g));
  if (kind == "gpt2") return std::make_shared<models::GPT2LMHeadModel>(pipeline_gpt2_config(4, n_embd, dropout), &g);
  return std::make_shared<models::BertForPreTraining>(pipeline_bert_config(), &g);
}

// A batch of B rows of T tokens (AmoebaNet: B images, T unused); `seed` picks the data.
inline models::Batch make_pipeline_batch(const std::string& kind, int64_t B, int64_t T, uint64_t seed) {
  Generator g(seed);
  if (kind == "amoebanet") {
    const models::AmoebaNetConfig c = pipeline_amoebanet_config();
    return models::Batch{{"images", randn({B, c.in_channels, c.image_size, c.image_size}, DType::F32, &g)},
                         {"labels", randint(0, c.num_classes, {B}, DType::I64, &g)}};
  }
  if (kind == "gpt2") {
    Tensor ids = randint(0, 61, {B, T}, DType::I64, &g);
    Tensor targets = randint(0, 61, {B, T}, DType::I64, &g);
    return models::Batch{{"input_ids", ids}, {"targets", targets}};
  }
  Tensor ids = randint(0, 37, {B, T}, DType::I64, &g);
  std::vector<int64_t> labels = randint(0, 37, {B, T}, DType::I64, &g).to_vector<int64_t>();
  std::vector<int64_t> mask(static_cast<size_t>(B * T), 1), types(static_cast<size_t>(B * T), 0);
  for (int64_t i = 0; i < B * T; ++i) {
    // Every third position masked (its label kept); the last two tokens of odd rows are padding.
    const int64_t row = i / T, col = i % T;
    if (i % 3 != 0) labels[static_cast<size_t>(i)] = -100;
    if (row % 2 == 1 && col >= T - 2) mask[static_cast<size_t>(i)] = 0;
    if (col >= T / 2) types[static_cast<size_t>(i)] = 1;
  }
  Tensor nsp = randint(0, 2, {B}, DType::I64, &g);
  return models::Batch{{"input_ids", ids},
                       {"attention_mask", from_vector<int64_t>(mask, {B, T})},
                       {"token_type_ids", from_vector<int64_t>(types, {B, T})},
                       {"mlm_labels", from_vector<int64_t>(labels, {B, T})},
                       {"next_sentence_label", nsp}};
}

}  // namespace trident::testing
