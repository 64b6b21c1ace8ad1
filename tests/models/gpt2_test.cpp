// GPT-2: parameter counts, Hugging Face names and layouts, init, gradcheck of a block,
// overfitting one batch, the layer list run in stages, micro-batch losses, errors.
#include "models_test_util.h"

#include <cmath>

#include "ops/cpu/bgemm_amx.h"

using namespace trident;
using namespace trident::models;
using namespace trident::testing;
using autograd::TensorList;

namespace {

// Parameters of GPT-2 from its tensors' shapes, listed one by one (Hugging Face's model card
// layout), independently of GPT2Config::num_parameters.
int64_t count_gpt2(int64_t L, int64_t C, int64_t P, int64_t V) {
  const std::vector<std::vector<int64_t>> block = {{C}, {C},  {C, 3 * C}, {3 * C},  {C, C},    {C},
                                                   {C}, {C},  {C, 4 * C}, {4 * C},  {4 * C, C}, {C}};
  int64_t per_block = 0;
  for (const auto& s : block) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    per_block += n;
  }
  return V * C /* wte */ + P * C /* wpe */ + L * per_block + 2 * C /* ln_f */;
}

Tensor tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Generator g(seed);
  return randint(0, V, {B, T}, DType::I64, &g);
}

}  // namespace

TEST(GPT2Config, The124MPresetHasExactly124439808Parameters) {
  const GPT2Config c = GPT2Config::preset("124M");
  ASSERT_EQ(c.vocab_size, 50257);
  ASSERT_EQ(c.padded_vocab_size, 0);
  ASSERT_EQ(c.n_positions, 1024);
  // Counted from the sizes, without allocating (building the model takes seconds on a loaded
  // CPU; PresetParameterCountsMatchTheArchitecture checks built models against the same formula).
  EXPECT_EQ(c.num_parameters(), 124439808);
  EXPECT_EQ(count_gpt2(12, 768, 1024, 50257), 124439808);
}

TEST(GPT2Config, PresetParameterCountsMatchTheArchitecture) {
  struct Want {
    const char* name;
    int64_t L, H, C, P, V;
  };
  // Sizes from the papers (Radford et al. 2019 Table 2; Shoeybi et al. 2019 Table 2, whose
  // vocabulary is padded to 51200).
  const Want presets[] = {{"124M", 12, 12, 768, 1024, 50257}, {"355M", 24, 16, 1024, 1024, 50257},
                          {"774M", 36, 20, 1280, 1024, 50257}, {"1.5B", 48, 25, 1600, 1024, 50257},
                          {"8.3B", 72, 32, 3072, 1024, 51200}, {"tiny", 4, 4, 256, 256, 50304}};
  for (const Want& w : presets) {
    const GPT2Config c = GPT2Config::preset(w.name);
    EXPECT_EQ(c.n_layer, w.L) << w.name;
    EXPECT_EQ(c.n_head, w.H) << w.name;
    EXPECT_EQ(c.n_embd, w.C) << w.name;
    EXPECT_EQ(c.vocab_rows(), w.V) << w.name;
    EXPECT_EQ(c.num_parameters(), count_gpt2(w.L, w.C, w.P, w.V)) << w.name;
  }
  // Hugging Face's published sizes of gpt2-medium, -large and -xl, and Megatron's "8.3B".
  EXPECT_EQ(GPT2Config::preset("355M").num_parameters(), 354823168);
  EXPECT_EQ(GPT2Config::preset("774M").num_parameters(), 774030080);
  EXPECT_EQ(GPT2Config::preset("1.5B").num_parameters(), 1557611200);
  EXPECT_NEAR(static_cast<double>(GPT2Config::preset("8.3B").num_parameters()), 8.3e9, 0.05e9);
  // A built model agrees with the formula (tiny, and a small one with padding).
  Generator g(2);
  EXPECT_EQ(GPT2LMHeadModel(GPT2Config::preset("tiny"), &g).num_parameters(), count_gpt2(4, 256, 256, 50304));
  EXPECT_EQ(GPT2LMHeadModel(small_gpt2_config(), &g).num_parameters(), count_gpt2(2, 16, 16, 64));
}

TEST(GPT2Config, JsonRoundTripOverridesAndErrors) {
  GPT2Config c = GPT2Config::preset("tiny", R"({"n_layer": 3, "embd_pdrop": 0.0, "dtype": "f64"})");
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_embd, 256);
  EXPECT_EQ(c.embd_pdrop, 0.0);
  EXPECT_EQ(c.dtype, DType::F64);
  const GPT2Config back = GPT2Config::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(back.n_layer, 3);
  EXPECT_EQ(back.padded_vocab_size, 50304);
  // "preset" then the other keys.
  EXPECT_EQ(GPT2Config::from_json(R"({"preset": "355M", "n_positions": 512})").n_embd, 1024);
  EXPECT_EQ(GPT2Config::from_json(R"({"preset": "355M", "n_positions": 512})").n_positions, 512);
  // Hugging Face's config.json: other keys ignored, n_ctx read when n_positions is absent.
  const GPT2Config hf = GPT2Config::from_hf_config(
      R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "n_ctx": 1024, "n_embd": 768,
          "n_head": 12, "n_layer": 12, "vocab_size": 50257, "layer_norm_epsilon": 1e-05, "torch_dtype": "float32"})");
  EXPECT_EQ(hf.num_parameters(), 124439808);
  expect_error([] { GPT2Config::preset("125M"); }, {"unknown GPT-2 preset '125M'", "124M", "tiny"});
  expect_error([&] { c.apply_json(R"({"n_layers": 4})"); }, {"unknown key", "n_layers"});
  EXPECT_EQ(c.n_layer, 3) << "a failed apply changes nothing";
  expect_error([&] { c.apply_json(R"({"n_head": 7})"); }, {"n_embd 256", "n_head 7"});
  expect_error([&] { c.apply_json(R"({"n_layer": 2.5})"); }, {"\"n_layer\" must be an integer", "2.5"});
  expect_error([&] { c.apply_json(R"({"padded_vocab_size": 100})"); }, {"padded_vocab_size 100", "50257"});
  expect_error([&] { c.apply_json(R"({"model_type": "bert"})"); }, {"model_type", "bert"});
  expect_error([&] { c.apply_json("{\"n_layer\": "); }, {"malformed JSON"});
  expect_error([&] { c.apply_json(R"({"attn_pdrop": 1.0})"); }, {"attn_pdrop must be in [0, 1)"});
}

TEST(GPT2, StateDictHasHuggingFaceNamesAndConv1DLayouts) {
  const GPT2Config c = small_gpt2_config();
  Generator g(3);
  GPT2LMHeadModel m(c, &g);
  const nn::StateDict sd = m.state_dict();
  const int64_t C = 16;
  const std::map<std::string, Shape> want = {
      {"transformer.wte.weight", {64, C}},          {"transformer.wpe.weight", {16, C}},
      {"transformer.h.0.ln_1.weight", {C}},         {"transformer.h.0.ln_1.bias", {C}},
      {"transformer.h.0.attn.c_attn.weight", {C, 3 * C}}, {"transformer.h.0.attn.c_attn.bias", {3 * C}},
      {"transformer.h.0.attn.c_proj.weight", {C, C}},     {"transformer.h.0.attn.c_proj.bias", {C}},
      {"transformer.h.1.ln_2.weight", {C}},         {"transformer.h.1.mlp.c_fc.weight", {C, 4 * C}},
      {"transformer.h.1.mlp.c_fc.bias", {4 * C}},   {"transformer.h.1.mlp.c_proj.weight", {4 * C, C}},
      {"transformer.ln_f.weight", {C}},             {"transformer.ln_f.bias", {C}}};
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(sd.count(name)) << name;
    EXPECT_EQ(sd.at(name).sizes(), shape) << name;
  }
  EXPECT_EQ(sd.size(), 2 + 2 * 12 + 2u) << "wte, wpe, 12 per block, ln_f; no lm_head.weight (tied)";
  EXPECT_FALSE(sd.count("lm_head.weight"));
  // The layer list: embedding, blocks, head; the head holds wte too (tied).
  const LayerList& layers = m.layers();
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers.name(0), "embedding");
  EXPECT_EQ(layers.name(2), "h.1");
  EXPECT_EQ(layers.name(3), "head");
  ASSERT_EQ(layers.tied().size(), 1u);
  EXPECT_EQ(layers.tied()[0].name, "transformer.wte.weight");
  EXPECT_EQ(layers.tied()[0].layers, (std::vector<size_t>{0, 3}));
  std::vector<std::string> head_names;
  for (const auto& [name, t] : layers.named_parameters(3, 4)) head_names.push_back(name);
  EXPECT_EQ(head_names, (std::vector<std::string>{"transformer.ln_f.weight", "transformer.ln_f.bias", "transformer.wte.weight"}));
}

TEST(GPT2, InitFollowsGPT2) {
  GPT2Config c = GPT2Config::preset("tiny");
  c.n_layer = 8;
  c.vocab_size = 1000;
  c.padded_vocab_size = 1024;
  Generator g(4);
  GPT2LMHeadModel m(c, &g);
  const nn::StateDict sd = m.state_dict();
  auto stats = [&](const std::string& name, int64_t rows = -1) {
    Tensor t = sd.at(name);
    if (rows >= 0) t = narrow(t, 0, 0, rows);
    const std::vector<double> v = t.to_vector<double>();
    double s = 0, s2 = 0;
    for (double x : v) s += x, s2 += x * x;
    const double n = static_cast<double>(v.size());
    return std::pair<double, double>{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  // 0.02 for weights and embeddings, 0.02 / sqrt(2 * 8) = 0.005 for the residual projections;
  // the sampling error of a std over >= 65k values is under 1%.
  EXPECT_NEAR(stats("transformer.h.3.attn.c_attn.weight").second, 0.02, 0.0004);
  EXPECT_NEAR(stats("transformer.h.3.mlp.c_fc.weight").second, 0.02, 0.0004);
  EXPECT_NEAR(stats("transformer.h.3.attn.c_proj.weight").second, 0.005, 0.0001);
  EXPECT_NEAR(stats("transformer.h.7.mlp.c_proj.weight").second, 0.005, 0.0001);
  EXPECT_NEAR(stats("transformer.wte.weight", 1000).second, 0.02, 0.0004);
  EXPECT_NEAR(stats("transformer.wpe.weight").second, 0.02, 0.0004);
  EXPECT_EQ(stats("transformer.h.0.attn.c_attn.bias"), (std::pair<double, double>{0, 0}));
  EXPECT_EQ(stats("transformer.h.0.ln_1.weight"), (std::pair<double, double>{1, 0}));
  EXPECT_EQ(stats("transformer.ln_f.bias"), (std::pair<double, double>{0, 0}));
  const std::vector<float> pad = narrow(sd.at("transformer.wte.weight"), 0, 1000, 24).to_vector<float>();
  for (float v : pad) ASSERT_EQ(v, 0.f) << "padded rows start at zero";
  // Same seed, same weights.
  Generator g2(4);
  GPT2LMHeadModel m2(c, &g2);
  EXPECT_TRUE(all_close(m2.state_dict().at("transformer.h.5.mlp.c_proj.weight"), sd.at("transformer.h.5.mlp.c_proj.weight"), 0, 0));
}

namespace {
// A block in f64, checked with respect to its input and every parameter: first derivatives, or
// second ones (NOTE [Higher-order gradients]: layer norms, fused attention, linear + GELU,
// residuals).
void check_block(bool second_order) {
  GPT2Config c = small_gpt2_config();
  c.n_embd = 4;
  c.dtype = DType::F64;
  Generator g(5);
  GPT2Block block(c, &g);
  Tensor x = rand_leaf({1, 3, 4}, 6);
  TensorList inputs = {x};
  for (const Tensor& p : block.parameters()) inputs.push_back(p);
  auto fn = [&](const TensorList& in) { return block.forward(in[0]); };
  EXPECT_TRUE(grad_ok(second_order ? gradgradcheck(fn, inputs) : gradcheck(fn, inputs)));
}
}  // namespace

TEST(GPT2, BlockPassesGradcheckInF64) { check_block(false); }
TEST(GPT2, BlockPassesGradgradcheckInF64) { check_block(true); }

TEST(GPT2, WholeModelGradientsMatchFiniteDifferencesInF64) {
  // The head (tied wte, padded rows sliced off) and the loss, through the layer list.
  GPT2Config c = small_gpt2_config();
  c.n_layer = 1;
  c.n_embd = 8;
  c.vocab_size = 13;
  c.padded_vocab_size = 16;
  c.dtype = DType::F64;
  Generator g(7);
  GPT2LMHeadModel m(c, &g);
  const Tensor ids = tokens(2, 4, 13, 8), targets = tokens(2, 4, 13, 9);
  const Tensor wte = m.transformer->wte_weight(), ln = m.transformer->ln_f->weight;
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList&) { return m.forward(ids, targets).loss; }, {wte, ln})));
  m.zero_grad();
  m.forward(ids, targets).loss.backward();
  const std::vector<double> gw = narrow(wte.grad(), 0, 13, 3).to_vector<double>();
  for (double v : gw) EXPECT_EQ(v, 0.0) << "padded rows are never predicted nor looked up";
}

TEST(GPT2, OverfitsOneBatch) {
  GPT2Config c = small_gpt2_config(0.1);
  Generator g(10);
  manual_seed(11);
  GPT2LMHeadModel m(c, &g);
  const Tensor x = tokens(4, 16, 61, 12), y = tokens(4, 16, 61, 13);
  nn::optim::AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.0;
  nn::optim::AdamW opt({{m.parameters(), o}});
  const double first = m.forward(x, y).loss.item<double>();
  EXPECT_NEAR(first, std::log(61.0), 0.3) << "small init: close to uniform over the vocabulary";
  double last = first;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss = m.forward(x, y).loss;
    loss.backward();
    opt.step();
    last = loss.item<double>();
  }
  m.eval();
  const double eval_loss = m.forward(x, y).loss.item<double>();
  EXPECT_LT(eval_loss, 0.1 * first) << "60 AdamW steps on one batch: loss " << first << " -> " << last << " (eval " << eval_loss << ")";
}

TEST(GPT2, LayerListInStagesEqualsTheWholeModelWithDropout) {
  const GPT2Config c = small_gpt2_config(0.2);
  Generator init(14);
  GPT2LMHeadModel m(c, &init);
  const Tensor x = tokens(2, 10, 61, 15), y = tokens(2, 10, 61, 16);
  const Batch batch{{"input_ids", x}, {"targets", y}};
  auto run = [&](const std::function<Tensor()>& loss_fn) {
    m.zero_grad();
    manual_seed(99);  // the dropout stream
    Tensor loss = loss_fn();
    loss.backward();
    std::vector<Tensor> out = {loss.detach()};
    for (const Tensor& p : m.parameters()) out.push_back(p.grad());
    return out;
  };
  const auto whole = run([&] { return m.forward(x, y).loss; });
  const LayerList& L = m.layers();
  // Stages [0, 2), [2, 3), [3, 4).
  const auto staged = run([&] {
    Activations a = L.run(batch, {}, 0, 2);
    a = L.run(batch, a, 2, 3);
    return m.loss(L.run(batch, a, 3), batch);
  });
  // Each stage re-materialized (GPipe): only stage inputs kept, the dropout masks replayed.
  const auto remat = run([&] {
    Activations a;
    for (auto [b, e] : {std::pair<size_t, size_t>{0, 2}, {2, 3}, {3, 4}})
      a = autograd::checkpoint([&, b = b, e = e](const TensorList& in) { return L.run(batch, in, b, e); }, a);
    return m.loss(a, batch);
  });
  ASSERT_EQ(whole.size(), staged.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_TRUE(all_close(staged[i], whole[i], 0, 0)) << "quantity " << i;
    EXPECT_TRUE(all_close(remat[i], whole[i], 1e-6, 1e-7)) << "quantity " << i;
  }
  EXPECT_THROW(L.run(batch, {}, 2, 1), Error);
  expect_error([&] { L.run(batch, {}, 1, 2); }, {"layer 1 (h.0)", "expected one activation"});
}

TEST(GPT2, StageOnlyBuildIsTheWholeBuildCut) {
  GPT2Config c = small_gpt2_config();
  c.n_layer = 3;
  const Batch batch{{"input_ids", tokens(2, 10, 61, 15)}, {"targets", tokens(2, 10, 61, 16)}};
  expect_stage_only_builds_are_the_cut(
      [&](Generator* g, const LayerSelection& keep) { return std::make_unique<GPT2LMHeadModel>(c, g, keep); }, batch);
}

// gpt2_layer_parameters counts what the built model's list counts, layer by layer, and adds up to
// the whole model's parameters once the tied table is counted once.
TEST(GPT2, LayerParameterCountsWithoutBuildingTheModel) {
  for (const int64_t L : {1, 3}) {
    GPT2Config c = small_gpt2_config();
    c.n_layer = L;
    Generator g(3);
    const GPT2LMHeadModel m(c, &g);
    expect_layer_parameters([&] { return gpt2_layer_parameters(c); }, m, m.transformer->wte_weight().numel());
  }
}

TEST(GPT2, MicroBatchLossesAddUpToTheBatchLoss) {
  const GPT2Config c = small_gpt2_config();
  Generator init(17);
  GPT2LMHeadModel m(c, &init);
  Tensor y = tokens(4, 8, 61, 19);
  {
    // Some targets ignored, unevenly across the micro-batches.
    std::vector<int64_t> v = y.to_vector<int64_t>();
    for (size_t i : {0u, 1u, 2u, 3u, 4u, 9u, 17u}) v[i] = -100;
    y = from_vector<int64_t>(v, {4, 8});
  }
  const Batch batch{{"input_ids", tokens(4, 8, 61, 18)}, {"targets", y}};
  EXPECT_EQ(m.loss_counts(batch), (std::vector<double>{25.0}));
  const Tensor whole = m.loss(m.layers().run(batch), batch);
  const std::vector<double> counts = m.loss_counts(batch);
  double sum_micro = 0;
  for (const Batch& mb : batch.split(4)) sum_micro += m.loss(m.layers().run(mb), mb, counts).item<double>();
  EXPECT_NEAR(sum_micro, whole.item<double>(), 1e-5);
  expect_error([&] { batch.split(3); }, {"3 micro-batches", "batch of 4"});
}

// NOTE [Loss without logits]: the loss on the head's hidden states through linear_cross_entropy
// equals the loss on the logits, for f64 training (composed), evaluation (tiled: f64 sums in
// another order) and bf16 training under autocast (tiled on the bf16 GEMM kernels: f32 logits
// never rounded to bf16, so within bf16's rounding of the composed loss), over a padded
// vocabulary of two class tiles; with targets the layer list ends in hidden states.
TEST(GPT2, LossWithoutLogitsEqualsTheLossOnLogits) {
  GPT2Config c = small_gpt2_config();
  c.vocab_size = 700;
  c.padded_vocab_size = 704;
  c.dtype = DType::F64;
  GPT2Config with_logits = c;
  with_logits.loss_without_logits = false;
  Generator g1(40), g2(40);
  GPT2LMHeadModel a(c, &g1), b(with_logits, &g2);
  std::vector<int64_t> t = tokens(2, 12, 700, 42).to_vector<int64_t>();
  t[5] = -100;
  const Tensor x = tokens(2, 12, 700, 41), y = from_vector<int64_t>(t, {2, 12});
  Batch batch;
  batch.set("input_ids", x).set("targets", y);
  EXPECT_EQ(a.layers().run(batch)[0].sizes(), (Shape{2, 12, 16}));
  EXPECT_EQ(b.layers().run(batch)[0].sizes(), (Shape{2, 12, 700}));
  {
    const LMOutput oa = a.forward(x, y), ob = b.forward(x, y);
    EXPECT_FALSE(oa.logits.defined());
    EXPECT_TRUE(all_close(oa.loss, ob.loss, 1e-13, 0));
    const TensorList ga = autograd::grad({oa.loss}, a.parameters()), gb = autograd::grad({ob.loss}, b.parameters());
    for (size_t i = 0; i < ga.size(); ++i) EXPECT_LE(relative_error(ga[i], gb[i]), 1e-12) << "parameter " << i;
  }
  {
    NoGradGuard no_grad;
    EXPECT_TRUE(all_close(a.forward(x, y).loss, b.forward(x, y).loss, 1e-13, 0));
  }
  if (cpu::bf16_gemm_kernel() == cpu::Bf16Gemm::None) return;
  // bf16: both against the f64 model on the same (f32-rounded) weights. The logits-free loss is
  // at least as accurate as the composed one (its logits are not rounded): its gradients within
  // the composed ones' error of f64 (plus bf16's 2^-8), its loss within 2^-8.
  a.to(DType::F32);
  b.to(DType::F32);
  Generator g3(40);
  GPT2LMHeadModel r(c, &g3);  // f64, the reference
  const int compared = expect_bf16_loss_without_logits_as_accurate<GPT2LMHeadModel>(
      a, b, r, [&](GPT2LMHeadModel& m) { return m.forward(x, y).loss; }, 1.0 / 256);
  EXPECT_EQ(compared, static_cast<int>(a.parameters().size()));
}

TEST(GPT2, PaddedVocabularyGivesTheUnpaddedModel) {
  // The same weights with and without padding: same logits and loss.
  GPT2Config padded = small_gpt2_config(), plain = small_gpt2_config();
  plain.padded_vocab_size = 0;
  Generator g1(20), g2(21);
  GPT2LMHeadModel a(padded, &g1), b(plain, &g2);
  nn::StateDict sd = a.state_dict();
  sd["transformer.wte.weight"] = narrow(sd["transformer.wte.weight"], 0, 0, 61);
  b.load_state_dict(sd);
  const Tensor x = tokens(2, 6, 61, 22), y = tokens(2, 6, 61, 23);
  const LMOutput oa = a.forward(x, y), ob = b.forward(x, y);
  EXPECT_FALSE(oa.logits.defined());  // NOTE [Loss without logits]
  const Tensor la = a.forward(x).logits, lb = b.forward(x).logits;
  EXPECT_EQ(la.sizes(), (Shape{2, 6, 61}));
  // A GEMM over 64 or 61 output columns may block its sums differently: last-bit differences.
  EXPECT_TRUE(all_close(la, lb, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(oa.loss, ob.loss, 1e-6, 1e-7));
}

TEST(GPT2, BadInputGivesClearErrors) {
  const GPT2Config c = small_gpt2_config();
  Generator g(24);
  GPT2LMHeadModel m(c, &g);
  expect_error([&] { m.forward(tokens(1, 17, 61, 1)); }, {"17 positions exceed the context n_positions = 16"});
  expect_error([&] { m.forward(zeros({2, 3})); }, {"input_ids must be [B, T] of i64 or i32", "f32"});
  expect_error([&] { m.forward(tokens(2, 3, 61, 1), tokens(2, 4, 61, 1)); }, {"targets of shape [2, 4]", "hidden states of shape [2, 3, 16]"});
  GPT2Config with_logits = c;
  with_logits.loss_without_logits = false;
  Generator g2(24);
  GPT2LMHeadModel ml(with_logits, &g2);
  expect_error([&] { ml.forward(tokens(2, 3, 61, 1), tokens(2, 4, 61, 1)); }, {"targets of shape [2, 4]", "logits of shape [2, 3, 61]"});
  expect_error([&] { m.forward(tokens(2, 3, 61, 1), tokens(2, 3, 99, 1)); }, {"out of range for 61 classes"});
  GPT2Config bad = c;
  bad.n_head = 3;
  expect_error([&] { GPT2LMHeadModel x(bad); }, {"n_embd 16", "n_head 3"});
  expect_error([&] { m.layers().run(Batch{{"targets", tokens(1, 2, 61, 1)}}); }, {"layer 0 (embedding)", "no tensor 'input_ids'"});
}

TEST(GPT2, MemoryEstimateMatchesTheMeasuredPeak) {
  GPT2Config c = small_gpt2_config();
  c.n_layer = 3;
  c.n_embd = 64;
  c.n_head = 4;
  c.n_positions = 64;
  c.vocab_size = 500;
  c.padded_vocab_size = 512;
  const int64_t B = 4, T = 64;
  Generator g(25);
  GPT2LMHeadModel m(c, &g);
  nn::optim::AdamW opt({{m.parameters(), nn::optim::AdamWOptions{}}});
  const Tensor x = tokens(B, T, 500, 26), y = tokens(B, T, 500, 27);
  auto step = [&] {
    opt.zero_grad();
    m.forward(x, y).loss.backward();
    opt.step();
  };
  step();  // optimizer state now exists
  opt.zero_grad();
  empty_cache(kCPU);
  const int64_t before = memory_stats(kCPU).current_bytes;  // parameters + optimizer state
  reset_peak_memory_stats(kCPU);
  step();
  const int64_t measured = memory_stats(kCPU).peak_bytes - before;  // activations + gradients
  const MemoryEstimate e = c.estimate_memory(B, T);
  EXPECT_EQ(e.parameters, m.num_parameters() * 4);
  EXPECT_EQ(e.optimizer, 2 * e.parameters);
  const double est = static_cast<double>(e.activations + e.gradients);
  std::printf("estimate %s; measured %s\n", e.str().c_str(), format_bytes(measured).c_str());
  EXPECT_GT(est, 0.8 * static_cast<double>(measured)) << e.str() << "; measured " << format_bytes(measured);
  EXPECT_LT(est, 1.25 * static_cast<double>(measured)) << e.str() << "; measured " << format_bytes(measured);
  // On a GPU the padded vocabulary adds the padded logits (512 columns) beside the copy of the
  // real ones, and as much again for their gradient (LayerFactory::tied_logits).
  MemoryOptions on_gpu;
  on_gpu.cuda = true;
  EXPECT_EQ(c.estimate_memory(B, T, on_gpu).activations - e.activations, B * T * 2 * 512 * 4);
  // Tiled (bf16 on the CPU, NOTE [Loss without logits]): no logits and no logits' gradient.
  MemoryOptions tiled;
  tiled.logits_tiled = true;
  EXPECT_EQ(e.activations - c.estimate_memory(B, T, tiled).activations, B * T * 2 * 500 * 4);
}
