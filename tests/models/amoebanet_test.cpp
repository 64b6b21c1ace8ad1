#include "models/amoebanet.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "models/amoebanet_ops.h"
#include "models/amoebanet_layered.h"
#include "models_test_util.h"

using namespace trident;
using namespace trident::models;
using namespace trident::testing;
using amoebanet::Chw;
using autograd::TensorList;

namespace {

AmoebaNetConfig config(const std::string& name, int64_t classes, int64_t image, bool aux = false) {
  AmoebaNetConfig c = AmoebaNetConfig::from_name(name, classes, image);
  c.aux_head = aux;
  c.validate();
  return c;
}

// A tiny network on CIFAR-sized images: stem 30x30, stacks at 30 (no normal cell before the
// first reduction when L = 2), 15 and 8.
AmoebaNetConfig tiny(bool aux = false, int64_t cells = 2) {
  AmoebaNetConfig c = config("amoebanet-d(" + std::to_string(cells) + ",8)", 10, 32, aux);
  c.stem_filters = 8;
  return c;
}

// Rounds n to `digits` significant digits, as the paper prints counts (82M, 1.05B).
double round_sig(double n, int digits) {
  const double scale = std::pow(10.0, digits - 1 - static_cast<int>(std::floor(std::log10(n))));
  return std::round(n * scale) / scale;
}

Tensor images(int64_t n, int64_t c, int64_t size, uint64_t seed, DType dtype = kF32) {
  Generator g(seed);
  return randn({n, c, size, size}, dtype, &g);
}

int64_t module_params(const nn::Module& m) { return m.num_parameters(); }

}  // namespace

// GPipe (Huang et al. 2019), Table 1: AmoebaNet-D (L, D) on 1000 classes. The exact values were
// computed by an independent Python count written from the TensorFlow TPU reference
// (network_utils.py, model_builder.py; /tmp scratch, not code under test), which also reproduces
// torchgpipe's published 81.5M / 319.0M / 542.7M / 1.06B / 1.84B when given torchgpipe's
// simplified cells. The reference counts its trainable variables in training mode, which
// includes the auxiliary head (aux_scaling 0.4) at 224x224.
TEST(AmoebaNet, ParameterCountsReproduceGPipeTable1) {
  struct Row {
    int64_t L, D;
    int64_t with_aux, without_aux;
    double table;  // GPipe's printed value
    int digits;    // its significant digits
  };
  const Row rows[] = {
      {18, 208, 81781529, 81137437, 82e6, 2},
      {18, 416, 318270652, 317541696, 318e6, 3},
      {18, 544, 540977420, 540196240, 542e6, 3},
      {36, 544, 1054074956, 1053293776, 1.05e9, 3},
      {72, 512, 1843378372, 1842610248, 1.8e9, 2},
  };
  for (const Row& r : rows) {
    const std::string name = "amoebanet-d(" + std::to_string(r.L) + "," + std::to_string(r.D) + ")";
    const int64_t with_aux = amoebanet_num_parameters(config(name, 1000, 224, true));
    const int64_t without_aux = amoebanet_num_parameters(config(name, 1000, 224, false));
    EXPECT_EQ(with_aux, r.with_aux) << name;
    EXPECT_EQ(without_aux, r.without_aux) << name;
    // (18, 544) is the one entry the reference does not reach: 541.0M with the auxiliary head
    // (540.2M without) against the printed 542M. No variant of the reference we tried (1001
    // classes, 299/331/480 inputs, counting batch-norm statistics) matches all five entries;
    // torchgpipe's 542.7M does not round to 542M either.
    if (r.D == 544 && r.L == 18)
      EXPECT_EQ(round_sig(static_cast<double>(with_aux), r.digits), 541e6);
    else
      EXPECT_EQ(round_sig(static_cast<double>(with_aux), r.digits), r.table) << name;
  }
}

// The paper's ImageNet result: AmoebaNet-B(18, 512) at 480x480, 557M parameters (without the
// auxiliary head; with it 559.1M). Exact values from the same independent Python count.
TEST(AmoebaNet, AmoebaNetB18x512Has557MParameters) {
  const int64_t n = amoebanet_num_parameters(config("amoebanet-b(18,512)", 1000, 480));
  EXPECT_EQ(n, 557277864);
  EXPECT_EQ(round_sig(static_cast<double>(n), 3), 557e6);
  EXPECT_EQ(amoebanet_num_parameters(config("AmoebaNet-B(18, 512)", 1000, 480, true)), 559063693);
}

// NOTE [AmoebaNet dry build]: the counting build and the real one agree exactly, network and
// layer by layer, over genotypes, stems, odd sizes and the auxiliary head.
TEST(AmoebaNet, CountOnlyBuildEqualsRealModel) {
  std::vector<AmoebaNetConfig> configs;
  configs.push_back(tiny());
  configs.push_back(tiny(true, 3));
  configs.push_back(config("amoebanet-b(3,16)", 10, 28));
  configs.push_back(config("amoebanet-d(4,8)", 7, 67));    // ImageNet stem, odd sizes: 33, 17, 9, 9, 5, 3
  configs.push_back(config("amoebanet-b(3,8)", 5, 96, true));
  AmoebaNetConfig gray = config("amoebanet-d(3,16)", 10, 28, true);
  gray.in_channels = 1;
  configs.push_back(gray);
  for (const AmoebaNetConfig& c : configs) {
    SCOPED_TRACE(c.name() + " at " + std::to_string(c.image_size));
    const AmoebaNetPlan plan = amoebanet_plan(c);
    AmoebaNet model(c);
    EXPECT_EQ(plan.parameters, model.num_parameters());
    ASSERT_EQ(plan.layers.size(), model.size());
    for (size_t i = 0; i < model.size(); ++i) {
      EXPECT_EQ(plan.layers[i].name, model.layer_info()[i].name);
      EXPECT_EQ(plan.layers[i].parameters, module_params(*model.layers()[i])) << plan.layers[i].name;
      EXPECT_EQ(plan.layers[i].activation_elements, model.layer_info()[i].activation_elements);
      EXPECT_EQ(plan.layers[i].multiply_adds, model.layer_info()[i].multiply_adds);
    }
  }
}

// NOTE [AmoebaNet multiply-adds] by hand for the layers simple enough to count on paper: the
// small stem's 3x3 'VALID' convolution of 3 to 32 channels on 16x16 images gives 14x14 outputs
// of 3 x 9 products each; the classifier's linear layer in_channels x classes. The counting and
// the materializing builds agree, and the plan's total is the layers' sum. (The cells are
// checked against PyTorch's convolutions in tests/models/torch_reference_test.cpp.)
TEST(AmoebaNet, MultiplyAddsOfTheStemAndTheClassifierByHand) {
  AmoebaNetConfig c = config("amoebanet-d(3,16)", 10, 16);
  c.stem = AmoebaNetConfig::Stem::Small;
  const AmoebaNetPlan plan = amoebanet_plan(c);
  ASSERT_EQ(plan.layers.front().name, "stem");
  EXPECT_EQ(plan.layers.front().multiply_adds, 14 * 14 * 32 * 3 * 9);
  const AmoebaLayerInfo& head = plan.layers.back();
  ASSERT_EQ(head.name, "classifier");
  const int64_t width = plan.layers[plan.layers.size() - 2].out.c;
  EXPECT_EQ(head.multiply_adds, width * 10);
  int64_t total = 0;
  for (const AmoebaLayerInfo& l : plan.layers) {
    EXPECT_GT(l.multiply_adds, 0) << l.name;
    total += l.multiply_adds;
  }
  EXPECT_EQ(plan.multiply_adds, total);
  AmoebaNet model(c);
  for (size_t i = 0; i < model.size(); ++i) EXPECT_EQ(plan.layers[i].multiply_adds, model.layer_info()[i].multiply_adds);
}

// Every layer's output shape, for each input size, against hand-computed sizes: the stem conv
// is 3x3 'VALID' (stride 2 for ImageNet, 1 for the small stem), every reduction maps n to
// ceil(n / 2), a normal cell of F filters outputs 4F channels, a reduction cell 3F.
TEST(AmoebaNet, ShapesThroughTheNetworkForEachInputSize) {
  struct Case {
    int64_t image, in_channels;
    std::vector<int64_t> sizes;  // stem, stem cells (ImageNet), stack 1, 2, 3
    int64_t stem_stride = 0;
  };
  const Case cases[] = {
      {224, 3, {111, 56, 28, 28, 14, 7}},
      {331, 3, {165, 83, 42, 42, 21, 11}},
      {480, 3, {239, 120, 60, 60, 30, 15}},
      {32, 3, {30, 30, 15, 8}},
      {28, 1, {26, 26, 13, 7}},
      {28, 1, {13, 13, 7, 4}, 2},  // a small stem of stride 2: (28 - 3) / 2 + 1 = 13
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.image);
    AmoebaNetConfig c = config("amoebanet-d(3,8)", 10, k.image);
    c.in_channels = k.in_channels;
    c.stem_filters = 4;
    c.stem_stride = k.stem_stride;
    const bool imagenet = k.image >= 64;
    // Expected (C, H) per layer. D = 8: stem cells 2 and 4 filters (3 states out), stacks of
    // 8, 16, 32 filters (normal: 4 states, reduction: 3).
    std::vector<std::pair<int64_t, int64_t>> want{{4, k.sizes[0]}};
    size_t s = 1;
    if (imagenet) {
      want.push_back({3 * 2, k.sizes[1]});
      want.push_back({3 * 4, k.sizes[2]});
      s = 3;
    }
    want.push_back({4 * 8, k.sizes[s]});        // cell_0
    want.push_back({3 * 16, k.sizes[s + 1]});   // reduction_cell_0
    want.push_back({4 * 16, k.sizes[s + 1]});   // cell_1
    want.push_back({3 * 32, k.sizes[s + 2]});   // reduction_cell_1
    want.push_back({4 * 32, k.sizes[s + 2]});   // cell_2
    want.push_back({10, 1});                    // classifier
    AmoebaNet model(c);
    model.eval();
    ASSERT_EQ(model.size(), want.size());
    AmoebaState st{images(1, k.in_channels, k.image, 1), {}, {}};
    for (size_t i = 0; i < model.size(); ++i) {
      st = model.forward(st, i, i + 1);
      const Shape expected = i + 1 == model.size() ? Shape{1, want[i].first}
                                                   : Shape{1, want[i].first, want[i].second, want[i].second};
      EXPECT_EQ(st.cur.sizes(), expected) << model.layer_info()[i].name;
      EXPECT_EQ(model.layer_info()[i].out.c, want[i].first);
      if (i + 1 < model.size()) {
        EXPECT_EQ(model.layer_info()[i].out.h, want[i].second);
      }
    }
  }
}

// A pipeline cuts the ordered list anywhere: running it stage by stage, with each stage's input
// detached as another rank would receive it and the gradients sent back by hand, gives the
// whole model's logits, auxiliary logits and parameter gradients.
TEST(AmoebaNet, StageByStageEqualsWholeModel) {
  AmoebaNetConfig c = tiny(true, 3);
  c.dropout = 0;  // dropout would draw differently per run; everything else is deterministic
  AmoebaNet model(c);
  const Tensor x = images(4, 3, 32, 7);
  const Tensor labels = from_vector<int64_t>({1, 5, 9, 0}, {4});

  AmoebaState whole = model.forward_state(x);
  ASSERT_TRUE(whole.aux.defined());
  amoebanet_loss(whole, labels).backward();
  std::vector<Tensor> want_grads;
  for (const Tensor& p : model.parameters()) want_grads.push_back(p.grad().clone());
  const size_t n = model.size();

  for (const std::vector<size_t>& cuts : {std::vector<size_t>{0, 1, n}, std::vector<size_t>{0, 3, n},
                                          std::vector<size_t>{0, 2, 5, n}, std::vector<size_t>{0, n - 1, n}}) {
    SCOPED_TRACE(::testing::Message() << "cut at " << cuts[1]);
    model.zero_grad();
    std::vector<AmoebaState> inputs, outputs;
    AmoebaState s{x, {}, {}};
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      // What the next rank receives: detached copies that require grad.
      AmoebaState in;
      std::vector<Tensor> t = s.tensors();
      for (Tensor& e : t)
        if (e.defined() && k > 0) e = e.detach().set_requires_grad();
      in = AmoebaState::from_tensors(t);
      inputs.push_back(in);
      s = model.forward(in, cuts[k], cuts[k + 1]);
      outputs.push_back(s);
    }
    EXPECT_TRUE(all_close(s.cur, whole.cur, 0, 0));
    EXPECT_TRUE(all_close(s.aux, whole.aux, 0, 0));
    // Backward, last stage first, each stage sending the gradients of its inputs back.
    amoebanet_loss(outputs.back(), labels).backward();
    for (size_t k = outputs.size() - 1; k-- > 0;) {
      TensorList roots, grads;
      const std::vector<Tensor> out = outputs[k].tensors(), in = inputs[k + 1].tensors();
      for (size_t e = 0; e < out.size(); ++e)
        if (in[e].defined() && in[e].grad().defined()) {
          roots.push_back(out[e]);
          grads.push_back(in[e].grad());
        }
      ASSERT_FALSE(roots.empty());
      autograd::backward(roots, grads);
    }
    const std::vector<Tensor> params = model.parameters();
    for (size_t i = 0; i < params.size(); ++i)
      ASSERT_TRUE(all_close(params[i].grad(), want_grads[i], 1e-5, 1e-7)) << model.named_parameters()[i].first;
  }
}

// AmoebaNet-D(2, 8) learns one batch of 8 random 16x16 images with random labels.
TEST(AmoebaNet, OverfitsASingleBatch) {
  Generator g(3);
  AmoebaNetConfig c = config("amoebanet-d(2,8)", 10, 16);
  c.stem_filters = 8;
  c.dropout = 0;
  AmoebaNet model(c, &g);
  const Tensor x = images(8, 3, 16, 11);
  const Tensor labels = from_vector<int64_t>({3, 1, 4, 1, 5, 9, 2, 6}, {8});
  nn::optim::AdamOptions o;
  o.lr = 3e-3;
  nn::optim::Adam opt(model.parameters(), o);
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    Tensor loss = amoebanet_loss(model.forward_state(x), labels);
    loss.backward();
    opt.step();
    last = loss.item<double>();
    if (step == 0) first = last;
  }
  EXPECT_NEAR(first, std::log(10.0), 0.7) << "an untrained network is about uniform";
  EXPECT_LT(last, 0.05) << "first loss " << first;
  const std::vector<int64_t> pred = argmax(model.forward(x), 1).to_vector<int64_t>();
  EXPECT_EQ(pred, labels.to_vector<int64_t>());
}

// NOTE [Factorized reduction's second path]: the module (path 2 a stride-1 conv of the shifted
// map's stride-2 samples) computes the reference's formula, a 1x1 stride-2 conv of the map
// shifted by a pixel and zero-padded, in f64 for even and odd sizes, outputs and gradients.
TEST(AmoebaNet, FactorizedReductionIsTheShiftedStride2Formula) {
  for (const auto& [h, w] : {std::pair<int64_t, int64_t>{8, 10}, {7, 9}, {6, 5}}) {
    for (const bool pre_relu : {true, false}) {
      SCOPED_TRACE(::testing::Message() << h << "x" << w << (pre_relu ? " relu" : ""));
      Generator gen(9);
      amoebanet::LayerBuilder b({true, kF64, 1e-3, 0.1, &gen});
      auto fr = std::make_shared<amoebanet::FactorizedReduction>(b, Chw{6, h, w}, 8, pre_relu);
      const Tensor x0 = randn({3, 6, h, w}, kF64, &gen), gy = randn({3, 8, (h + 1) / 2, (w + 1) / 2}, kF64, &gen);
      Tensor xa = x0.clone().set_requires_grad(), xb = x0.clone().set_requires_grad();
      const Tensor ya = fr->forward(xa);
      const TensorList ga = autograd::grad({ya}, {xa, fr->path1_conv->weight, fr->path2_conv->weight}, {gy});
      const Tensor hb = pre_relu ? relu(xb) : xb;
      const Tensor yb = fr->bn->forward(cat({conv2d(hb, fr->path1_conv->weight, Tensor(), {2, 2}),
                                             conv2d(pad(hb, {-1, 1, -1, 1}), fr->path2_conv->weight, Tensor(), {2, 2})},
                                            1));
      const TensorList gb = autograd::grad({yb}, {xb, fr->path1_conv->weight, fr->path2_conv->weight}, {gy});
      EXPECT_TRUE(all_close(ya, yb, 1e-12, 1e-12));
      for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(all_close(ga[i], gb[i], 1e-12, 1e-12)) << "gradient " << i;
    }
  }
}

// Under bf16 autocast the relus in front of convolutions write bf16 directly
// (autocast::lower_relu, NOTE [Relu into a narrower dtype]): no f32 relu runs but the
// classifier's, and the step stays within bf16's accuracy of the f32 step.
TEST(AmoebaNet, Bf16StepFeedsItsConvolutionsBf16Relus) {
  Generator g(5);
  AmoebaNetConfig c = tiny(false, 3);
  c.dropout = 0;
  AmoebaNet model(c, &g);
  const Tensor x = images(6, 3, 32, 12);
  const Tensor labels = from_vector<int64_t>({3, 1, 4, 1, 5, 9}, {6});
  const auto step = [&](bool bf16) {
    model.zero_grad();
    Tensor loss;
    {
      autocast::Guard ac(kBF16, bf16);
      loss = amoebanet_loss(model.forward_state(x), labels);
    }
    loss.backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : model.parameters()) grads.push_back(p.grad().clone());
    return std::pair{loss.item<double>(), grads};
  };
  const auto [loss32, grads32] = step(false);
  profiler::start();
  const auto [loss16, grads16] = step(true);
  const profiler::Report report = profiler::stop();
  std::map<std::string, int64_t> calls;
  for (const profiler::OpTime& op : report.ops) calls[op.name] += op.calls;
  EXPECT_GT(calls["relu_to"], 10);
  EXPECT_EQ(calls["unary"], 1) << "only the classifier's relu runs in f32";
  EXPECT_EQ(calls["relu_to_backward"], calls["relu_to"]);
  EXPECT_NEAR(loss16, loss32, 1e-2 * loss32);
  // The classifier's gradients are within bf16's few roundings of the f32 step's. Deeper ones
  // are not, for either framework: each training-mode batch norm's backward projects the
  // gradient onto what the batch statistics leave, a cancellation that amplifies every bf16
  // rounding behind it (on this network and batch the stem conv's weight gradient differs by 48%
  // from f32's in Trident and in PyTorch 1.13's CPU autocast alike, all gradients together by
  // 33% and 36%); that the fused relus change none of it is the op tests' bit-for-bit check.
  const auto named = model.named_parameters();
  int classifier = 0;
  for (size_t i = 0; i < grads32.size(); ++i) {
    ASSERT_EQ(grads16[i].dtype(), kF32);
    for (const double v : grads16[i].to_vector<double>()) ASSERT_TRUE(std::isfinite(v)) << named[i].first;
    if (named[i].first.rfind("classifier.", 0) != 0) continue;
    EXPECT_LT(relative_error(grads16[i], grads32[i]), 1.0 / 32) << named[i].first;
    ++classifier;
  }
  EXPECT_EQ(classifier, 2);
}

namespace {

// Gradcheck of one cell in f64 with batch norm in training mode (batch statistics: the
// function the network computes while training). Every batch norm sees at least 2 x 3 x 3 = 18
// values per channel, and no pooling reads a relu output directly, so there are no ties and
// kinks are met with probability ~0 at eps 1e-6.
void gradcheck_cell(const CellGenotype& g, bool reduction, Chw cur, std::optional<Chw> prev, uint64_t seed,
                    bool second_order = false) {
  Generator gen(seed);
  amoebanet::LayerBuilder b({true, kF64, 1e-3, 0.1, &gen});
  auto cell = std::make_shared<amoebanet::Cell>(b, g, reduction, 4, cur, prev);
  TensorList inputs{rand_leaf({2, cur.c, cur.h, cur.w}, seed + 1)};
  if (prev) inputs.push_back(rand_leaf({2, prev->c, prev->h, prev->w}, seed + 2));
  const size_t n_state = inputs.size();
  for (const Tensor& p : cell->parameters()) inputs.push_back(p);
  auto fn = [&](const TensorList& in) {
    return cell->forward(AmoebaState{in[0], n_state > 1 ? in[1] : Tensor(), {}}).cur;
  };
  EXPECT_TRUE(grad_ok(second_order ? gradgradcheck(fn, inputs) : gradcheck(fn, inputs)));
}

}  // namespace

TEST(AmoebaNet, NormalCellPassesGradcheck) {
  // The previous state twice the size: the factorized reduction path.
  gradcheck_cell(amoebanet_d_genotype().normal, false, {6, 3, 3}, Chw{5, 6, 6}, 20);
  // Same size, other width: the 1x1 path; the first cell (no previous state) too.
  gradcheck_cell(amoebanet_d_genotype().normal, false, {6, 3, 3}, Chw{5, 3, 3}, 30);
  gradcheck_cell(amoebanet_b_genotype().normal, false, {6, 3, 3}, std::nullopt, 40);
}

// Second derivatives through the cells' separable and 1x7-7x1 convolutions, pooling, batch norm
// (training) and the factorized reduction (NOTE [Higher-order gradients]).
TEST(AmoebaNet, CellsPassGradgradcheck) {
  gradcheck_cell(amoebanet_d_genotype().normal, false, {6, 3, 3}, Chw{5, 6, 6}, 70, true);
  gradcheck_cell(amoebanet_d_genotype().reduction, true, {6, 6, 6}, Chw{5, 6, 6}, 80, true);
}

TEST(AmoebaNet, ReductionCellPassesGradcheck) {
  gradcheck_cell(amoebanet_d_genotype().reduction, true, {6, 6, 6}, Chw{5, 6, 6}, 50);
  gradcheck_cell(amoebanet_b_genotype().reduction, true, {6, 6, 6}, Chw{5, 12, 12}, 60);
}

// Parameter and buffer names are part of the checkpoint format: pinned here.
TEST(AmoebaNet, StateDictNamesAreStable) {
  AmoebaNet model(tiny());
  std::vector<std::string> layers;
  for (const auto& l : model.layer_info()) layers.push_back(l.name);
  EXPECT_EQ(layers, (std::vector<std::string>{"stem", "reduction_cell_0", "cell_0", "reduction_cell_1", "cell_1",
                                              "classifier"}));
  // The normal cell after a reduction: the previous state (30x30) takes the factorized path.
  std::vector<std::string> names;
  for (const auto& [name, t] : model.child("cell_0")->named_parameters()) names.push_back(name);
  const std::vector<std::string> expected{
      "prev_reduce.path1_conv.weight", "prev_reduce.path2_conv.weight", "prev_reduce.bn.weight", "prev_reduce.bn.bias",
      "base.conv.weight", "base.bn.weight", "base.bn.bias",
      // comb 0: 1x1 on state 1, max pool on state 1 (no parameters)
      "comb_0.left.conv.weight", "comb_0.left.bn.weight", "comb_0.left.bn.bias",
      // comb 1: identity on 1, 1x7-7x1 on 0
      "comb_1.right.pre.conv.weight", "comb_1.right.pre.bn.weight", "comb_1.right.pre.bn.bias",
      "comb_1.right.conv_1x7.conv.weight", "comb_1.right.conv_1x7.bn.weight", "comb_1.right.conv_1x7.bn.bias",
      "comb_1.right.conv_7x1.conv.weight", "comb_1.right.conv_7x1.bn.weight", "comb_1.right.conv_7x1.bn.bias",
      "comb_1.right.post.conv.weight", "comb_1.right.post.bn.weight", "comb_1.right.post.bn.bias",
      // comb 2: 1x1 on 0, 1x7-7x1 on 0
      "comb_2.left.conv.weight", "comb_2.left.bn.weight", "comb_2.left.bn.bias",
      "comb_2.right.pre.conv.weight", "comb_2.right.pre.bn.weight", "comb_2.right.pre.bn.bias",
      "comb_2.right.conv_1x7.conv.weight", "comb_2.right.conv_1x7.bn.weight", "comb_2.right.conv_1x7.bn.bias",
      "comb_2.right.conv_7x1.conv.weight", "comb_2.right.conv_7x1.bn.weight", "comb_2.right.conv_7x1.bn.bias",
      "comb_2.right.post.conv.weight", "comb_2.right.post.bn.weight", "comb_2.right.post.bn.bias",
      // comb 3: max pool and identity on 2; comb 4: average pool on 1, 1x1 on 5
      "comb_4.right.conv.weight", "comb_4.right.bn.weight", "comb_4.right.bn.bias"};
  EXPECT_EQ(names, expected);
  const auto sd = model.state_dict();
  for (const char* n : {"stem.conv.weight", "stem.bn.running_mean", "cell_0.base.bn.num_batches_tracked",
                        "reduction_cell_0.comb_1.right.conv_3x3.conv.weight", "classifier.fc.weight", "classifier.fc.bias"})
    EXPECT_TRUE(sd.count(n)) << n;
  EXPECT_EQ(sd.at("cell_0.comb_1.right.conv_1x7.conv.weight").sizes(), (Shape{4, 4, 1, 7}));
  EXPECT_EQ(sd.at("classifier.fc.weight").sizes(), (Shape{10, 4 * 32}));
  // AmoebaNet-B's separable convolutions.
  AmoebaNet b(config("amoebanet-b(2,8)", 10, 32));
  const auto sb = b.state_dict();
  for (const char* n : {"cell_0.comb_1.right.separable_1.depthwise.weight", "cell_0.comb_1.right.separable_2.pointwise.weight",
                        "cell_0.comb_1.right.separable_2.bn.weight", "reduction_cell_1.comb_2.left.separable_1.depthwise.weight"})
    EXPECT_TRUE(sb.count(n)) << n;
  EXPECT_EQ(sb.at("reduction_cell_1.comb_2.left.separable_1.depthwise.weight").sizes(), (Shape{32, 1, 5, 5}));
}

// The auxiliary head runs in training only and adds 0.4 of its cross-entropy to the loss.
TEST(AmoebaNet, AuxiliaryHeadTrainingOnly) {
  AmoebaNet model(tiny(true, 3));
  const Tensor x = images(2, 3, 32, 5);
  const Tensor labels = from_vector<int64_t>({2, 7}, {2});
  AmoebaState out = model.forward_state(x);
  ASSERT_TRUE(out.aux.defined());
  EXPECT_EQ(out.aux.sizes(), (Shape{2, 10}));
  const double want = cross_entropy(out.cur, labels).item<double>() + 0.4 * cross_entropy(out.aux, labels).item<double>();
  EXPECT_NEAR(amoebanet_loss(out, labels).item<double>(), want, 1e-6);
  model.eval();
  EXPECT_FALSE(model.forward_state(x).aux.defined());
  std::vector<std::string> layers;
  for (const auto& l : model.layer_info()) layers.push_back(l.name);
  EXPECT_EQ(layers[4], "aux_head") << "after cell_1, before the second reduction cell";
}

TEST(AmoebaNet, NamesAndErrors) {
  AmoebaNetConfig c = AmoebaNetConfig::from_name(" AmoebaNet-D( 18 , 256 ) ", 1000, 331);
  EXPECT_EQ(c.genotype, "D");
  EXPECT_EQ(c.num_cells, 18);
  EXPECT_EQ(c.filters, 256);
  EXPECT_EQ(c.stem, AmoebaNetConfig::Stem::ImageNet);
  EXPECT_EQ(c.name(), "amoebanet-d(18,256)");
  EXPECT_EQ(c.reduction_indices(), (std::vector<int64_t>{6, 12}));
  EXPECT_EQ(AmoebaNetConfig::from_name("amoebanet-b(6,32)", 10, 28).stem, AmoebaNetConfig::Stem::Small);
  expect_error([] { AmoebaNetConfig::from_name("amoebanet-x(18,256)"); }, {"unknown genotype 'X'"});
  expect_error([] { AmoebaNetConfig::from_name("resnet50"); }, {"unknown model 'resnet50'", "amoebanet-d(L,D)"});
  expect_error([] { AmoebaNetConfig::from_name("amoebanet-d(1,256)"); }, {"too few"});
  // D = 18: the second stem cell has 9 filters, which its factorized reduction cannot halve.
  expect_error([] { amoebanet_num_parameters(AmoebaNetConfig::from_name("amoebanet-d(18,18)")); },
               {"even number of filters"});
  // 8x8 images: stacks at 6, 3, 2, so the auxiliary head would meet a 3x3 map.
  expect_error([] { amoebanet_num_parameters(config("amoebanet-d(18,256)", 10, 8, true)); }, {"auxiliary head", "5x5"});
  expect_error([] { build_amoebanet("amoebanet-d(2,8)", 10, 2); }, {"image_size must be at least 3"});
  AmoebaNet model(tiny());
  expect_error([&] { model.forward(images(1, 1, 32, 1)); }, {"expected images of shape [N, 3, 32, 32]", "[1, 1, 32, 32]"});
  expect_error([&] { model.forward(AmoebaState{images(1, 3, 32, 1), {}, {}}, 2, 9); }, {"layer range [2, 9)"});
  expect_error([&] { model.forward(AmoebaState{images(1, 3, 32, 1), {}, {}}, 2, 3); },
               {"cell_0", "expected cur of shape [N, 48, 15, 15]", "[1, 3, 32, 32]"});
  amoebanet::LayerBuilder counting({false});
  amoebanet::ConvBn hollow(counting, {3, 8, 8}, 4, {1, 1}, {1, 1}, {0, 0}, true);
  expect_error([&] { hollow.forward(images(1, 3, 8, 1)); }, {"counting LayerBuilder"});
}

// NOTE [AmoebaNet activation memory]: the per-image estimate against what a training-mode
// forward actually leaves allocated for backward.
TEST(AmoebaNet, ActivationEstimateMatchesMeasuredMemory) {
  AmoebaNetConfig c = tiny(true, 3);
  AmoebaNet model(c);
  const Tensor x = images(4, 3, 32, 2);
  const AmoebaNetMemory est = amoebanet_memory(c, 2);
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  AmoebaState out = model.forward_state(x);
  const int64_t kept = memory_stats(Device::cpu()).current_bytes - before;
  // What is alive besides the saved activations: the two logits tensors and per-channel batch
  // norm statistics (a few KB). The estimate counts everything else exactly, so 2% is room for
  // those, not for a modelling error.
  const double predicted = static_cast<double>(4 * est.activation_bytes_per_image);
  EXPECT_NEAR(static_cast<double>(kept), predicted, 0.02 * predicted)
      << "measured " << kept << " bytes, estimated " << predicted;
  EXPECT_EQ(est.parameters, model.num_parameters());
  EXPECT_EQ(est.parameter_bytes, 4 * est.parameters);
  EXPECT_EQ(est.optimizer_bytes, 2 * est.parameter_bytes);
  EXPECT_EQ(est.total_bytes(4), 4 * est.parameter_bytes + 4 * est.activation_bytes_per_image);
}

// NOTE [AmoebaNet stage-only build]: built with a kept range, the network is the whole build cut
// to that range (models_test_util.h): the kept layers' parameters and batch norm buffers bit for
// bit, placeholders elsewhere, the generators where the whole build leaves them, the kept layers'
// outputs the whole network's.
TEST(AmoebaNet, StageOnlyBuildIsTheWholeBuildCut) {
  AmoebaNetConfig c = config("amoebanet-d(3,16)", 10, 16, true);
  c.dropout = 0;
  Generator d(5);
  const Batch batch{{"images", randn({4, 3, 16, 16}, kF32, &d)}, {"labels", from_vector<int64_t>({1, 2, 3, 4}, {4})}};
  expect_stage_only_builds_are_the_cut(
      [&](Generator* g, const LayerSelection& keep) {
        return std::make_unique<AmoebaNetLayered>(std::make_shared<AmoebaNet>(c, g, keep));
      },
      batch);
}
