// NOTE [Models against PyTorch]: GPT-2 and BERT against the same models written plainly in
// PyTorch (tests/models/torch_reference.py, run with Debian's python3-torch: an implementation
// that shares no code with Trident's), and AmoebaNet-D against benchmarks/amoebanet_torch_bench.py's
// network (parameters matched by position; batch norm in training mode, its running statistics
// compared too). The test gives every parameter random f64 values (so
// that LayerNorm's affine terms, biases and the padded vocabulary rows all matter), runs the
// forward pass and the backward pass from the loss, and writes the weights under Hugging
// Face's names, the inputs, the outputs and every gradient into one safetensors file; the
// script rebuilds the model from those names with torch.nn.functional, recomputes everything in
// f64 and exits non-zero when any output or gradient differs by more than 1e-10 (normwise
// relative). Skips, saying why, when /usr/bin/python3 cannot import torch.
// The other direction: the script writes checkpoint folders as the hub holds them (f32
// model.safetensors through its own safetensors writer, config.json; GPT-2 with the original
// file's prefix-less names and attention-mask buffers, BERT with TensorFlow's gamma/beta, the
// position_ids buffer and the tied decoder stored), and load_gpt2_hf / load_bert_hf must give
// the outputs PyTorch computed from them.
#include "models_test_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "models/amoebanet.h"
#include "models/bert.h"
#include "models/bert_hf.h"
#include "models/gpt2.h"
#include "models/gpt2_hf.h"
#include "nn/safetensors.h"

using namespace trident;
using namespace trident::models;

namespace {

#ifndef TRIDENT_TORCH_REFERENCE
#error "tests/CMakeLists.txt defines TRIDENT_TORCH_REFERENCE (the path of torch_reference.py)"
#endif

// Every parameter random: matrices, convolution kernels and embeddings N(0, 0.3^2), the scales of
// LayerNorm and BatchNorm (the 1-d weights) 1 + N(0, 0.2^2), biases N(0, 0.2^2); the models' own
// init (small weights, unit scales, zero biases) would leave the affine terms and biases
// untested. Buffers (running statistics) keep their values.
void randomize(nn::Module& m, uint64_t seed) {
  Generator g(seed);
  nn::StateDict sd;
  for (const auto& [name, t] : m.named_parameters()) {
    const bool scale = t.dim() == 1 && name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    const Tensor r = randn(t.sizes(), t.dtype(), &g);
    sd[name] = t.dim() >= 2 ? mul(r, 0.3) : (scale ? add(mul(r, 0.2), 1.0) : mul(r, 0.2));
  }
  m.load_state_dict(sd, /*strict=*/false);
}

Tensor scalar_row(double v) { return from_vector<double>({v}, {1}); }

// prefix + i with three digits at least ("p.007"), so that names sort in order.
std::string numbered(const std::string& prefix, int64_t i) {
  const std::string n = std::to_string(i);
  return prefix + std::string(n.size() < 3 ? 3 - n.size() : 0, '0') + n;
}

// max |a - b| / max |b|, in f64.
double normwise(const Tensor& a, const Tensor& b) {
  const Tensor d = abs(sub(a.to(DType::F64), b.to(DType::F64)));
  const double scale = max(abs(b.to(DType::F64))).item<double>();
  return max(d).item<double>() / (scale > 0 ? scale : 1.0);
}

// A scratch folder with the script's checkpoint of `model` in it; removed at the end.
struct HfFolder {
  std::filesystem::path path;
  trident::testing::RunResult written;
  explicit HfFolder(const std::string& model)
      : path(std::filesystem::temp_directory_path() / ("trident_hf_" + model + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
    written = trident::testing::run("/usr/bin/python3 " + std::string(TRIDENT_TORCH_REFERENCE) + " write-hf " + model + " " + path.string());
  }
  ~HfFolder() { std::filesystem::remove_all(path); }
  nn::StateDict reference() const { return nn::load_safetensors((path / "reference.safetensors").string()).tensors; }
};

// Writes weights, inputs ("in."), config ("cfg."), outputs ("out.") and gradients ("grad.") and
// runs the reference on them; its report goes to the test log.
// AmoebaNet's parameters go by position (the PyTorch network lists them in the same order under
// other names): "p.NNN." + Trident's name.
void compare_with_torch(const std::string& model, nn::Module& m, nn::StateDict extra) {
  int64_t i = 0;
  for (const auto& [name, t] : m.named_parameters()) {
    const std::string key = model == "amoebanet" ? numbered("p.", i++) + "." + name : name;
    extra[key] = t;
    ASSERT_TRUE(t.grad().defined()) << name << " got no gradient";
    extra["grad." + key] = t.grad();
  }
  trident::testing::expect_python_accepts(TRIDENT_TORCH_REFERENCE, model, extra, "torch_reference_" + model);
}

}  // namespace

TEST(ModelsAgainstPyTorch, GPT2LogitsLossAndEveryGradientInF64) {
  if (const std::string why = trident::testing::torch_missing(); !why.empty()) GTEST_SKIP() << why;
  GPT2Config c = trident::testing::small_gpt2_config();
  c.dtype = DType::F64;
  Generator g(1);
  GPT2LMHeadModel m(c, &g);
  randomize(m, 2);
  Generator d(3);
  const Tensor ids = randint(0, 61, {2, 16}, DType::I64, &d);
  std::vector<int64_t> t = randint(0, 61, {2, 16}, DType::I64, &d).to_vector<int64_t>();
  t[3] = t[20] = -100;  // ignored positions
  const Tensor targets = from_vector<int64_t>(t, {2, 16});
  const LMOutput out = m.forward(ids, targets);  // the loss without logits (NOTE [Loss without logits])
  out.loss.backward();
  Tensor logits;
  {
    NoGradGuard no_grad;
    logits = m.forward(ids).logits;  // no dropout: the same forward
  }
  compare_with_torch("gpt2", m,
                     {{"in.input_ids", ids},
                      {"in.targets", targets},
                      {"out.logits", logits},
                      {"out.loss", reshape(out.loss, {1})},
                      {"cfg.n_layer", scalar_row(2)},
                      {"cfg.n_head", scalar_row(2)},
                      {"cfg.n_embd", scalar_row(16)},
                      {"cfg.vocab_size", scalar_row(61)},
                      {"cfg.eps", scalar_row(c.layer_norm_epsilon)}});
}

TEST(ModelsAgainstPyTorch, BertBothHeadsLossAndEveryGradientInF64) {
  if (const std::string why = trident::testing::torch_missing(); !why.empty()) GTEST_SKIP() << why;
  BertConfig c = trident::testing::small_bert_config();
  c.dtype = DType::F64;
  Generator g(4);
  BertForPreTraining m(c, &g);
  randomize(m, 5);
  // Two pairs of 12 tokens; the second ends in 3 padding tokens (id 0, masked out of attention);
  // segments 0 then 1; labels at every third position, one of them on the padding token id 0.
  Generator d(6);
  std::vector<int64_t> ids = randint(1, 37, {2, 12}, DType::I64, &d).to_vector<int64_t>(), types(24), mask(24, 1), labels(24, -100);
  for (int64_t i = 0; i < 24; ++i) {
    types[static_cast<size_t>(i)] = i % 12 >= 6 ? 1 : 0;
    if (i >= 21) {
      ids[static_cast<size_t>(i)] = 0;
      mask[static_cast<size_t>(i)] = 0;
    }
    if (i % 3 == 1) labels[static_cast<size_t>(i)] = (ids[static_cast<size_t>(i)] + 5) % 37;
  }
  ids[4] = 0;  // a padding id inside a sequence: its embedding row gets no gradient from the lookup
  const Batch batch{{"input_ids", from_vector<int64_t>(ids, {2, 12})},
                    {"token_type_ids", from_vector<int64_t>(types, {2, 12})},
                    {"attention_mask", from_vector<int64_t>(mask, {2, 12})},
                    {"mlm_labels", from_vector<int64_t>(labels, {2, 12})},
                    {"next_sentence_label", from_vector<int64_t>({1, 0}, {2})}};
  const BertPreTrainingOutput out = m.forward(batch);  // the MLM loss without logits (NOTE [Loss without logits])
  out.loss.backward();
  Tensor mlm_logits;  // at the masked positions, from a forward without labels (no dropout: the same forward)
  {
    NoGradGuard no_grad;
    const Tensor everywhere = m.forward(Batch{{"input_ids", batch.at("input_ids")},
                                              {"token_type_ids", batch.at("token_type_ids")},
                                              {"attention_mask", batch.at("attention_mask")}})
                                  .mlm_logits;
    mlm_logits = index_select(reshape(everywhere, {-1, everywhere.size(-1)}), 0, masked_positions(batch.at("mlm_labels")));
  }
  EXPECT_FALSE(out.mlm_logits.defined());
  nn::StateDict extra{{"out.mlm_logits", mlm_logits},
                      {"out.nsp_logits", out.nsp_logits},
                      {"out.loss", reshape(out.loss, {1})},
                      {"cfg.n_layer", scalar_row(2)},
                      {"cfg.n_head", scalar_row(2)},
                      {"cfg.hidden_size", scalar_row(16)},
                      {"cfg.vocab_size", scalar_row(37)},
                      {"cfg.pad_token_id", scalar_row(static_cast<double>(c.pad_token_id))},
                      {"cfg.eps", scalar_row(c.layer_norm_eps)}};
  for (const auto& [name, t] : batch.tensors()) extra["in." + name] = t;
  compare_with_torch("bert", m, extra);
}

TEST(ModelsAgainstPyTorch, HuggingFaceFoldersWrittenByPyTorchLoadAndGiveItsOutputs) {
  if (const std::string why = trident::testing::torch_missing(); !why.empty()) GTEST_SKIP() << why;
  // f32 weights and model against PyTorch's f64 computation from the same f32 values.
  constexpr double kTol = 1e-5;
  {
    const HfFolder hf("gpt2");
    ASSERT_EQ(hf.written.status, 0) << hf.written.output;
    const nn::StateDict ref = hf.reference();
    const auto m = load_gpt2_hf(hf.path.string());
    EXPECT_EQ(m->config().n_layer, 2);
    EXPECT_EQ(m->config().vocab_size, 61);
    m->eval();
    const Tensor logits = m->forward(ref.at("in.input_ids")).logits;
    ASSERT_EQ(logits.sizes(), ref.at("out.logits").sizes());
    const double e = normwise(logits, ref.at("out.logits"));
    EXPECT_LE(e, kTol);
    std::cout << "GPT-2 from a Hugging Face folder: logits within " << e << " of PyTorch's\n";
  }
  {
    const HfFolder hf("bert");
    ASSERT_EQ(hf.written.status, 0) << hf.written.output;
    const nn::StateDict ref = hf.reference();
    const auto m = load_bert_hf(hf.path.string());
    EXPECT_EQ(m->config().num_hidden_layers, 2);
    m->eval();
    const Batch batch{{"input_ids", ref.at("in.input_ids")},
                      {"token_type_ids", ref.at("in.token_type_ids")},
                      {"attention_mask", ref.at("in.attention_mask")}};
    const BertPreTrainingOutput out = m->forward(batch);  // no labels: the MLM head everywhere
    const Tensor mlm = reshape(out.mlm_logits, {-1, out.mlm_logits.size(-1)});
    ASSERT_EQ(mlm.sizes(), ref.at("out.mlm_logits").sizes());
    const double e_mlm = normwise(mlm, ref.at("out.mlm_logits")), e_nsp = normwise(out.nsp_logits, ref.at("out.nsp_logits"));
    EXPECT_LE(e_mlm, kTol);
    EXPECT_LE(e_nsp, kTol);
    std::cout << "BERT from a Hugging Face folder: MLM logits within " << e_mlm << ", NSP logits within " << e_nsp
              << " of PyTorch's\n";
  }
}

namespace {

// AmoebaNet-`genotype` with 3 normal cells (a reduction cell before the second and the third), 8
// filters, 16 x 16 images: every kind of operation of the genotype, factorized reductions
// between cells of different sizes, batch norm in training mode.
void compare_amoebanet(const std::string& genotype) {
  AmoebaNetConfig c;
  c.genotype = genotype;
  c.num_cells = 3;
  c.filters = 8;
  c.num_classes = 10;
  c.image_size = 16;
  c.stem = AmoebaNetConfig::Stem::Small;
  c.dropout = 0.0;
  c.dtype = DType::F64;
  Generator g(7);
  AmoebaNet m(c, &g);
  randomize(m, 8);
  m.train();
  Generator d(9);
  const Tensor images = randn({4, 3, 16, 16}, DType::F64, &d), labels = from_vector<int64_t>({3, 0, 9, 3}, {4});
  const Tensor logits = m.forward(images);
  const Tensor loss = cross_entropy(logits, labels);
  loss.backward();
  nn::StateDict extra{{"in.images", images},
                      {"in.labels", labels},
                      {"out.logits", logits},
                      {"out.loss", reshape(loss, {1})},
                      {"cfg.genotype_b", scalar_row(genotype == "B" ? 1 : 0)},
                      {"cfg.cells", scalar_row(3)},
                      {"cfg.filters", scalar_row(8)},
                      {"cfg.classes", scalar_row(10)},
                      {"cfg.image", scalar_row(16)},
                      // NOTE [AmoebaNet multiply-adds]: the plan's count per image.
                      {"out.multiply_adds", from_vector<double>({static_cast<double>(amoebanet_plan(c).multiply_adds)}, {1})}};
  // The running statistics after this step (momentum, and the unbiased variance they keep).
  for (const char* kind : {"running_mean", "running_var"}) {
    int64_t i = 0;
    for (const auto& [name, b] : m.named_buffers())
      if (name.size() > std::strlen(kind) && name.compare(name.size() - std::strlen(kind), std::string::npos, kind) == 0) {
        extra[numbered(std::string("out.") + kind + ".", i++)] = b;
      }
  }
  compare_with_torch("amoebanet", m, extra);
}

}  // namespace

TEST(ModelsAgainstPyTorch, AmoebaNetLogitsLossGradientsAndBatchNormStatisticsInF64) {
  if (const std::string why = trident::testing::torch_missing(); !why.empty()) GTEST_SKIP() << why;
  compare_amoebanet("D");
}

// AmoebaNet-B: separable 3x3 convolutions and the dilated separable 5x5 of its reduction cell.
TEST(ModelsAgainstPyTorch, AmoebaNetBInF64) {
  if (const std::string why = trident::testing::torch_missing(); !why.empty()) GTEST_SKIP() << why;
  compare_amoebanet("B");
}
