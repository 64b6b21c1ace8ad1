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
#include "nn/module.h"
#include "autograd/engine.h"
#include "ops/autocast.h"
#include "parallel/pipeline/pipeline.h"
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

// Copies every parameter of `from` into the same one of `to` (a model of the same architecture),
// converting the dtype: e.g. an f32 model's weights into an f64 reference of it.
inline void copy_parameters(const nn::Module& from, nn::Module& to) {
  NoGradGuard no_grad;
  const std::vector<Tensor> pf = from.parameters(), pt = to.parameters();
  TRIDENT_CHECK(pf.size() == pt.size(), "copy_parameters: ", pf.size(), " parameters into ", pt.size());
  for (size_t i = 0; i < pf.size(); ++i) copy_(pt[i], pf[i]);
}

// NOTE [Loss without logits] in bf16: `a` (the loss without logits) and `b` (the loss on logits),
// f32 models holding the same weights, against `r`, an f64 model of the same architecture given
// a's weights (copy_parameters). `loss(model)` runs one forward and returns its loss. Under
// autocast bf16, a's loss is f32 and within `loss_tol` (relative) of r's, and each of a's
// gradients is within b's error of r's plus 2^-8: the logits-free loss is at least as accurate
// as the composed one. Parameters whose f64 gradient is below 1e-12 (zero in exact arithmetic:
// rounding noise, no reference) are skipped; returns how many were compared.
template <typename Model>
int expect_bf16_loss_without_logits_as_accurate(Model& a, Model& b, Model& r, const std::function<Tensor(Model&)>& loss,
                                                double loss_tol) {
  copy_parameters(a, r);
  const Tensor ref = loss(r);
  const autograd::TensorList g64 = autograd::grad({ref}, r.parameters());
  Tensor la, lb;
  {
    autocast::Guard bf16(DType::BF16);
    la = loss(a);
    lb = loss(b);
  }
  EXPECT_EQ(la.dtype(), DType::F32);
  EXPECT_NEAR(la.item<double>(), ref.item<double>(), ref.item<double>() * loss_tol);
  const autograd::TensorList ga = autograd::grad({la}, a.parameters()), gb = autograd::grad({lb}, b.parameters());
  int compared = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    if (norm(g64[i], 2.0).item<double>() < 1e-12) continue;
    const double ea = relative_error(ga[i], g64[i]), eb = relative_error(gb[i], g64[i]);
    EXPECT_LE(ea, eb + 1.0 / 256) << "parameter " << i << ": " << ea << " against the composed " << eb;
    ++compared;
  }
  return compared;
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

// NOTE [Stage-only build]: build(gen, keep) for several ranges of the list is what building whole
// and cutting gives (parallel::pipeline::keep_stage of the range as a stage): the same draws
// (from gen and the default generator; NOTE [Skipped draws]); every state-dict entry (buffers
// included) a placeholder where the cut's is one, else equal to it bit for bit; the kept layers
// compute what the whole model's do on `batch` (evaluation, the input of the first kept layer
// computed by the whole model); ranges that are not non-empty ranges of the list refused.
inline void expect_stage_only_builds_are_the_cut(
    const std::function<std::unique_ptr<models::LayeredModel>(Generator*, const models::LayerSelection&)>& build,
    const models::Batch& batch) {
  Generator g0(11);
  const std::unique_ptr<models::LayeredModel> whole = build(&g0, models::kAllLayers);
  whole->eval();
  const size_t L = whole->layers().size();
  struct Case {
    models::LayerSelection keep;
    std::vector<int64_t> balance;
    int64_t stage = 0, chunks = 1;
  };
  std::vector<Case> cases;
  for (const models::LayerRange& keep : {models::LayerRange{0, 1}, {1, L - 1}, {L - 1, L}, {0, 2}, {2, L}}) {
    // The range as a stage of a balance: the layers before it and after it as stages of their own.
    Case c{keep, {}, 0, 1};
    if (keep.first > 0) c.balance.push_back(static_cast<int64_t>(keep.first));
    c.stage = static_cast<int64_t>(c.balance.size());
    c.balance.push_back(static_cast<int64_t>(keep.second - keep.first));
    if (keep.second < L) c.balance.push_back(static_cast<int64_t>(L - keep.second));
    cases.push_back(c);
  }
  // Two chunks of an interleaved pipeline's rank 1 (NOTE [Interleaved schedule]): virtual stages
  // {0}, {1}, {2 .. L-2}, {L-1} over two ranks, rank 1 holding the second and the fourth.
  cases.push_back({models::LayerSelection({{1, 2}, {L - 1, L}}), {1, 1, static_cast<int64_t>(L) - 3, 1}, 1, 2});
  for (const Case& c : cases) {
    std::string where;
    for (const auto& [b, e] : c.keep.ranges()) where += " [" + std::to_string(b) + ", " + std::to_string(e) + ")";
    SCOPED_TRACE("keep" + where);
    Generator gc(11);
    manual_seed(12);  // a build may draw from the default generator too (nn::Embedding's own init)
    const std::unique_ptr<models::LayeredModel> cut = build(&gc, models::kAllLayers);
    const PhiloxState default_after = default_generator().state();
    parallel::pipeline::keep_stage(*cut, c.balance, c.stage, c.chunks);
    Generator g(11);
    manual_seed(12);
    const std::unique_ptr<models::LayeredModel> built = build(&g, c.keep);
    built->eval();
    EXPECT_EQ(g.state(), gc.state()) << "the same draws as the whole build";
    EXPECT_EQ(default_generator().state(), default_after) << "the same draws from the default generator";
    EXPECT_EQ(built->num_parameters(), whole->num_parameters()) << "placeholders keep the shapes";
    const nn::StateDict want = cut->state_dict();
    int64_t kept = 0, released = 0;
    for (const auto& [name, t] : built->state_dict()) {
      const Tensor& w = want.at(name);
      ASSERT_EQ(t.sizes(), w.sizes()) << name;
      ASSERT_EQ(t.dtype(), w.dtype()) << name;
      const bool placeholder = is_broadcast_scalar(t) && t.numel() > 1;
      ASSERT_EQ(placeholder, is_broadcast_scalar(w) && w.numel() > 1) << name << ": released by one build only";
      if (placeholder) {
        EXPECT_TRUE(std::isnan(t.to_vector<double>().front())) << name;
        ++released;
      } else {
        EXPECT_TRUE(all_close(t, w, 0, 0)) << name;
        ++kept;
      }
    }
    EXPECT_GT(kept, 0);
    EXPECT_GT(released, 0);
    for (const auto& [first, second] : c.keep.ranges()) {
      const models::Activations in = whole->layers().run(batch, {}, 0, first);
      const models::Activations a = whole->layers().run(batch, in, first, second);
      const models::Activations b = built->layers().run(batch, in, first, second);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].defined(), b[i].defined()) << "output " << i;
        if (a[i].defined()) {
          EXPECT_TRUE(all_close(a[i], b[i], 0, 0)) << "output " << i << " of layers [" << first << ", " << second << ")";
        }
      }
    }
  }
  Generator g(11);
  EXPECT_THROW(build(&g, models::LayerRange{2, 2}), Error);
  EXPECT_THROW(build(&g, models::LayerRange{0, L + 1}), Error);
  EXPECT_THROW(build(&g, models::LayerSelection({{2, 3}, {1, 2}})), Error) << "ranges out of order";
}

// counts (a *_layer_parameters function's) against the built model's list, layer by layer; they
// add up to the model's parameters with the table tied between the first and last layer counted
// once; counting leaves the default generator where it was.
inline void expect_layer_parameters(const std::function<std::vector<int64_t>()>& count, const models::LayeredModel& m,
                                    int64_t tied_numel) {
  manual_seed(4);
  const PhiloxState default_before = default_generator().state();
  const std::vector<int64_t> counts = count();
  EXPECT_EQ(default_generator().state(), default_before) << "counting draws nothing from the default generator";
  ASSERT_EQ(counts.size(), m.layers().size());
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    EXPECT_EQ(counts[i], m.layers().num_parameters(i, i + 1)) << m.layers().name(i);
    total += counts[i];
  }
  EXPECT_EQ(total - tied_numel, m.num_parameters());
}

}  // namespace trident::testing
