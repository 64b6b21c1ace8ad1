// NOTE [Models against PyTorch]: GPT-2 and BERT against the same models written plainly in
// PyTorch (tests/models/torch_reference.py, run with Debian's python3-torch: an implementation
// that shares no code with Trident's). The test gives every parameter random f64 values (so
// that LayerNorm's affine terms, biases and the padded vocabulary rows all matter), runs the
// forward pass and the backward pass from the loss, and writes the weights under Hugging
// Face's names, the inputs, the outputs and every gradient into one safetensors file; the
// script rebuilds the model from those names with torch.nn.functional, recomputes everything in
// f64 and exits non-zero when any output or gradient differs by more than 1e-10 (normwise
// relative). Skips, saying why, when /usr/bin/python3 cannot import torch.
#include "models_test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "models/bert.h"
#include "models/gpt2.h"
#include "nn/safetensors.h"

using namespace trident;
using namespace trident::models;

namespace {

#ifndef TRIDENT_TORCH_REFERENCE
#error "tests/CMakeLists.txt defines TRIDENT_TORCH_REFERENCE (the path of torch_reference.py)"
#endif

struct Run {
  int status;
  std::string output;
};

// A command line's exit status and its stdout and stderr together.
Run run(const std::string& cmd) {
  Run r{-1, {}};
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Why PyTorch cannot serve as the reference here, or "" when it can.
std::string torch_missing() {
  const Run r = run("/usr/bin/python3 -c 'import torch'");
  return r.status == 0 ? "" : "/usr/bin/python3 cannot import torch (scripts/setup.sh installs python3-torch): " + r.output;
}

// Every parameter random: matrices and embeddings N(0, 0.3^2), LayerNorm weights 1 + N(0, 0.2^2),
// biases N(0, 0.2^2); the model's own init (small weights, unit LayerNorms, zero biases) would
// leave the affine terms and biases untested.
void randomize(nn::Module& m, uint64_t seed) {
  Generator g(seed);
  nn::StateDict sd = m.state_dict();
  for (auto& [name, t] : sd) {
    const bool norm = name.find("LayerNorm") != std::string::npos || name.find("ln_") != std::string::npos;
    const bool bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    Tensor r = randn(t.sizes(), t.dtype(), &g);
    t = t.dim() >= 2 ? mul(r, 0.3) : (norm && !bias ? add(mul(r, 0.2), 1.0) : mul(r, 0.2));
  }
  m.load_state_dict(sd);
}

Tensor scalar_row(double v) { return from_vector<double>({v}, {1}); }

// Writes weights, inputs ("in."), config ("cfg."), outputs ("out.") and gradients ("grad.") and
// runs the reference on them; its report goes to the test log.
void compare_with_torch(const std::string& model, nn::Module& m, nn::StateDict extra) {
  for (const auto& [name, t] : m.named_parameters()) {
    extra[name] = t;
    ASSERT_TRUE(t.grad().defined()) << name << " got no gradient";
    extra["grad." + name] = t.grad();
  }
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("trident_torch_reference_" + model + "_" + std::to_string(::getpid()) + ".safetensors");
  nn::save_safetensors(file.string(), extra);
  const Run r = run("/usr/bin/python3 " + std::string(TRIDENT_TORCH_REFERENCE) + " " + model + " " + file.string());
  std::filesystem::remove(file);
  EXPECT_EQ(r.status, 0) << r.output;
  if (r.status == 0) std::cout << r.output;  // the differences, for the log
}

}  // namespace

TEST(ModelsAgainstPyTorch, GPT2LogitsLossAndEveryGradientInF64) {
  if (const std::string why = torch_missing(); !why.empty()) GTEST_SKIP() << why;
  GPT2Config c = GPT2Config::preset("tiny");
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 61;
  c.padded_vocab_size = 64;
  c.n_positions = 16;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  c.dtype = DType::F64;
  Generator g(1);
  GPT2LMHeadModel m(c, &g);
  randomize(m, 2);
  Generator d(3);
  const Tensor ids = randint(0, 61, {2, 16}, DType::I64, &d);
  std::vector<int64_t> t = randint(0, 61, {2, 16}, DType::I64, &d).to_vector<int64_t>();
  t[3] = t[20] = -100;  // ignored positions
  const Tensor targets = from_vector<int64_t>(t, {2, 16});
  const LMOutput out = m.forward(ids, targets);
  out.loss.backward();
  compare_with_torch("gpt2", m,
                     {{"in.input_ids", ids},
                      {"in.targets", targets},
                      {"out.logits", out.logits},
                      {"out.loss", reshape(out.loss, {1})},
                      {"cfg.n_layer", scalar_row(2)},
                      {"cfg.n_head", scalar_row(2)},
                      {"cfg.n_embd", scalar_row(16)},
                      {"cfg.vocab_size", scalar_row(61)},
                      {"cfg.eps", scalar_row(c.layer_norm_epsilon)}});
}

TEST(ModelsAgainstPyTorch, BertBothHeadsLossAndEveryGradientInF64) {
  if (const std::string why = torch_missing(); !why.empty()) GTEST_SKIP() << why;
  BertConfig c = BertConfig::preset("tiny");
  c.vocab_size = 37;
  c.padded_vocab_size = 40;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.num_hidden_layers = 2;
  c.max_position_embeddings = 16;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
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
  const BertPreTrainingOutput out = m.forward(batch);
  out.loss.backward();
  nn::StateDict extra{{"out.mlm_logits", out.mlm_logits},
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
