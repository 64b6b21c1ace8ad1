// GPT-2 and BERT split by TensorParallelLayers against the serial models, under mpirun -np 2 and
// 4 (tp = the world size): 10 training steps give the serial losses (f32, relative 1e-5) with a
// vocabulary that does not divide by tp; one step's communication is Megatron's count; a
// checkpoint saved at tp = world loads at every smaller tp and serially with the same next loss;
// dropout outside split regions does not depend on tp; bad configurations fail on every rank.
// Every rank trains the serial reference itself, from the same seeds and data.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "models/bert.h"
#include "models/gpt2.h"
#include "parallel/tensor_parallel/checkpoint.h"
#include "parallel/tensor_parallel/tp_layers.h"
#include "test_util.h"

using namespace trident;
using namespace trident::models;
using namespace trident::parallel;
using namespace trident::parallel::tp;
using trident::testing::error_message;

namespace {

constexpr int kSteps = 10;
constexpr int64_t kB = 2, kT = 8, kVocab = 101;  // 101: prime, divides by no tp

std::shared_ptr<comm::Communicator> world() { return comm::Communicator::world(); }

const Mesh& full_tp_mesh() {
  static const Mesh mesh(MeshShape{.dp = 1, .pp = 1, .tp = world()->size()});
  return mesh;
}
int tp() { return full_tp_mesh().size(Axis::TP); }

std::shared_ptr<TensorParallelLayers> tp_layers() { return std::make_shared<TensorParallelLayers>(full_tp_mesh()); }

GPT2Config gpt2_config(std::shared_ptr<const LayerFactory> f, double replicated_dropout = 0.0) {
  GPT2Config c = GPT2Config::preset("tiny");
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.n_positions = kT;
  c.vocab_size = kVocab;
  c.padded_vocab_size = 0;
  c.embd_pdrop = c.resid_pdrop = replicated_dropout;
  c.attn_pdrop = 0.0;  // a split site: per-rank streams, not comparable with serial
  c.layers = std::move(f);
  return c;
}

BertConfig bert_config(std::shared_ptr<const LayerFactory> f) {
  BertConfig c;
  c.vocab_size = kVocab;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 64;
  c.max_position_embeddings = kT;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  c.layers = std::move(f);
  return c;
}

Tensor tokens(uint64_t seed) {
  Generator g(seed);
  return randint(0, kVocab, {kB, kT}, DType::I64, &g);
}

Batch bert_batch(int step) {
  const Tensor ids = tokens(100 + static_cast<uint64_t>(step % 2));
  std::vector<int64_t> labels(static_cast<size_t>(kB * kT), -100);
  const std::vector<int64_t> v = ids.to_vector<int64_t>();
  for (size_t i = static_cast<size_t>(step % 2); i < labels.size(); i += 3) labels[i] = (v[i] * 7 + 3) % kVocab;
  std::vector<int64_t> types(static_cast<size_t>(kB * kT), 0), mask(static_cast<size_t>(kB * kT), 1);
  for (int64_t t = kT / 2; t < kT; ++t) types[static_cast<size_t>(t)] = types[static_cast<size_t>(kT + t)] = 1;
  mask[static_cast<size_t>(2 * kT - 1)] = 0;
  return Batch{{"input_ids", ids},
               {"token_type_ids", from_vector<int64_t>(types, {kB, kT})},
               {"attention_mask", from_vector<int64_t>(mask, {kB, kT})},
               {"mlm_labels", from_vector<int64_t>(labels, {kB, kT})},
               {"next_sentence_label", from_vector<int64_t>({static_cast<int64_t>(step % 2), 1}, {kB})}};
}

template <typename Model>
Tensor step_loss(Model& m, int step);
template <>
Tensor step_loss(GPT2LMHeadModel& m, int step) {
  // Two batches in turn, so that the loss falls (it learns them) while the data still changes.
  const uint64_t b = static_cast<uint64_t>(step % 2);
  return m.forward(tokens(b), tokens(1000 + b)).loss;
}
template <>
Tensor step_loss(BertForPreTraining& m, int step) {
  return m.forward(bert_batch(step)).loss;
}

template <typename Model, typename Config>
std::vector<double> train(const Config& c, int steps, Generator* dropout = nullptr) {
  Generator init(5);
  Config cc = c;
  cc.dropout_generator = dropout;
  Model m(cc, &init);
  nn::optim::SGD opt(m.parameters(), nn::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const Tensor loss = step_loss(m, s);
    loss.backward();
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

void expect_losses_close(const std::vector<double>& par, const std::vector<double>& serial) {
  ASSERT_EQ(par.size(), serial.size());
  for (size_t i = 0; i < par.size(); ++i)
    EXPECT_NEAR(par[i], serial[i], 1e-5 * std::fabs(serial[i])) << "step " << i << " at tp = " << tp();
  EXPECT_LT(serial.back(), serial.front());  // it trains
}

TEST(TpModels, GPT2TrainsAsSerial) {
  expect_losses_close(train<GPT2LMHeadModel>(gpt2_config(tp_layers()), kSteps), train<GPT2LMHeadModel>(gpt2_config(nullptr), kSteps));
}

TEST(TpModels, BertTrainsAsSerial) {
  expect_losses_close(train<BertForPreTraining>(bert_config(tp_layers()), kSteps),
                      train<BertForPreTraining>(bert_config(nullptr), kSteps));
}

// Dropout on the embeddings and the residual stream (replicated sites) draws from the shared
// generator, seeded alike on every rank: the same masks as serial, so the same losses.
TEST(TpModels, ReplicatedDropoutDoesNotDependOnTp) {
  Generator g1(77), g2(77);
  expect_losses_close(train<GPT2LMHeadModel>(gpt2_config(tp_layers(), 0.2), 4, &g1),
                      train<GPT2LMHeadModel>(gpt2_config(nullptr, 0.2), 4, &g2));
}

TEST(TpModels, SplitDropoutStreamsArePerRank) {
  auto f = tp_layers();
  Generator shared(3);
  EXPECT_EQ(f->dropout_generator(DropoutSite::Replicated, &shared), &shared);
  Generator* split = f->dropout_generator(DropoutSite::Split, &shared);
  ASSERT_NE(split, &shared);
  Tensor seeds = zeros({tp()}, DType::I64);
  Tensor mine = full({1}, static_cast<double>(split->seed()), DType::I64);
  full_tp_mesh().group(Axis::TP).all_gather(seeds, mine).wait();
  const std::vector<int64_t> s = seeds.to_vector<int64_t>();
  for (int r = 0; r < tp(); ++r) EXPECT_EQ(s[static_cast<size_t>(r)], 1234 + 2718 + r);
}

// Megatron's count for one step (forward and backward), in elements of f32 all-reduced over tp:
//   blocks:    per layer 2 forward (attention and MLP outputs, RowParallelLinear) and 2 backward
//              (the gradients of their inputs, copy_to_region in ColumnParallelLinear), B T C each;
//   embedding: 1 forward (VocabParallelEmbedding sums the ranks' lookups), B T C;
//   output:    1 backward (the gradient of the hidden states entering the tied logits), B T C
//              (GPT-2: all B T positions; BERT: the M masked positions, M x H, plus its decoder
//              bias [V], whole on every rank, whose gradient is all-reduced);
//   loss:      3 forward of [N] targets (row max, target logit, sum of exponentials), none
//              backward: the logits are never gathered.
TEST(TpModels, OneStepCommunicatesMegatronsCount) {
  comm::Communicator& g = full_tp_mesh().group(Axis::TP);
  {
    Generator init(5);
    GPT2LMHeadModel m(gpt2_config(tp_layers()), &init);
    g.reset_stats();
    step_loss(m, 0).backward();
    const int64_t L = 2, C = 32, BT = kB * kT;
    EXPECT_EQ(g.stats()[comm::CommOp::AllReduce].calls, 4 * L + 2 + 3);
    EXPECT_EQ(g.stats()[comm::CommOp::AllReduce].bytes, ((4 * L + 2) * BT * C + 3 * BT) * 4);
    EXPECT_EQ(g.stats().total_calls(), 4 * L + 2 + 3) << g.stats().str();
  }
  {
    Generator init(5);
    BertForPreTraining m(bert_config(tp_layers()), &init);
    const Batch b = bert_batch(0);
    const int64_t M = static_cast<int64_t>(m.loss_counts(b)[0]);
    g.reset_stats();
    m.forward(b).loss.backward();
    const int64_t L = 2, H = 32, BT = kB * kT;
    EXPECT_EQ(g.stats()[comm::CommOp::AllReduce].calls, 4 * L + 1 + 2 + 3);
    EXPECT_EQ(g.stats()[comm::CommOp::AllReduce].bytes, ((4 * L + 1) * BT * H + M * H + kVocab + 3 * M) * 4);
    EXPECT_EQ(g.stats().total_calls(), 4 * L + 1 + 2 + 3) << g.stats().str();
  }
}

// Train 3 steps at tp = world, save; load at every tp dividing the world (and serially): the
// next step's loss is the same everywhere.
TEST(TpModels, CheckpointSavedAtFullTpLoadsAtEveryTp) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("trident_tp_ckpt_" + std::to_string(getppid()))).string();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.safetensors";
  Generator init(5);
  GPT2LMHeadModel big(gpt2_config(tp_layers()), &init);
  nn::optim::SGD opt(big.parameters(), nn::optim::SGDOptions{.lr = 0.1});
  for (int s = 0; s < 3; ++s) {
    step_loss(big, s).backward();
    opt.step();
    opt.zero_grad();
  }
  save_full_safetensors(big, path, full_tp_mesh().group(Axis::TP));
  double expected;
  {
    NoGradGuard ng;
    expected = step_loss(big, 3).item<double>();
  }
  // The file is the serial model's: Hugging Face's names and shapes.
  const nn::StateDict file = nn::load_safetensors(path).tensors;
  EXPECT_EQ(file.at("transformer.wte.weight").sizes(), Shape({kVocab, 32}));
  EXPECT_EQ(file.at("transformer.h.0.attn.c_attn.weight").sizes(), Shape({32, 96}));
  for (int small = tp() / 2; small >= 1; small /= 2) {
    const Mesh mesh(world(), MeshShape{.dp = -1, .pp = 1, .tp = small});
    Generator other(99);  // different initial values: everything must come from the file
    GPT2LMHeadModel m(gpt2_config(std::make_shared<TensorParallelLayers>(mesh)), &other);
    load_full_safetensors(m, path, mesh.group(Axis::TP));
    NoGradGuard ng;
    EXPECT_NEAR(step_loss(m, 3).item<double>(), expected, 1e-5 * expected) << "loaded at tp = " << small;
  }
  {
    Generator other(98);
    GPT2LMHeadModel serial(gpt2_config(nullptr), &other);
    serial.load_state_dict(file);
    NoGradGuard ng;
    EXPECT_NEAR(step_loss(serial, 3).item<double>(), expected, 1e-5 * expected) << "loaded serially";
  }
  world()->barrier().wait();
  if (world()->rank() == 0) std::filesystem::remove_all(dir);
}

TEST(TpModels, BadConfigurationsFailOnEveryRankWithoutHanging) {
  // tp not dividing the world: raised by every rank before any communication.
  const std::string mesh_error = error_message([] { Mesh m(world(), MeshShape{.dp = 1, .pp = 1, .tp = 3}); });
  EXPECT_NE(mesh_error.find("3"), std::string::npos) << mesh_error;
  EXPECT_NE(mesh_error, "(no error)");
  auto f = tp_layers();
  GPT2Config heads = gpt2_config(f);
  heads.n_head = tp() + 1;  // no tp > 1 divides it
  heads.n_embd = 8 * heads.n_head;
  const std::string h = error_message([&] { GPT2LMHeadModel m(heads); });
  EXPECT_NE(h.find("n_head " + std::to_string(tp() + 1) + " does not divide by the " + std::to_string(tp())), std::string::npos) << h;
  BertConfig width = bert_config(f);
  width.intermediate_size = 4 * 8 + 1;
  const std::string w = error_message([&] { BertForPreTraining m(width); });
  EXPECT_NE(w.find("intermediate_size 33 does not divide"), std::string::npos) << w;
  // Every rank got here: a collective completes.
  world()->barrier().wait();
}

}  // namespace
