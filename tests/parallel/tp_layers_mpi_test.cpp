// Tensor-parallel building blocks against their serial counterparts, under mpirun -np 2 and 4
// (tp = the world size). Every rank builds the serial layer itself from the same seeds, so the
// expected values never come from another rank: forward and backward of each split layer must
// equal the serial layer's on the same full weights (f64, relative 1e-10), shards compared with
// the matching slice of the serial tensor, and gradients of split parameters gathered whole.
// With sequence parallelism the blocks run on this rank's positions, cut from and gathered back
// into the full [B, T, C] by the test (TpSequenceParallelLayers).
#include <gtest/gtest.h>

#include "models/bert.h"
#include "models/gpt2.h"
#include "parallel/tensor_parallel/checkpoint.h"
#include "parallel/tensor_parallel/cross_entropy.h"
#include "parallel/tensor_parallel/layers.h"
#include "parallel/tensor_parallel/sequence_parallel.h"
#include "parallel/tensor_parallel/tp_layers.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel;
using namespace trident::parallel::tp;
using trident::testing::all_close;
using trident::testing::error_message;

namespace {

constexpr double kRtol = 1e-10, kAtol = 1e-12;

const CommPtr& tp_group() {
  static const Mesh mesh(MeshShape{.dp = 1, .pp = 1, .tp = comm::Communicator::world()->size()});
  return mesh.group_ptr(Axis::TP);
}
int tp() { return tp_group()->size(); }
int rank() { return tp_group()->rank(); }

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, kF64, &g);
}
Tensor leaf(const Tensor& t) { return t.detach().clone().set_requires_grad(); }

models::LinearSpec spec(int64_t in, int64_t out, models::LinearKind kind, models::WeightLayout layout, Generator* gen,
                        int64_t parts = 1) {
  models::LinearSpec s;
  s.name = "test";
  s.in_features = in;
  s.out_features = out;
  s.kind = kind;
  s.layout = layout;
  s.fused_parts = parts;
  s.dtype = kF64;
  s.init_weight = [gen](const Tensor& w) { nn::init::normal_(w, 0.0, 1.0, gen); };
  return s;
}

// Every parameter gradient of `par` (split ones gathered) equals `ser`'s, by name.
void expect_same_grads(nn::Module& ser, nn::Module& par) {
  const auto shards = sharded_parameters(par);
  std::map<std::string, Tensor> serial;
  for (const auto& [n, t] : ser.named_parameters()) serial[n] = t;
  for (const auto& [n, t] : par.named_parameters()) {
    ASSERT_TRUE(serial.count(n)) << n;
    ASSERT_TRUE(t.grad().defined()) << n;
    const auto it = shards.find(n);
    const Tensor g = it == shards.end() ? t.grad() : gather_full(t.grad(), it->second, *tp_group());
    EXPECT_TRUE(all_close(g, serial[n].grad(), kRtol, kAtol)) << "gradient of " << n;
  }
}

// ---- the four mappings, backward checked with exact per-rank sums ----

TEST(TpMappings, CopyToRegionAllReducesTheGradient) {
  const Tensor x = leaf(full({3}, 1.0 + rank(), kF64));
  const Tensor y = copy_to_region(x, tp_group());
  EXPECT_TRUE(all_close(y, x));  // identity forward
  sum(mul(y, static_cast<double>(rank() + 1))).backward();
  // d/dx of rank r's (r + 1) y, summed over ranks: 1 + 2 + ... + tp.
  EXPECT_TRUE(all_close(x.grad(), full({3}, tp() * (tp() + 1) / 2.0, kF64)));
}

TEST(TpMappings, ReduceFromRegionSumsForwardAndPassesTheGradient) {
  const Tensor x = leaf(full({2, 2}, 1.0 + rank(), kF64));
  const Tensor y = reduce_from_region(x, tp_group());
  EXPECT_TRUE(all_close(y, full({2, 2}, tp() * (tp() + 1) / 2.0, kF64)));
  sum(mul(y, static_cast<double>(rank() + 1))).backward();
  EXPECT_TRUE(all_close(x.grad(), full({2, 2}, rank() + 1.0, kF64)));  // identity backward
}

TEST(TpMappings, ScatterToRegionKeepsTheSliceAndGathersTheGradient) {
  const Tensor x = leaf(view(arange(0.0, 2.0 * 2 * tp(), 1.0, kF64), {2, 2 * tp()}));
  const Tensor y = scatter_to_region(x, tp_group(), -1);  // [2, 2]: columns 2r, 2r + 1
  const std::vector<double> v = y.to_vector<double>();
  const double r2 = 2.0 * rank(), w = 2.0 * tp();
  EXPECT_EQ(v, (std::vector<double>{r2, r2 + 1, w + r2, w + r2 + 1}));
  // Rank r's gradient is r + 1 on its slice: the gathered gradient of column c is c / 2 + 1.
  sum(mul(y, static_cast<double>(rank() + 1))).backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  for (int64_t c = 0; c < 2 * tp(); ++c) {
    EXPECT_EQ(g[static_cast<size_t>(c)], static_cast<double>(c / 2 + 1));
    EXPECT_EQ(g[static_cast<size_t>(2 * tp() + c)], static_cast<double>(c / 2 + 1));
  }
}

TEST(TpMappings, GatherFromRegionGathersAndSlicesTheGradient) {
  const Tensor x = leaf(full({2, 1}, 10.0 * rank(), kF64));
  const Tensor y = gather_from_region(x, tp_group(), 1);  // [2, tp]: column r is 10 r
  ASSERT_EQ(y.sizes(), Shape({2, tp()}));
  for (int r = 0; r < tp(); ++r) EXPECT_EQ(y.to_vector<double>()[static_cast<size_t>(r)], 10.0 * r);
  sum(mul(y, arange(1.0, tp() + 1.0, 1.0, kF64))).backward();  // column r weighted r + 1
  EXPECT_TRUE(all_close(x.grad(), full({2, 1}, rank() + 1.0, kF64)));
}

TEST(TpMappings, SequenceRegionPairAllGathersAndReduceScatters) {
  const Tensor x = leaf(full({1, 2, 3}, 1.0 + rank(), kF64));
  const Tensor y = gather_from_sequence_region(x, tp_group(), 1);  // [1, 2 tp, 3]
  ASSERT_EQ(y.sizes(), Shape({1, 2 * tp(), 3}));
  sum(mul(y, static_cast<double>(rank() + 1))).backward();
  // Reduce-scatter of the per-rank gradients (r + 1): every slot gets 1 + ... + tp.
  EXPECT_TRUE(all_close(x.grad(), full({1, 2, 3}, tp() * (tp() + 1) / 2.0, kF64)));
  const Tensor z = leaf(full({2 * tp(), 2}, 1.0 + rank(), kF64));
  const Tensor s = reduce_scatter_to_sequence_region(z, tp_group(), 0);
  EXPECT_TRUE(all_close(s, full({2, 2}, tp() * (tp() + 1) / 2.0, kF64)));
  sum(mul(s, static_cast<double>(rank() + 1))).backward();
  // All-gather: rows of slot r get r + 1.
  std::vector<double> expect;
  for (int r = 0; r < tp(); ++r) expect.insert(expect.end(), 4, r + 1.0);
  EXPECT_TRUE(all_close(z.grad(), from_vector<double>(expect, {2 * tp(), 2})));
}

// ---- layers ----

TEST(TpLayers, ColumnParallelLinearMatchesSerial) {
  for (const auto layout : {models::WeightLayout::OutIn, models::WeightLayout::InOut}) {
    for (const int64_t parts : {int64_t{1}, int64_t{3}}) {
      const int64_t in = 5, out = 2 * 3 * tp();
      Generator g1(7), g2(7);
      auto s = spec(in, out, models::LinearKind::Column, layout, &g1, parts);
      models::DenseLayer serial(s);
      s.init_weight = [&g2](const Tensor& w) { nn::init::normal_(w, 0.0, 1.0, &g2); };
      ColumnParallelLinear par(s, tp_group());
      {
        NoGradGuard ng;
        copy_(serial.bias, rnd({out}, 3));
        copy_(par.bias, shard_of(serial.bias, par.shards().at("bias"), rank(), tp()));
      }
      const Tensor x = rnd({2, 3, in}, 11), R = rnd({2, 3, out}, 12);
      const Tensor xs = leaf(x), xp = leaf(x);
      const Tensor ys = serial.forward(xs), yp = par.forward(xp);
      const ParamShard cols{2, out, out, parts};
      EXPECT_TRUE(all_close(yp, shard_of(ys.detach(), cols, rank(), tp()), kRtol, kAtol));
      sum(mul(ys, R)).backward();
      sum(mul(yp, shard_of(R, cols, rank(), tp()))).backward();
      EXPECT_TRUE(all_close(xp.grad(), xs.grad(), kRtol, kAtol));
      expect_same_grads(serial, par);
    }
  }
  // Gathered output: the whole serial output on every rank.
  Generator g1(9), g2(9);
  auto s = spec(4, 2 * tp(), models::LinearKind::Column, models::WeightLayout::OutIn, &g1);
  models::DenseLayer serial(s);
  s.init_weight = [&g2](const Tensor& w) { nn::init::normal_(w, 0.0, 1.0, &g2); };
  ColumnParallelLinear par(s, tp_group(), /*gather_output=*/true);
  const Tensor x = rnd({3, 4}, 5), xs = leaf(x), xp = leaf(x), R = rnd({3, 2 * tp()}, 6);
  const Tensor ys = serial.forward(xs), yp = par.forward(xp);
  EXPECT_TRUE(all_close(yp, ys, kRtol, kAtol));
  sum(mul(ys, R)).backward();
  sum(mul(yp, R)).backward();
  EXPECT_TRUE(all_close(xp.grad(), xs.grad(), kRtol, kAtol));
  expect_same_grads(serial, par);
}

TEST(TpLayers, RowParallelLinearMatchesSerial) {
  for (const auto layout : {models::WeightLayout::OutIn, models::WeightLayout::InOut}) {
    const int64_t in = 3 * tp(), out = 5;
    Generator g1(21), g2(21);
    auto s = spec(in, out, models::LinearKind::Row, layout, &g1);
    models::DenseLayer serial(s);
    s.init_weight = [&g2](const Tensor& w) { nn::init::normal_(w, 0.0, 1.0, &g2); };
    RowParallelLinear par(s, tp_group());
    {
      NoGradGuard ng;
      copy_(serial.bias, rnd({out}, 4));
      copy_(par.bias, serial.bias);
    }
    const Tensor x = rnd({2, 3, in}, 13), R = rnd({2, 3, out}, 14);
    const ParamShard cols{2, in, in, 1};
    const Tensor xs = leaf(x), xp = leaf(shard_of(x, cols, rank(), tp()));
    const Tensor ys = serial.forward(xs), yp = par.forward(xp);
    EXPECT_TRUE(all_close(yp, ys, kRtol, kAtol));
    sum(mul(ys, R)).backward();
    sum(mul(yp, R)).backward();
    EXPECT_TRUE(all_close(xp.grad(), shard_of(xs.grad(), cols, rank(), tp()), kRtol, kAtol));
    expect_same_grads(serial, par);
  }
}

TEST(TpLayers, VocabParallelEmbeddingMatchesSerialWithPaddingAndPaddingIdx) {
  // 37 rows: not a multiple of tp; padded to a multiple of 4 x tp.
  models::EmbeddingSpec e;
  e.name = "wte";
  e.num_embeddings = 37;
  e.embedding_dim = 3;
  e.padding_idx = 5;
  e.dtype = kF64;
  Generator g1(31), g2(31);
  e.init_weight = [&g1](const Tensor& w) { nn::init::normal_(w, 0.0, 1.0, &g1); };
  auto serial = models::serial_layers()->vocab_embedding(e);
  e.init_weight = [&g2](const Tensor& w) { nn::init::normal_(w, 0.0, 1.0, &g2); };
  VocabParallelEmbedding par(e, tp_group(), 4);
  EXPECT_EQ(par.padded_rows, padded_vocab_rows(37, 4, tp()));
  EXPECT_EQ(par.padded_rows % (4 * tp()), 0);
  const Tensor ids = from_vector<int64_t>({0, 36, 5, 17, 9, 5, 30, 1}, {2, 4});
  const Tensor ys = serial->forward(ids), yp = par.forward(ids);
  EXPECT_TRUE(all_close(yp, ys, kRtol, kAtol));
  const Tensor R = rnd({2, 4, 3}, 8);
  sum(mul(ys, R)).backward();
  sum(mul(yp, R)).backward();
  expect_same_grads(*serial, par);
}

TEST(TpLayers, VocabParallelCrossEntropyMatchesSerialWithoutGatheringLogits) {
  const int64_t N = 6, V = 4 * tp();
  const Tensor logits = rnd({N, V}, 41);
  const Tensor targets = from_vector<int64_t>({0, V - 1, -100, 3, V / 2, 1}, {N});
  const ParamShard cols{1, V, V, 1};
  for (const Reduction red : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    const Tensor ls = leaf(logits), lp = leaf(shard_of(logits, cols, rank(), tp()));
    CrossEntropyOptions o;
    o.reduction = red;
    const Tensor serial = cross_entropy(ls, targets, o);
    tp_group()->reset_stats();
    const Tensor par = vocab_parallel_cross_entropy(lp, targets, tp_group(), -100, red);
    // Three all-reduces of [N] (max, target logit, sum of exponentials); no gather.
    EXPECT_EQ(tp_group()->stats()[comm::CommOp::AllReduce].calls, tp() > 1 ? 3 : 0);
    EXPECT_EQ(tp_group()->stats()[comm::CommOp::AllGather].calls, 0);
    EXPECT_TRUE(all_close(par, serial, kRtol, kAtol));
    const Tensor w = red == Reduction::None ? rnd({N}, 42) : scalar_tensor(1.7, kF64);
    sum(mul(serial, w)).backward();
    sum(mul(par, w)).backward();
    EXPECT_TRUE(all_close(lp.grad(), shard_of(ls.grad(), cols, rank(), tp()), kRtol, kAtol));
  }
  EXPECT_NE(error_message([&] { vocab_parallel_cross_entropy(logits, from_vector<int64_t>({0, 1, 2, 3, 4, 4 * V}, {N}), tp_group()); }
                          ).find("outside [0"),
            std::string::npos);
}

TEST(TpLayers, TiedLogitsWithBiasAndPaddedVocabularyMatchSerial) {
  // 11 rows in the model's table, 10 of them predicted (one padding row of the model's own),
  // split into shards padded to a multiple of 2 x tp.
  const int64_t rows = 11, V = 10, C = 4;
  auto f = std::make_shared<TensorParallelLayers>(tp_group(), TensorParallelOptions{.vocab_pad_multiple = 2});
  models::EmbeddingSpec e;
  e.name = "wte";
  e.num_embeddings = rows;
  e.embedding_dim = C;
  e.dtype = kF64;
  Generator g1(51), g2(51);
  e.init_weight = [&g1](const Tensor& w) { nn::init::normal_(w, 0.0, 1.0, &g1); };
  auto serial = models::serial_layers()->vocab_embedding(e);
  e.init_weight = [&g2](const Tensor& w) { nn::init::normal_(w, 0.0, 1.0, &g2); };
  auto par = f->vocab_embedding(e);
  const Tensor ws = serial->named_parameters()[0].second, wp = par->named_parameters()[0].second;
  const Tensor h = rnd({5, C}, 52), bias = rnd({rows}, 53);
  const Tensor hs = leaf(h), hp = leaf(h), bs = leaf(bias), bp = leaf(bias);
  const Tensor targets = from_vector<int64_t>({9, 0, 4, -100, 7}, {5});
  const Tensor ls = models::serial_layers()->vocab_cross_entropy(models::serial_layers()->tied_logits(hs, ws, bs, V), targets, -100,
                                                                Reduction::Mean);
  const Tensor logits = f->tied_logits(hp, wp, bp, V);
  const Tensor lp = f->vocab_cross_entropy(logits, targets, -100, Reduction::Mean);
  EXPECT_TRUE(all_close(lp, ls, kRtol, kAtol));
  EXPECT_TRUE(all_close(f->full_logits(logits.detach()), models::serial_layers()->tied_logits(h, ws.detach(), bias, V), kRtol, kAtol));
  ls.backward();
  lp.backward();
  EXPECT_TRUE(all_close(hp.grad(), hs.grad(), kRtol, kAtol));
  EXPECT_TRUE(all_close(bp.grad(), bs.grad(), kRtol, kAtol));  // whole on every rank
  expect_same_grads(*serial, *par);
}

// ---- the models' attention and MLP built by the tensor-parallel factory ----

models::GPT2Config gpt2_block_config(std::shared_ptr<const models::LayerFactory> f) {
  models::GPT2Config c = models::GPT2Config::preset("tiny");
  c.n_layer = 1;
  c.n_head = 2 * tp();
  c.n_embd = 4 * c.n_head;
  c.n_positions = 8;
  c.vocab_size = 50;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  c.dtype = kF64;
  c.layers = std::move(f);
  return c;
}

TEST(TpLayers, GPT2AttentionAndMLPMatchSerial) {
  auto f = std::make_shared<TensorParallelLayers>(tp_group());
  Generator g1(61), g2(61);
  models::GPT2Block serial(gpt2_block_config(nullptr), &g1), par(gpt2_block_config(f), &g2);
  const Tensor x = rnd({2, 5, gpt2_block_config(nullptr).n_embd}, 62), R = rnd({2, 5, gpt2_block_config(nullptr).n_embd}, 63);
  const Tensor xs = leaf(x), xp = leaf(x);
  tp_group()->reset_stats();
  const Tensor ys = serial.forward(xs), yp = par.forward(xp);
  EXPECT_TRUE(all_close(yp, ys, kRtol, kAtol));
  sum(mul(ys, R)).backward();
  sum(mul(yp, R)).backward();
  EXPECT_TRUE(all_close(xp.grad(), xs.grad(), kRtol, kAtol));
  expect_same_grads(serial, par);
  // Megatron's count: two all-reduces of [B, T, C] forward (attention and MLP outputs) and two
  // backward (the gradients of their inputs).
  const auto& st = tp_group()->stats()[comm::CommOp::AllReduce];
  EXPECT_EQ(st.calls, tp() > 1 ? 4 : 0);
  EXPECT_EQ(st.bytes, tp() > 1 ? 4 * x.numel() * 8 : 0);
}

TEST(TpLayers, BertLayerMatchesSerial) {
  auto make = [](std::shared_ptr<const models::LayerFactory> f) {
    models::BertConfig c;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2 * tp();
    c.hidden_size = 4 * c.num_attention_heads;
    c.intermediate_size = 2 * c.hidden_size;
    c.vocab_size = 30;
    c.max_position_embeddings = 8;
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
    c.dtype = kF64;
    c.layers = std::move(f);
    return c;
  };
  auto f = std::make_shared<TensorParallelLayers>(tp_group());
  Generator g1(71), g2(71);
  models::BertLayer serial(make(nullptr), &g1), par(make(f), &g2);
  const int64_t H = make(nullptr).hidden_size;
  const Tensor x = rnd({2, 5, H}, 72), R = rnd({2, 5, H}, 73);
  const Tensor mask = models::attention_mask_for_keys(from_vector<int64_t>({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {2, 5}));
  const Tensor xs = leaf(x), xp = leaf(x);
  tp_group()->reset_stats();
  const Tensor ys = serial.forward(xs, mask), yp = par.forward(xp, mask);
  EXPECT_TRUE(all_close(yp, ys, kRtol, kAtol));
  sum(mul(ys, R)).backward();
  sum(mul(yp, R)).backward();
  EXPECT_TRUE(all_close(xp.grad(), xs.grad(), kRtol, kAtol));
  expect_same_grads(serial, par);
  // query, key and value enter the split region once: 2 + 2 all-reduces.
  EXPECT_EQ(tp_group()->stats()[comm::CommOp::AllReduce].calls, tp() > 1 ? 4 : 0);
}

TEST(TpLayers, HeadsNotDividingByTpFailOnEveryRank) {
  auto f = std::make_shared<TensorParallelLayers>(tp_group());
  models::GPT2Config c = gpt2_block_config(f);
  c.n_head = tp() + 1;  // never divisible by tp > 1
  c.n_embd = 4 * c.n_head;
  Generator g(1);
  const std::string msg = error_message([&] { models::GPT2Block b(c, &g); });
  EXPECT_NE(msg.find("n_head " + std::to_string(tp() + 1) + " does not divide by the " + std::to_string(tp())), std::string::npos)
      << msg;
}

// ---- sequence parallelism (NOTE [Sequence parallelism]) ----

std::shared_ptr<TensorParallelLayers> sp_factory() {
  return std::make_shared<TensorParallelLayers>(tp_group(), TensorParallelOptions{.sequence_parallel = true});
}

// The block on this rank's positions of x: x cut to them, the block's output gathered back.
template <typename F>
Tensor on_shards(const Tensor& x, F&& block) {
  return gather_from_sequence(block(scatter_to_sequence(x, tp_group())), tp_group());
}

TEST(TpSequenceParallelLayers, GPT2BlockOnSequenceShardsMatchesSerial) {
  Generator g1(61), g2(61);
  models::GPT2Block serial(gpt2_block_config(nullptr), &g1), par(gpt2_block_config(sp_factory()), &g2);
  const int64_t C = gpt2_block_config(nullptr).n_embd, T = 2 * tp();
  const Tensor x = rnd({2, T, C}, 62), R = rnd({2, T, C}, 63);
  const Tensor xs = leaf(x), xp = leaf(x);
  tp_group()->reset_stats();
  const Tensor ys = serial.forward(xs), yp = on_shards(xp, [&](const Tensor& h) { return par.forward(h); });
  EXPECT_TRUE(all_close(yp, ys, kRtol, kAtol));
  sum(mul(ys, R)).backward();
  sum(mul(yp, R)).backward();
  const comm::CommStats st = tp_group()->stats();  // before the gathers of the checks below
  EXPECT_TRUE(all_close(xp.grad(), xs.grad(), kRtol, kAtol));
  expect_same_grads(serial, par);  // the LayerNorms' and row biases' gradients all-reduced
  // Megatron's 4 all-reduces of [B, T, C] as 4 all-gathers and 4 reduce-scatters (the block's 2
  // + 2 each way); the test's own cut and gather add one all-gather each way.
  EXPECT_EQ(st[comm::CommOp::ReduceScatter].calls, 4);
  EXPECT_EQ(st[comm::CommOp::ReduceScatter].bytes, 4 * x.numel() * 8);
  EXPECT_EQ(st[comm::CommOp::AllGather].calls, 4 + 2);
  EXPECT_EQ(st[comm::CommOp::AllGather].bytes, (4 + 2) * x.numel() * 8);
  // ln_1, ln_2 (weight, bias) and the two row biases: [C] each.
  EXPECT_EQ(st[comm::CommOp::AllReduce].calls, 6);
  EXPECT_EQ(st[comm::CommOp::AllReduce].bytes, 6 * C * 8);
}

TEST(TpSequenceParallelLayers, BertLayerOnSequenceShardsMatchesSerial) {
  auto make = [](std::shared_ptr<const models::LayerFactory> f) {
    models::BertConfig c;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2 * tp();
    c.hidden_size = 4 * c.num_attention_heads;
    c.intermediate_size = 2 * c.hidden_size;
    c.vocab_size = 30;
    c.max_position_embeddings = 8;
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
    c.dtype = kF64;
    c.layers = std::move(f);
    return c;
  };
  Generator g1(71), g2(71);
  models::BertLayer serial(make(nullptr), &g1), par(make(sp_factory()), &g2);
  const int64_t H = make(nullptr).hidden_size, T = 2 * tp();
  const Tensor x = rnd({2, T, H}, 72), R = rnd({2, T, H}, 73);
  std::vector<int64_t> keep(static_cast<size_t>(2 * T), 1);
  keep.back() = keep[keep.size() - 2] = 0;  // padding at the end of the second sequence
  const Tensor mask = models::attention_mask_for_keys(from_vector<int64_t>(keep, {2, T}));
  const Tensor xs = leaf(x), xp = leaf(x);
  const Tensor ys = serial.forward(xs, mask), yp = on_shards(xp, [&](const Tensor& h) { return par.forward(h, mask); });
  EXPECT_TRUE(all_close(yp, ys, kRtol, kAtol));
  sum(mul(ys, R)).backward();
  sum(mul(yp, R)).backward();
  EXPECT_TRUE(all_close(xp.grad(), xs.grad(), kRtol, kAtol));
  expect_same_grads(serial, par);
}

TEST(TpSequenceParallelLayers, ShapesThatDoNotSplitFailClearly) {
  const std::string t = error_message([] { scatter_to_sequence(rnd({2, 2 * tp() + 1, 4}, 1), tp_group()); });
  EXPECT_NE(t.find("sequence length T = " + std::to_string(2 * tp() + 1)), std::string::npos) << t;
  const std::string d = error_message([] { scatter_to_sequence(rnd({2, 4}, 1), tp_group()); });
  EXPECT_NE(d.find("hidden states [B, T, C], got shape [2, 4]"), std::string::npos) << d;
}

}  // namespace
