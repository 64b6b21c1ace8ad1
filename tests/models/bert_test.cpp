// BERT: parameter counts against the published ones, Hugging Face names, gradcheck of a layer,
// overfitting one batch with both heads, the attention mask, the layer list in stages.
#include "models_test_util.h"

#include "ops/cpu/bgemm_amx.h"

#include <cmath>

using namespace trident;
using namespace trident::models;
using namespace trident::testing;
using autograd::TensorList;

namespace {

Tensor ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Generator g(seed);
  return randint(0, V, {B, T}, DType::I64, &g);
}

// MLM labels: the token at every third position (from `offset`), -100 elsewhere.
Tensor mlm_labels(const Tensor& input, int64_t offset) {
  std::vector<int64_t> v = input.to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); ++i)
    if ((static_cast<int64_t>(i) + offset) % 3 != 0) v[i] = -100;
  return from_vector<int64_t>(v, input.sizes());
}

}  // namespace

TEST(BertConfig, ParameterCountsAreThePublishedOnes) {
  // Hugging Face's bert-base-uncased: BertModel 109,482,240 parameters; BertForPreTraining
  // 110,106,428 (the MLM transform, the output bias and the NSP classifier on top).
  // bert-large-uncased: 335,141,888 and 336,226,108.
  const BertConfig base = BertConfig::preset("base"), large = BertConfig::preset("large");
  EXPECT_EQ(base.num_parameters_base(), 109482240);
  EXPECT_EQ(base.num_parameters(), 110106428);
  EXPECT_EQ(large.num_parameters_base(), 335141888);
  EXPECT_EQ(large.num_parameters(), 336226108);
  EXPECT_EQ(base.hidden_size, 768);
  EXPECT_EQ(large.num_hidden_layers, 24);
  // Built models count the same (the decoder tied to the word embeddings, counted once).
  Generator g(1);
  const BertConfig tiny = BertConfig::preset("tiny");
  BertForPreTraining m(tiny, &g);
  EXPECT_EQ(m.num_parameters(), tiny.num_parameters());
  EXPECT_EQ(m.bert->num_parameters(), tiny.num_parameters_base());
  EXPECT_EQ(m.layers().num_parameters(), tiny.num_parameters());
  expect_error([] { BertConfig::preset("huge"); }, {"unknown BERT preset 'huge'", "base"});
}

TEST(Bert, StateDictHasHuggingFaceNames) {
  Generator g(2);
  BertForPreTraining m(small_bert_config(), &g);
  const nn::StateDict sd = m.state_dict();
  const int64_t H = 16;
  const std::map<std::string, Shape> want = {
      {"bert.embeddings.word_embeddings.weight", {40, H}},
      {"bert.embeddings.position_embeddings.weight", {16, H}},
      {"bert.embeddings.token_type_embeddings.weight", {2, H}},
      {"bert.embeddings.LayerNorm.weight", {H}},
      {"bert.encoder.layer.0.attention.self.query.weight", {H, H}},
      {"bert.encoder.layer.0.attention.self.value.bias", {H}},
      {"bert.encoder.layer.1.attention.output.dense.weight", {H, H}},
      {"bert.encoder.layer.1.attention.output.LayerNorm.bias", {H}},
      {"bert.encoder.layer.1.intermediate.dense.weight", {32, H}},
      {"bert.encoder.layer.1.output.dense.weight", {H, 32}},
      {"bert.encoder.layer.1.output.LayerNorm.weight", {H}},
      {"bert.pooler.dense.weight", {H, H}},
      {"cls.predictions.bias", {40}},
      {"cls.predictions.transform.dense.weight", {H, H}},
      {"cls.predictions.transform.LayerNorm.weight", {H}},
      {"cls.seq_relationship.weight", {2, H}},
      {"cls.seq_relationship.bias", {2}}};
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(sd.count(name)) << name;
    EXPECT_EQ(sd.at(name).sizes(), shape) << name;
  }
  // 5 embedding tensors, 16 per layer, 2 pooler, 1 bias + 4 transform, 2 NSP; no decoder copy.
  EXPECT_EQ(sd.size(), 5 + 2 * 16 + 2 + 5 + 2u);
  EXPECT_FALSE(sd.count("cls.predictions.decoder.weight"));
  const LayerList& L = m.layers();
  ASSERT_EQ(L.size(), 4u);
  EXPECT_EQ(L.name(0), "embeddings");
  EXPECT_EQ(L.name(1), "layer.0");
  EXPECT_EQ(L.name(3), "heads");
  ASSERT_EQ(L.tied().size(), 1u);
  EXPECT_EQ(L.tied()[0].name, "bert.embeddings.word_embeddings.weight");
}

namespace {
// A layer in f64, checked with respect to its input and every parameter: first derivatives, or
// second ones (NOTE [Higher-order gradients]).
void check_layer(bool second_order) {
  BertConfig c = small_bert_config();
  c.hidden_size = 4;
  c.intermediate_size = 8;
  c.dtype = DType::F64;
  Generator g(3);
  BertLayer layer(c, &g);
  Tensor x = rand_leaf({2, 3, 4}, 4);
  // The second sequence's last position is padding.
  const Tensor mask = attention_mask_for_keys(from_vector<int64_t>({1, 1, 1, 1, 1, 0}, {2, 3}));
  TensorList inputs = {x};
  for (const Tensor& p : layer.parameters()) inputs.push_back(p);
  auto fn = [&](const TensorList& in) { return layer.forward(in[0], mask); };
  EXPECT_TRUE(grad_ok(second_order ? gradgradcheck(fn, inputs) : gradcheck(fn, inputs)));
}
}  // namespace

// NOTE [Fused projections]: the serial layers' query, key and value as one product give the three
// modules' outputs and, through the stacking, each weight and bias its own gradient, in f64 to
// rounding; the layer gradchecks above run through the fused path.
TEST(Bert, FusedProjectionsEqualTheThreeModules) {
  BertConfig c = small_bert_config();
  c.dtype = DType::F64;
  Generator g(31);
  BertSelfAttention attn(c, &g);
  const Tensor x = rand_leaf({2, 5, 16}, 32);
  const std::vector<Tensor> fused = attn.fused_projections(x);
  ASSERT_EQ(fused.size(), 3u);
  const std::vector<Tensor> separate{attn.query->forward(x), attn.key->forward(x), attn.value->forward(x)};
  Generator r(33);
  Tensor lf = zeros({}, kF64), ls = zeros({}, kF64);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(all_close(fused[i], separate[i], 1e-14, 1e-14)) << "projection " << i;
    const Tensor w = randn(separate[i].sizes(), kF64, &r);
    lf = add(lf, sum(mul(fused[i], w)));
    ls = add(ls, sum(mul(separate[i], w)));
  }
  TensorList inputs{x};
  for (const Tensor& p : attn.parameters()) inputs.push_back(p);
  const TensorList gf = autograd::grad({lf}, inputs), gs = autograd::grad({ls}, inputs);
  ASSERT_EQ(gf.size(), 7u);  // x, then three weights and three biases
  for (size_t i = 0; i < gf.size(); ++i) {
    EXPECT_EQ(gf[i].sizes(), gs[i].sizes());
    EXPECT_TRUE(all_close(gf[i], gs[i], 1e-13, 1e-14)) << "gradient " << i;
  }
}

TEST(Bert, LayerPassesGradcheckInF64) { check_layer(false); }
TEST(Bert, LayerPassesGradgradcheckInF64) { check_layer(true); }

TEST(Bert, OverfitsOneBatchWithBothHeads) {
  const BertConfig c = small_bert_config(0.1);
  Generator g(5);
  manual_seed(6);
  BertForPreTraining m(c, &g);
  const Tensor x = ids(4, 12, 37, 7);
  const Batch batch{{"input_ids", x},
                    {"token_type_ids", from_vector<int64_t>(std::vector<int64_t>(48, 0), {4, 12})},
                    {"attention_mask", from_vector<int64_t>(std::vector<int64_t>(48, 1), {4, 12})},
                    {"mlm_labels", mlm_labels(ids(4, 12, 37, 8), 0)},
                    {"next_sentence_label", from_vector<int64_t>({0, 1, 1, 0}, {4})}};
  nn::optim::AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.0;
  nn::optim::AdamW opt({{m.parameters(), o}});
  const BertPreTrainingOutput first = m.forward(batch);
  EXPECT_FALSE(first.mlm_logits.defined()) << "NOTE [Loss without logits]";
  EXPECT_EQ(m.layers().run(batch)[0].sizes(), (Shape{16, 16})) << "the MLM head runs on the 16 masked positions only";
  EXPECT_EQ(first.nsp_logits.sizes(), (Shape{4, 2}));
  EXPECT_NEAR(first.mlm_loss.item<double>(), std::log(37.0), 0.5);
  EXPECT_NEAR(first.nsp_loss.item<double>(), std::log(2.0), 0.3);
  for (int step = 0; step < 80; ++step) {
    opt.zero_grad();
    m.forward(batch).loss.backward();
    opt.step();
  }
  m.eval();
  const BertPreTrainingOutput last = m.forward(batch);
  EXPECT_LT(last.mlm_loss.item<double>(), 0.1 * first.mlm_loss.item<double>());
  EXPECT_LT(last.nsp_loss.item<double>(), 0.1 * first.nsp_loss.item<double>());
}

// NOTE [Loss without logits] for the masked-LM head: the loss and every gradient equal those of
// the loss on the masked positions' logits, in f64 (training composes, evaluation tiles), with a
// padded table (the padded rows of the tied table and of the output bias get zero gradient); in
// bf16 under autocast both within bf16's error of the f64 model on the same weights.
TEST(Bert, MlmLossWithoutLogitsEqualsTheLossOnLogits) {
  BertConfig c = small_bert_config();
  c.dtype = DType::F64;
  BertConfig with_logits = c;
  with_logits.loss_without_logits = false;
  Generator g1(40), g2(40);
  BertForPreTraining a(c, &g1), b(with_logits, &g2);
  const Tensor x = ids(2, 12, 37, 41);
  const Batch batch{{"input_ids", x},
                    {"mlm_labels", mlm_labels(ids(2, 12, 37, 42), 1)},
                    {"next_sentence_label", from_vector<int64_t>({1, 0}, {2})}};
  EXPECT_EQ(a.layers().run(batch)[0].sizes(), (Shape{8, 16}));
  EXPECT_EQ(b.layers().run(batch)[0].sizes(), (Shape{8, 37}));
  {
    const BertPreTrainingOutput oa = a.forward(batch), ob = b.forward(batch);
    EXPECT_FALSE(oa.mlm_logits.defined());
    EXPECT_TRUE(all_close(oa.mlm_loss, ob.mlm_loss, 1e-13, 0));
    EXPECT_TRUE(all_close(oa.loss, ob.loss, 1e-13, 0));
    const TensorList ga = autograd::grad({oa.loss}, a.parameters()), gb = autograd::grad({ob.loss}, b.parameters());
    for (size_t i = 0; i < ga.size(); ++i) EXPECT_LE(relative_error(ga[i], gb[i]), 1e-12) << "parameter " << i;
  }
  {
    NoGradGuard no_grad;
    EXPECT_TRUE(all_close(a.forward(batch).mlm_loss, b.forward(batch).mlm_loss, 1e-13, 0));
  }
  if (cpu::bf16_gemm_kernel() == cpu::Bf16Gemm::None) return;
  a.to(DType::F32);
  b.to(DType::F32);
  Generator g3(40);
  BertForPreTraining r(c, &g3);  // f64, the reference
  // The key projections' biases have zero gradient in exact arithmetic (softmax ignores a shift
  // shared by a row's scores): all but those two are compared.
  const int compared = expect_bf16_loss_without_logits_as_accurate<BertForPreTraining>(
      a, b, r, [&](BertForPreTraining& m) { return m.forward(batch).loss; }, 1.0 / 128);
  EXPECT_EQ(compared, static_cast<int>(a.parameters().size()) - 2);
}

// The memory estimate's masked positions: their logits and the logits' gradient (2 V each),
// absent when the loss runs tiled (bf16 on the CPU, NOTE [Loss without logits]) unless the
// config asks for logits.
TEST(Bert, MemoryEstimateDropsTheTiledLogits) {
  BertConfig c = small_bert_config();
  MemoryOptions tiled;
  tiled.logits_tiled = true;
  const MemoryEstimate e = c.estimate_memory(4, 12, 3), t = c.estimate_memory(4, 12, 3, tiled);
  EXPECT_EQ(e.activations - t.activations, 4 * 3 * 2 * 37 * 4);
  EXPECT_EQ(e.parameters, t.parameters);
  c.loss_without_logits = false;
  EXPECT_EQ(c.estimate_memory(4, 12, 3, tiled).activations, e.activations);
}

TEST(Bert, PaddingKeysChangeNothingAndMaskedLogitsAreTheFullOnes) {
  Generator g(9);
  BertConfig c = small_bert_config();
  c.loss_without_logits = false;  // the logits at the labelled positions
  BertForPreTraining m(c, &g);
  Tensor a = ids(2, 8, 37, 10);
  std::vector<int64_t> av = a.to_vector<int64_t>(), bv = av, maskv(16, 1);
  for (int64_t t = 5; t < 8; ++t) {  // the second sequence ends at 5: different padding tokens
    bv[static_cast<size_t>(8 + t)] = (av[static_cast<size_t>(8 + t)] + 7) % 37;
    maskv[static_cast<size_t>(8 + t)] = 0;
  }
  const Tensor mask = from_vector<int64_t>(maskv, {2, 8});
  const auto oa = m.bert->forward(a, {}, mask), ob = m.bert->forward(from_vector<int64_t>(bv, {2, 8}), {}, mask);
  EXPECT_TRUE(all_close(narrow(oa.sequence, 1, 0, 5), narrow(ob.sequence, 1, 0, 5), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(oa.pooled, ob.pooled, 1e-6, 1e-6));
  // Without labels the MLM head runs everywhere; with them, on the labelled positions: the same rows.
  const Tensor labels = mlm_labels(a, 1);
  const Tensor everywhere = m.forward(Batch{{"input_ids", a}, {"attention_mask", mask}}).mlm_logits;  // [2, 8, 37]
  const Tensor gathered = m.forward(Batch{{"input_ids", a}, {"attention_mask", mask}, {"mlm_labels", labels}}).mlm_logits;
  ASSERT_EQ(everywhere.sizes(), (Shape{2, 8, 37}));
  const Tensor pos = masked_positions(labels);
  EXPECT_EQ(pos.to_vector<int64_t>(), (std::vector<int64_t>{2, 5, 8, 11, 14}));
  EXPECT_TRUE(all_close(gathered, index_select(reshape(everywhere, {16, 37}), 0, pos), 1e-5, 1e-6));
}

TEST(Bert, LayerListInStagesEqualsTheWholeModelWithDropout) {
  Generator g(11);
  BertForPreTraining m(small_bert_config(0.2), &g);
  const Tensor x = ids(2, 8, 37, 12);
  const Batch batch{{"input_ids", x}, {"mlm_labels", mlm_labels(x, 2)}, {"next_sentence_label", from_vector<int64_t>({1, 0}, {2})}};
  auto run = [&](const std::function<Tensor()>& f) {
    m.zero_grad();
    manual_seed(13);
    Tensor loss = f();
    loss.backward();
    std::vector<Tensor> out = {loss.detach()};
    for (const Tensor& p : m.parameters()) out.push_back(p.grad());
    return out;
  };
  const auto whole = run([&] { return m.forward(batch).loss; });
  const LayerList& L = m.layers();
  const auto staged = run([&] { return m.loss(L.run(batch, L.run(batch, {}, 0, 2), 2), batch); });
  ASSERT_EQ(whole.size(), staged.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_TRUE(all_close(staged[i], whole[i], 0, 0)) << "quantity " << i;
  expect_error([&] { m.forward(Batch{{"input_ids", ids(1, 17, 37, 1)}}); }, {"17", "16"});
}

TEST(Bert, StageOnlyBuildIsTheWholeBuildCut) {
  BertConfig c = small_bert_config();
  c.num_hidden_layers = 3;
  const Tensor x = ids(2, 8, 37, 12);
  const Batch batch{{"input_ids", x}, {"mlm_labels", mlm_labels(x, 2)}, {"next_sentence_label", from_vector<int64_t>({1, 0}, {2})}};
  expect_stage_only_builds_are_the_cut(
      [&](Generator* g, const LayerSelection& keep) { return std::make_unique<BertForPreTraining>(c, g, keep); }, batch);
}

// bert_layer_parameters counts what the built model's list counts, layer by layer.
TEST(Bert, LayerParameterCountsWithoutBuildingTheModel) {
  for (const int64_t L : {1, 3}) {
    BertConfig c = small_bert_config();
    c.num_hidden_layers = L;
    Generator g(3);
    const BertForPreTraining m(c, &g);
    expect_layer_parameters([&] { return bert_layer_parameters(c); }, m,
                            m.bert->embeddings->word_embeddings_weight().numel());
  }
}
