// GPT-2 and BERT split by TensorParallelLayers against the serial models, under mpirun -np 2 and
// 4 (tp = the world size): 10 training steps give the serial losses (f32, relative 1e-5) with a
// vocabulary that does not divide by tp; one step's communication is Megatron's count; a
// checkpoint saved at tp = world loads at every smaller tp and serially with the same next loss,
// and AdamW's state gathers to the serial optimizer's and back;
// dropout outside split regions does not depend on tp; bad configurations fail on every rank.
// The same with sequence parallelism (TpSequenceParallel): serial losses and gradients, the
// all-gather/reduce-scatter count, and a sequence length not dividing by tp failing everywhere.
// ZeRO-1 over the dp group of a dp x tp mesh, with clipping by the serial norm (TpZero).
// Every rank trains the serial reference itself, from the same seeds and data.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "models/bert.h"
#include "models/gpt2.h"
#include "models/gpt2_generate.h"
#include "nn/optim/adam.h"
#include "parallel/tensor_parallel/checkpoint.h"
#include "parallel/tensor_parallel/tp_layers.h"
#include "parallel/zero.h"
#include "test_util.h"

using namespace trident;
using namespace trident::models;
using namespace trident::parallel;
using namespace trident::parallel::tp;
using trident::testing::error_message;
using autograd::TensorList;

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
std::shared_ptr<TensorParallelLayers> sp_layers() {
  return std::make_shared<TensorParallelLayers>(full_tp_mesh(), TensorParallelOptions{.sequence_parallel = true});
}

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

// NOTE [Layout-independent checkpoints]: AdamW's state of the split model, gathered, has the
// serial model's optimizer state's keys, shapes and scalars; its values are the full tensors
// (checked on a state whose moments are the parameters themselves and their squares, against
// full_state_dict's gathered parameters), and cutting it back gives this rank's state exactly
// (the vocabulary padding's entries are zeros).
TEST(TpModels, AdamStateGathersToTheSerialOptimizersAndBack) {
  auto trained = [](std::shared_ptr<const LayerFactory> f) {
    Generator init(5);
    auto m = std::make_unique<GPT2LMHeadModel>(gpt2_config(std::move(f)), &init);
    auto opt = std::make_unique<nn::optim::AdamW>(m->parameters(), nn::optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
    for (int s = 0; s < 3; ++s) {
      step_loss(*m, s).backward();
      opt->step();
      opt->zero_grad();
    }
    return std::make_pair(std::move(m), std::move(opt));
  };
  auto [serial, serial_opt] = trained(nullptr);
  auto [split, split_opt] = trained(tp_layers());
  comm::Communicator& group = full_tp_mesh().group(Axis::TP);
  const nn::optim::OptimizerState expected = serial_opt->state_dict();
  // Moments made of the parameters: exp_avg = p, exp_avg_sq = p * p.
  const auto named = split->named_parameters();
  nn::optim::OptimizerState mine = split_opt->state_dict();
  auto param_of = [&](const std::string& key) { return static_cast<size_t>(std::stoul(key.substr(6, key.find('.', 6) - 6))); };
  for (auto& [key, t] : mine.tensors) {
    const Tensor p = named.at(param_of(key)).second.detach();
    t = key.ends_with("exp_avg_sq") ? (p * p).contiguous() : p.clone();
  }
  const nn::optim::OptimizerState full = full_optimizer_state(mine, *split, split_opt->parameters(), group);
  EXPECT_EQ(full.optimizer, expected.optimizer);
  EXPECT_EQ(full.scalars, expected.scalars);
  const nn::StateDict params = full_state_dict(*split, group);
  ASSERT_EQ(full.tensors.size(), expected.tensors.size());
  for (const auto& [key, e] : expected.tensors) {
    ASSERT_TRUE(full.tensors.count(key)) << key;
    const Tensor& t = full.tensors.at(key);
    ASSERT_EQ(t.sizes(), e.sizes()) << key;
    const Tensor p = params.at(named.at(param_of(key)).first);
    EXPECT_EQ(t.to_vector<float>(), (key.ends_with("exp_avg_sq") ? p * p : p).to_vector<float>()) << key << " at tp = " << tp();
  }
  const nn::optim::OptimizerState back = local_optimizer_state(full, *split, split_opt->parameters(), group);
  EXPECT_EQ(back.scalars, mine.scalars);
  ASSERT_EQ(back.tensors.size(), mine.tensors.size());
  for (const auto& [key, t] : mine.tensors) {
    ASSERT_TRUE(back.tensors.count(key)) << key;
    EXPECT_EQ(back.tensors.at(key).to_vector<float>(), t.to_vector<float>()) << key;
  }
  split_opt->load_state_dict(back);  // accepted as this rank's own
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

// ---- sequence parallelism (NOTE [Sequence parallelism]) ----

TEST(TpSequenceParallel, GPT2TrainsAsSerial) {
  expect_losses_close(train<GPT2LMHeadModel>(gpt2_config(sp_layers()), kSteps), train<GPT2LMHeadModel>(gpt2_config(nullptr), kSteps));
}

TEST(TpSequenceParallel, BertTrainsAsSerial) {
  expect_losses_close(train<BertForPreTraining>(bert_config(sp_layers()), kSteps),
                      train<BertForPreTraining>(bert_config(nullptr), kSteps));
}

// The residual stream really is split, and every parameter that is whole on each rank but used
// on sequence shards (LayerNorms, row-parallel biases, and wpe behind the scatter) gets the
// serial gradient after one backward, on every rank.
TEST(TpSequenceParallel, ReplicatedParametersGetTheSerialGradient) {
  Generator i1(5), i2(5);
  GPT2LMHeadModel sp(gpt2_config(sp_layers()), &i1);
  GPT2LMHeadModel serial(gpt2_config(nullptr), &i2);
  Batch b;
  b.set("input_ids", tokens(0));
  const Activations hidden = sp.layers().run(b, {}, 0, 1);
  EXPECT_EQ(hidden.at(0).sizes(), Shape({kB, kT / tp(), 32}));
  step_loss(sp, 0).backward();
  step_loss(serial, 0).backward();
  const std::map<std::string, ParamShard> split = sharded_parameters(sp);
  std::map<std::string, Tensor> want;
  for (const auto& [name, p] : serial.named_parameters()) want[name] = p.grad();
  int checked = 0;
  for (const auto& [name, p] : sp.named_parameters()) {
    if (split.count(name)) continue;
    ASSERT_TRUE(p.grad().defined()) << name;
    const std::vector<float> got = p.grad().to_vector<float>(), ref = want.at(name).to_vector<float>();
    ASSERT_EQ(got.size(), ref.size()) << name;
    float scale = 0;
    for (float r : ref) scale = std::max(scale, std::fabs(r));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-5 * scale) << name << "[" << i << "]";
    ++checked;
  }
  // wpe, ln_1/ln_2 x 2 layers, ln_f (weight and bias), attn.c_proj and mlp.c_proj biases x 2.
  EXPECT_EQ(checked, 1 + 2 * 5 + 4);
}

// One step, in elements of f32 over the tp group. Megatron's 4 all-reduces of B T C per layer
// (OneStepCommunicatesMegatronsCount) become 4 all-gathers and 4 reduce-scatters of B T C (the
// counters count a gather's output and a reduce-scatter's input, the full buffer): a ring
// all-reduce is a reduce-scatter plus an all-gather, so the bytes on the wire are the same.
//   blocks:    forward: all-gather entering c_attn/QKV and c_fc/intermediate, reduce-scatter
//              leaving both row layers; backward: the reverse, B T C each;
//   embedding: the vocabulary all-reduce (B T C) forward as before; the scatter into the
//              residual stream all-gathers its gradient backward (B T C);
//   output:    GPT-2's tied logits gather the positions forward and reduce-scatter the hidden
//              gradient backward (B T C each), where Megatron all-reduced once backward; BERT's
//              heads gather forward only (their gradient is whole on every rank), then as before
//              (M x H and the decoder bias [V] all-reduced backward);
//   loss:      3 all-reduces of [N] as before;
//   parameters whole on each rank but used on shards: one all-reduce of each gradient, the
//              LayerNorms' weight and bias (2 per LayerNorm) and the row layers' biases.
TEST(TpSequenceParallel, OneStepCommunicatesAllGathersAndReduceScatters) {
  comm::Communicator& g = full_tp_mesh().group(Axis::TP);
  using comm::CommOp;
  {
    Generator init(5);
    GPT2LMHeadModel m(gpt2_config(sp_layers()), &init);
    g.reset_stats();
    step_loss(m, 0).backward();
    const int64_t L = 2, C = 32, BT = kB * kT;
    const int64_t norms = 2 * L + 1, row_biases = 2 * L;
    EXPECT_EQ(g.stats()[CommOp::AllGather].calls, 4 * L + 2);
    EXPECT_EQ(g.stats()[CommOp::AllGather].bytes, (4 * L + 2) * BT * C * 4);
    EXPECT_EQ(g.stats()[CommOp::ReduceScatter].calls, 4 * L + 1);
    EXPECT_EQ(g.stats()[CommOp::ReduceScatter].bytes, (4 * L + 1) * BT * C * 4);
    EXPECT_EQ(g.stats()[CommOp::AllReduce].calls, 1 + 3 + 2 * norms + row_biases);
    EXPECT_EQ(g.stats()[CommOp::AllReduce].bytes, (BT * C + 3 * BT + (2 * norms + row_biases) * C) * 4);
    EXPECT_EQ(g.stats().total_calls(), (4 * L + 2) + (4 * L + 1) + 1 + 3 + 2 * norms + row_biases) << g.stats().str();
  }
  {
    Generator init(5);
    BertForPreTraining m(bert_config(sp_layers()), &init);
    const Batch b = bert_batch(0);
    const int64_t M = static_cast<int64_t>(m.loss_counts(b)[0]);
    g.reset_stats();
    m.forward(b).loss.backward();
    const int64_t L = 2, H = 32, BT = kB * kT;
    const int64_t norms = 2 * L + 1, row_biases = 2 * L;  // the embeddings' LayerNorm and 2 per layer
    EXPECT_EQ(g.stats()[CommOp::AllGather].calls, 4 * L + 2);
    EXPECT_EQ(g.stats()[CommOp::AllGather].bytes, (4 * L + 2) * BT * H * 4);
    EXPECT_EQ(g.stats()[CommOp::ReduceScatter].calls, 4 * L);
    EXPECT_EQ(g.stats()[CommOp::ReduceScatter].bytes, 4 * L * BT * H * 4);
    EXPECT_EQ(g.stats()[CommOp::AllReduce].calls, 1 + 2 + 3 + 2 * norms + row_biases);
    EXPECT_EQ(g.stats()[CommOp::AllReduce].bytes, (BT * H + M * H + kVocab + 3 * M + (2 * norms + row_biases) * H) * 4);
    EXPECT_EQ(g.stats().total_calls(), (4 * L + 2) + 4 * L + 1 + 2 + 3 + 2 * norms + row_biases) << g.stats().str();
  }
}

// Dropout on the residual stream: the caller's shared generator under Megatron's split, the
// per-rank stream of the split regions under sequence parallelism (each rank drops its own
// positions).
TEST(TpSequenceParallel, ResidualDropoutDrawsFromPerRankStreams) {
  Generator shared(3);
  EXPECT_EQ(tp_layers()->dropout_generator(DropoutSite::Residual, &shared), &shared);
  auto f = sp_layers();
  EXPECT_EQ(f->dropout_generator(DropoutSite::Replicated, &shared), &shared);
  Generator* residual = f->dropout_generator(DropoutSite::Residual, &shared);
  ASSERT_NE(residual, &shared);
  EXPECT_EQ(residual, f->dropout_generator(DropoutSite::Split, &shared));
  EXPECT_EQ(residual->seed(), 1234u + 2718u + static_cast<uint64_t>(full_tp_mesh().index(Axis::TP)));
  // With dropout the model still trains (its masks are its own, so no serial comparison).
  Generator g(77);
  const std::vector<double> losses = train<GPT2LMHeadModel>(gpt2_config(sp_layers(), 0.1), 4, &g);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
}

// A sequence length that does not divide by tp: the same error on every rank (each sees the
// same batch), and no rank left waiting in a collective.
TEST(TpSequenceParallel, SequenceNotDividingByTpFailsOnEveryRank) {
  Generator init(5);
  GPT2LMHeadModel m(gpt2_config(sp_layers()), &init);
  const int64_t T = 7;  // divides by no tp > 1
  Generator g(1);
  const Tensor ids = randint(0, kVocab, {kB, T}, DType::I64, &g);
  const std::string e = error_message([&] { m.forward(ids, ids); });
  EXPECT_NE(e.find("sequence length T = 7"), std::string::npos) << e;
  EXPECT_NE(e.find("does not divide by tp = " + std::to_string(tp())), std::string::npos) << e;
  BertForPreTraining bert(bert_config(sp_layers()), &init);
  const std::string eb = error_message([&] { bert.forward(Batch{{"input_ids", ids}}); });
  EXPECT_NE(eb.find("sequence length T = 7"), std::string::npos) << eb;
  world()->barrier().wait();
  // The group is still in step: a good batch trains.
  EXPECT_TRUE(std::isfinite(step_loss(m, 0).item<double>()));
}

// ---- ZeRO-1 over the dp group of a dp x tp mesh ----

// tp = 2, dp = world / 2 (1 at -np 2, 2 at -np 4), sequence parallelism on: each dp rank trains on
// its rows of the batch, ZeroOptimizer (over its tp index's shards) averages the gradients over
// dp, and clipping by the serial norm (split parameters' squares summed over tp) clips every
// step. Losses (averaged over dp) and norms equal serial training on the whole batch.
TEST(TpZero, DpTpMeshWithZeroTrainsAsSerial) {
  const Mesh mesh(world(), MeshShape{.dp = -1, .pp = 1, .tp = 2});
  const int dp = mesh.size(Axis::DP), row = mesh.index(Axis::DP);
  ASSERT_EQ(kB % dp, 0);
  const double max_norm = 0.05;
  const nn::optim::SGDOptions sgd{.lr = 0.1, .momentum = 0.9};
  auto batch = [](uint64_t b, int64_t first, int64_t rows) {
    return std::pair{narrow(tokens(b), 0, first, rows).contiguous(), narrow(tokens(1000 + b), 0, first, rows).contiguous()};
  };
  std::vector<double> serial_losses, serial_norms, losses, norms;
  {
    Generator init(5);
    GPT2LMHeadModel m(gpt2_config(nullptr), &init);
    nn::optim::SGD opt(m.parameters(), sgd);
    for (int s = 0; s < 6; ++s) {
      const auto [ids, targets] = batch(static_cast<uint64_t>(s % 2), 0, kB);
      const Tensor loss = m.forward(ids, targets).loss;
      loss.backward();
      serial_norms.push_back(nn::clip_grad_norm_(m.parameters(), max_norm));
      opt.step();
      opt.zero_grad();
      serial_losses.push_back(loss.item<double>());
    }
  }
  {
    Generator init(5);
    auto f = std::make_shared<TensorParallelLayers>(mesh, TensorParallelOptions{.sequence_parallel = true});
    GPT2LMHeadModel m(gpt2_config(f), &init);
    ZeroOptimizer zero(m, mesh.group_ptr(Axis::DP),
                       [&](const ParamGroups& g) { return std::make_unique<nn::optim::SGD>(g.at(0), sgd); });
    std::vector<Tensor> split;
    const auto shards = sharded_parameters(m);
    for (const auto& [name, p] : m.named_parameters())
      if (shards.count(name)) split.push_back(p);
    ASSERT_FALSE(split.empty());
    const int64_t rows = kB / dp;
    for (int s = 0; s < 6; ++s) {
      const auto [ids, targets] = batch(static_cast<uint64_t>(s % 2), row * rows, rows);
      const Tensor loss = m.forward(ids, targets).loss;
      loss.backward();
      norms.push_back(zero.clip_grad_norm(max_norm, mesh.group(Axis::TP), split));
      zero.step();
      zero.zero_grad();
      Tensor l = scalar_tensor(loss.item<double>() / dp, DType::F64);
      mesh.group(Axis::DP).all_reduce(l).wait();
      losses.push_back(l.item<double>());
    }
  }
  expect_losses_close(losses, serial_losses);
  for (size_t i = 0; i < norms.size(); ++i) {
    EXPECT_NEAR(norms[i], serial_norms[i], 1e-5 * serial_norms[i]) << "step " << i << " at dp = " << dp;
    EXPECT_GT(serial_norms[i], max_norm);  // it clipped
  }
}

// NOTE [Sequence-parallel decoding]: generation one token at a time (a step of 1 new token does
// not divide by tp) with the key/value cache, without it, and past the context (the windowed
// recompute) gives the serial model's tokens, and each step's logits within f32 rounding; a
// cached step of any length gives the serial step's logits.
TEST(TpSequenceParallel, GenerationTokenByTokenIsTheSerialOne) {
  Generator i1(5), i2(5);
  GPT2LMHeadModel sp(gpt2_config(sp_layers()), &i1);
  GPT2LMHeadModel serial(gpt2_config(nullptr), &i2);
  const Tensor prompt = narrow(tokens(3), 1, 0, 3);  // [2, 3]
  for (const bool cache : {true, false}) {
    for (const int64_t n : {int64_t{4}, int64_t{9}}) {  // 3 + 9 > kT = 8 positions: windows past the context
      SCOPED_TRACE(std::string(cache ? "cached" : "uncached") + ", " + std::to_string(n) + " new tokens");
      std::vector<Tensor> steps[2];
      auto run = [&](GPT2LMHeadModel& m, std::vector<Tensor>& logits) {
        GenerateOptions o;
        o.max_new_tokens = n;
        o.sampling.greedy = true;
        o.use_cache = cache;
        o.on_token = [&](int64_t, const Tensor& l, const Tensor&) { logits.push_back(l.clone()); };
        return generate(m, prompt, o);
      };
      const Tensor got = run(sp, steps[0]), want = run(serial, steps[1]);
      EXPECT_TRUE(trident::testing::all_close(got, want, 0, 0)) << "the tokens";
      ASSERT_EQ(steps[0].size(), steps[1].size());
      for (size_t i = 0; i < steps[0].size(); ++i)
        EXPECT_TRUE(trident::testing::all_close(steps[0][i], steps[1][i], 1e-5, 1e-5)) << "step " << i;
    }
  }
  NoGradGuard no_grad;
  const Tensor seq = tokens(4);  // [2, 8]
  GPT2KVCache a = sp.make_cache(kB, kT), b = serial.make_cache(kB, kT), c = sp.make_cache(kB, kT);
  EXPECT_EQ(a.capacity(), kT);
  int64_t at = 0;
  for (const int64_t len : {int64_t{1}, int64_t{3}, int64_t{2}, int64_t{1}, int64_t{1}}) {
    const Tensor step = narrow(seq, 1, at, len);
    const Tensor want = serial.forward_cached(step, b);
    EXPECT_TRUE(trident::testing::all_close(sp.forward_cached(step, a), want, 1e-5, 1e-5)) << len << " new tokens after " << at;
    // The last position only: its logits gathered over the ranks that hold the positions.
    EXPECT_TRUE(trident::testing::all_close(sp.forward_cached(step, c, /*last_position_only=*/true), narrow(want, 1, len - 1, 1),
                                            1e-5, 1e-5))
        << len << " new tokens after " << at << ", the last position only";
    at += len;
    EXPECT_EQ(a.length, at);
    EXPECT_EQ(c.length, at);
  }
  trident::testing::expect_error([&] { sp.forward_cached(narrow(seq, 1, 0, 1), a); }, {"do not fit a cache holding 8 of 8"});
}

// ---- higher-order gradients (NOTE [Tensor-parallel regions and higher-order gradients]) ----

// A Hessian-vector product of the split model in f64 (every mapping's backward recorded as its
// conjugate, the vocabulary-parallel cross-entropy's softmax as a function of the logits) equals
// the serial model's: each rank seeds its own part of grad . v (its shards' terms, and the
// replicated parameters' terms, which every rank holds whole), and gets its shards of H v.
template <typename Model, typename Config>
void expect_hvp_matches_serial(const Config& split_config, const Config& serial_config) {
  auto hvp = [](Model& m) {
    m.to(DType::F64);
    std::vector<std::string> names;
    TensorList params;
    for (const auto& [name, p] : m.named_parameters()) {
      names.push_back(name);
      params.push_back(p);
    }
    const Tensor loss = step_loss(m, 1);
    const TensorList g = autograd::grad({loss}, params, {}, false, false, /*create_graph=*/true);
    const auto split = sharded_parameters(m);
    Tensor dot = scalar_tensor(0.0, DType::F64);
    for (size_t i = 0; i < params.size(); ++i) {
      // The direction: the same full tensor on every rank, cut like the parameter.
      Generator gv(std::hash<std::string>{}(names[i]));
      const auto it = split.find(names[i]);
      Shape full = params[i].sizes();
      if (it != split.end()) full[static_cast<size_t>(it->second.dim)] = it->second.full_size;
      Tensor v = randn(full, DType::F64, &gv);
      if (it != split.end()) v = shard_of(v, it->second, full_tp_mesh().index(Axis::TP), tp());
      dot = add(dot, sum(mul(g[i], v)));
    }
    const TensorList h = autograd::grad({dot}, params);
    std::map<std::string, Tensor> out;
    for (size_t i = 0; i < params.size(); ++i) out[names[i]] = h[i];
    return std::make_pair(out, split);
  };
  Generator i1(5), i2(5);
  Model par(split_config, &i1), serial(serial_config, &i2);
  const auto [got, split] = hvp(par);
  const auto [want, none] = hvp(serial);
  ASSERT_EQ(got.size(), want.size());
  // Rounding is relative to the product's size as a whole: some parameters' parts of H v are 0 in
  // exact arithmetic (1e-19 here), others 1e-8, the largest about 1.
  double scale = 0;
  for (const auto& [name, ref] : want) scale = std::max(scale, max(abs(ref)).template item<double>());
  ASSERT_GT(scale, 0.1);
  for (const auto& [name, h] : got) {
    Tensor ref = want.at(name);
    if (const auto it = split.find(name); it != split.end()) ref = shard_of(ref, it->second, full_tp_mesh().index(Axis::TP), tp());
    ASSERT_EQ(h.sizes(), ref.sizes()) << name;
    EXPECT_TRUE(trident::testing::all_close(h, ref, /*rtol=*/0, /*atol=*/1e-11 * scale)) << name << " at tp = " << tp() << ", |H v| up to " << scale;
  }
}

TEST(TpHigherOrder, GPT2HessianVectorProductIsTheSerialOne) {
  expect_hvp_matches_serial<GPT2LMHeadModel>(gpt2_config(tp_layers()), gpt2_config(nullptr));
}
TEST(TpHigherOrder, GPT2WithSequenceParallelismHessianVectorProductIsTheSerialOne) {
  expect_hvp_matches_serial<GPT2LMHeadModel>(gpt2_config(sp_layers()), gpt2_config(nullptr));
}
TEST(TpHigherOrder, BertHessianVectorProductIsTheSerialOne) {
  expect_hvp_matches_serial<BertForPreTraining>(bert_config(tp_layers()), bert_config(nullptr));
}

}  // namespace
