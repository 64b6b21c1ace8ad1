// Helpers shared by the model tests.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/rng.h"
#include "models/bert_config.h"
#include "models/gpt2_config.h"
#include "models/layer_list.h"
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

// NOTE [Stage-only build]: build(gen, keep) for several ranges of the list against build(gen,
// kAllLayers): the same draws (from gen and the default generator; NOTE [Skipped draws]); every state-dict entry a kept layer holds equal bit for bit to the
// whole build's, every other a NaN placeholder of the same shape and dtype (tensors of one
// element aside); the kept layers compute what the whole model's do on `batch` (evaluation, the
// input of the first kept layer computed by the whole model); ranges that are not non-empty
// ranges of the list refused.
inline void expect_stage_only_builds_keep_the_whole_builds_values(
    const std::function<std::unique_ptr<models::LayeredModel>(Generator*, const models::LayerRange&)>& build,
    const models::Batch& batch) {
  Generator g0(11);
  manual_seed(12);  // a build may draw from the default generator too (nn::Embedding's own init)
  const std::unique_ptr<models::LayeredModel> whole = build(&g0, models::kAllLayers);
  const PhiloxState default_after = default_generator().state();
  whole->eval();
  std::map<std::string, Tensor> whole_state;
  for (const auto& [name, t] : whole->state_dict()) whole_state[name] = t.clone();
  const size_t L = whole->layers().size();
  for (const models::LayerRange& keep : {models::LayerRange{0, 1}, {1, L - 1}, {L - 1, L}, {0, 2}, {2, L}}) {
    SCOPED_TRACE("keep [" + std::to_string(keep.first) + ", " + std::to_string(keep.second) + ")");
    Generator g(11);
    manual_seed(12);
    const std::unique_ptr<models::LayeredModel> stage = build(&g, keep);
    stage->eval();
    EXPECT_EQ(g.state(), g0.state()) << "the same draws as the whole build";
    EXPECT_EQ(default_generator().state(), default_after) << "the same draws from the default generator";
    EXPECT_EQ(stage->num_parameters(), whole->num_parameters()) << "placeholders keep the shapes";
    std::set<std::string> kept_names;
    ASSERT_TRUE(stage->buffers().empty()) << "the kept entries are the kept layers' parameters";
    for (const auto& [name, t] : stage->layers().named_parameters(keep.first, keep.second)) kept_names.insert(name);
    int64_t kept = 0, released = 0;
    for (const auto& [name, t] : stage->state_dict()) {
      const Tensor& w = whole_state.at(name);
      ASSERT_EQ(t.sizes(), w.sizes()) << name;
      ASSERT_EQ(t.dtype(), w.dtype()) << name;
      if (kept_names.count(name) != 0 || t.numel() <= 1) {
        EXPECT_FALSE(is_broadcast_scalar(t) && t.numel() > 1) << name;
        EXPECT_TRUE(all_close(t, w, 0, 0)) << name;
        ++kept;
      } else {
        EXPECT_TRUE(is_broadcast_scalar(t)) << name;
        EXPECT_TRUE(std::isnan(t.to_vector<double>().front())) << name;
        ++released;
      }
    }
    EXPECT_GT(kept, 0);
    EXPECT_GT(released, 0);
    const models::Activations in = whole->layers().run(batch, {}, 0, keep.first);
    const models::Activations a = whole->layers().run(batch, in, keep.first, keep.second);
    const models::Activations b = stage->layers().run(batch, in, keep.first, keep.second);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(all_close(a[i], b[i], 0, 0)) << "output " << i;
  }
  Generator g(11);
  EXPECT_THROW(build(&g, {2, 2}), Error);
  EXPECT_THROW(build(&g, {0, L + 1}), Error);
}

}  // namespace trident::testing
