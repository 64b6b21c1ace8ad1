// Helpers shared by the model tests.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "models/bert_config.h"
#include "models/gpt2_config.h"
#include "test_util.h"

namespace trident::testing {

// A GPT-2 for the CPU tests: 2 layers, 2 heads, width 16, vocabulary 61 padded to 64, context 16.
inline models::GPT2Config small_gpt2_config(double dropout = 0.0) {
  models::GPT2Config c = models::GPT2Config::preset("tiny");
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 61;
  c.padded_vocab_size = 64;
  c.n_positions = 16;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = dropout;
  return c;
}

// A BERT for the CPU tests: 2 layers, 2 heads, width 16, intermediate 32, vocabulary 37 padded
// to 40, 16 positions.
inline models::BertConfig small_bert_config(double dropout = 0.0) {
  models::BertConfig c = models::BertConfig::preset("tiny");
  c.vocab_size = 37;
  c.padded_vocab_size = 40;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.num_hidden_layers = 2;
  c.max_position_embeddings = 16;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = dropout;
  return c;
}

}  // namespace trident::testing
