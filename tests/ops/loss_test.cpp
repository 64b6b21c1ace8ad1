#include <limits>

#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {

// Logits, targets (one ignored), class weights and a None-reduction upstream gradient shared by
// the class-loss cases below.
const std::vector<double> kX = {0.5, -1.25, 2.0, 0.0, 1.0, 3.0, 3.0, -2.5, 1.5, 0.25,
                                -0.75, 0.25, 1.0, -4.0, 2.5, 1.0, 2.0, 3.0, 4.0, 5.0};
const std::vector<int64_t> kT = {1, 0, 4, -100};
const std::vector<double> kW = {0.5, 2.0, 1.0, 0.25, 1.5};
const std::vector<double> kGNone = {1.0, -2.0, 0.5, 3.0};

Tensor upstream(Reduction r, const std::vector<double>& none, const Shape& shape, double scalar) {
  return r == Reduction::None ? from_vector<double>(none, shape) : scalar_tensor(scalar, kF64);
}


// Direct reference for one row: (1 - eps) (-log p_t) + eps/C sum_c (-log p_c), in f64 loops.
double ref_ce_row(const std::vector<double>& row, int64_t t, double eps) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : row) m = std::max(m, v);
  double z = 0;
  for (double v : row) z += std::exp(v - m);
  const double lse = m + std::log(z);
  double smooth = 0;
  for (double v : row) smooth += lse - v;
  return (1 - eps) * (lse - row[static_cast<size_t>(t)]) + eps / static_cast<double>(row.size()) * smooth;
}

}  // namespace

TEST(CrossEntropy, MatchesPyTorchForEveryReductionSmoothingAndWeight) {
  struct Case {
    double smoothing;
    bool weighted;
    Reduction reduction;
    std::vector<double> loss, grad;
  };
  // PyTorch 1.13: F.cross_entropy(x, t, weight, reduction, label_smoothing) on kX as [4, 5] f64
  // with targets kT, then backward with kGNone (None) or 1.5 (Mean, Sum); x.grad.
  const std::vector<Case> cases = {
      {0.0, false, Reduction::None, {3.818218162549873, 0.8290516021698707, 0.3139395807356276, 0.0},
       {0.1264108246920238, -0.9780330924984442, 0.5665340113946644, 0.07667204089527124, 0.20841621551648468, 1.1270739386307436, -0.8729260613692565, -0.003567449295494808, -0.19477613187106033, -0.05580429609493174, 0.014163504034083911, 0.038500395643156674, 0.08150533821615723, 0.0005491786490430024, -0.13471841654244077, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {0.0, false, Reduction::Mean, {1.6537364484851238},
       {0.0632054123460119, -0.4890165462492221, 0.2832670056973322, 0.03833602044763562, 0.10420810775824234, -0.2817684846576859, 0.21823151534231414, 0.000891862323873702, 0.04869403296776508, 0.013951074023732935, 0.014163504034083911, 0.038500395643156674, 0.08150533821615723, 0.0005491786490430024, -0.13471841654244077, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {0.0, false, Reduction::Sum, {4.961209345455371},
       {0.1896162370380357, -1.4670496387476661, 0.8498010170919966, 0.11500806134290686, 0.312624323274727, -0.8453054539730576, 0.6546945460269424, 0.0026755869716211063, 0.14608209890329524, 0.041853222071198806, 0.042490512102251736, 0.11550118692947002, 0.24451601464847167, 0.001647535947129007, -0.4041552496273223, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {0.0, true, Reduction::None, {7.636436325099746, 0.41452580108493536, 0.47090937110344144, 0.0},
       {0.2528216493840476, -1.9560661849968883, 1.1330680227893288, 0.15334408179054249, 0.41683243103296935, 0.5635369693153718, -0.4364630306846283, -0.001783724647747404, -0.09738806593553016, -0.02790214804746587, 0.021245256051125868, 0.05775059346473501, 0.12225800732423583, 0.0008237679735645035, -0.20207762481366115, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {0.0, true, Reduction::Mean, {2.1304678743220307},
       {0.09480811851901785, -0.7335248193738331, 0.4249005085459983, 0.05750403067145343, 0.1563121616373635, -0.1056631817466322, 0.0818368182533678, 0.0003344483714526383, 0.018260262362911905, 0.005231652758899851, 0.0159339420383444, 0.043312945098551256, 0.09169350549317688, 0.0006178259801733777, -0.15155821861024588, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {0.0, true, Reduction::Sum, {8.521871497288123},
       {0.3792324740760714, -2.9340992774953323, 1.6996020341839932, 0.23001612268581373, 0.625248646549454, -0.4226527269865288, 0.3273472730134712, 0.0013377934858105531, 0.07304104945164762, 0.020926611035599403, 0.0637357681533776, 0.17325178039420502, 0.36677402197270753, 0.002471303920693511, -0.6062328744409835, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {0.2, false, Reduction::None, {3.478218162549873, 1.2190516021698707, 0.8539395807356276, 0.0},
       {0.0864108246920238, -0.8180330924984442, 0.5265340113946644, 0.03667204089527124, 0.16841621551648467, 0.8070739386307434, -0.7929260613692567, 0.07643255070450519, -0.11477613187106037, 0.02419570390506825, -0.0058364959659160855, 0.01850039564315668, 0.061505338216157245, -0.019450821350956996, -0.05471841654244072, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {0.2, false, Reduction::Mean, {1.8504031151517903},
       {0.04320541234601192, -0.4090165462492222, 0.26326700569733225, 0.018336020447635628, 0.08420810775824236, -0.2017684846576859, 0.19823151534231417, -0.019108137676126298, 0.02869403296776509, -0.006048925976267062, -0.0058364959659160855, 0.01850039564315668, 0.061505338216157245, -0.019450821350956996, -0.05471841654244078, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {0.2, false, Reduction::Sum, {5.551209345455371},
       {0.12961623703803576, -1.2270496387476664, 0.7898010170919969, 0.0550080613429069, 0.2526243232747271, -0.6053054539730577, 0.5946945460269426, -0.057324413028378894, 0.0860820989032953, -0.01814677792880118, -0.01750948789774825, 0.05550118692947006, 0.18451601464847175, -0.05835246405287099, -0.1641552496273222, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {0.2, true, Reduction::None, {6.598474874215271, 0.9057214773236212, 0.812654808837235, 0.0},
       {0.20880359269256313, -1.6402398974221841, 0.9854265606243428, 0.12877639402044097, 0.31723335008483733, 0.3075151025647535, -0.3724848974352466, 0.07782385592974816, -0.09881344044134682, 0.08595937938209162, 0.00997054068805832, 0.014285557856850923, 0.09492252688478171, -0.004225658104849366, -0.11495296732484146, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {0.2, true, Reduction::Mean, {2.0792127900940316},
       {0.07830134725971118, -0.6150899615333191, 0.3695349602341286, 0.04829114775766537, 0.11896250628181401, -0.05765908173089129, 0.06984091826910874, -0.014591972986827781, 0.01852752008275253, -0.01611738363414218, 0.0074779055160437416, 0.010714168392638196, 0.0711918951635863, -0.0031692435786370246, -0.08621472549363107, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {0.2, true, Reduction::Sum, {8.316851160376126},
       {0.3132053890388447, -2.4603598461332763, 1.4781398409365143, 0.19316459103066147, 0.47585002512725605, -0.23063632692356517, 0.27936367307643495, -0.058367891947311124, 0.07411008033101012, -0.06446953453656872, 0.029911622064174966, 0.042856673570552783, 0.2847675806543452, -0.012676974314548098, -0.3448589019745243, 0.0, 0.0, 0.0, 0.0, 0.0}},
  };
  for (const Case& c : cases) {
    for (DType dt : {kF64, kF32}) {
      Tensor x = from_vector<double>(kX, {4, 5}).to(dt).set_requires_grad();
      CrossEntropyOptions o;
      o.reduction = c.reduction;
      o.label_smoothing = c.smoothing;
      if (c.weighted) o.weight = from_vector<double>(kW).to(dt);
      const Tensor loss = cross_entropy(x, from_vector<int64_t>(kT), o);
      const double rtol = dt == kF64 ? 1e-13 : 2e-6, atol = dt == kF64 ? 1e-14 : 1e-6;
      const Shape ls = c.reduction == Reduction::None ? Shape{4} : Shape{};
      EXPECT_EQ(loss.dtype(), dt);
      EXPECT_TRUE(all_close(loss, from_vector<double>(c.loss, ls).to(dt), rtol, atol))
          << "eps " << c.smoothing << " weighted " << c.weighted << " " << reduction_name(c.reduction) << " " << dt;
      loss.backward(upstream(c.reduction, kGNone, {4}, 1.5).to(dt));
      EXPECT_TRUE(all_close(x.grad(), from_vector<double>(c.grad, {4, 5}).to(dt), rtol, atol))
          << "grad: eps " << c.smoothing << " weighted " << c.weighted << " " << reduction_name(c.reduction) << " " << dt;
    }
  }
}

TEST(CrossEntropy, SpatialFormMatchesPyTorch) {
  // [N, C, d] = [2, 3, 4] logits, [2, 4] targets with one ignored, weights, smoothing 0.1.
  const std::vector<double> x3 = {0.5, -1.0, 2.0, 0.0, 1.0, 0.5, -0.5, 3.0, -2.0, 1.5, 0.25, 1.0,
                                  2.0, 0.0, -1.0, 1.0, -0.5, 2.5, 1.0, 0.0, 0.75, -1.5, 0.5, -2.0};
  const std::vector<int64_t> t3 = {2, 0, -100, 1, 1, 1, 2, 0};
  struct Case {
    Reduction reduction;
    std::vector<double> loss, grad;
  };
  // PyTorch 1.13: F.cross_entropy(x3, t3, weight=[1.5, 0.5, 2], reduction, label_smoothing=0.1);
  // backward with arange(8).reshape(2, 4) * 0.5 - 1 (None) or 1 (Mean, Sum).
  const std::vector<Case> cases = {
      {Reduction::None, {6.600554011195081, 4.067782897248147, 0.0, 0.3824101780744999, 1.433038836946734, 0.4474766921583897, 2.106250044641182, 0.7343681215394764},
       {-0.6579716181448138, 0.6580129652549839, 0.0, -0.012747064044230736, -1.1505811992206765, -0.1798395013793104, 0.0, 0.012773464223724053, 1.8085528173654903, -0.4781734638756735, 0.0, -2.640017949327453e-05, 0.3762294920349018, -0.009728887509312379, 0.20042290604113955, -0.8841990987440224, -0.43167961939951666, 0.09516493372619914, 2.186508372808419, 0.9206327071031375, 0.055450127364614875, -0.0854360462168867, -2.3869312788495587, -0.03643360835911517}},
      {Reduction::Mean, {1.8555153860945306},
       {0.07740842566409574, -0.1548265800599962, 0.0, -0.00299930918687782, 0.13536249402596195, 0.04231517679513185, 0.0, 0.0030055209938174275, -0.21277091969005768, 0.11251140326486435, 0.0, -6.21180693959382e-06, 0.04426229318057668, -0.0007630500007303819, 0.011789582708302326, -0.041609369352659874, -0.05078583757641372, 0.007463916370682289, 0.12861813957696583, 0.04332389209897118, 0.006523544395837045, -0.006700866369951898, -0.14040772228526816, -0.0017145227463113023}},
      {Reduction::Sum, {15.771880781803508},
       {0.6579716181448138, -1.3160259305099677, 0.0, -0.025494128088461472, 1.1505811992206765, 0.3596790027586208, 0.0, 0.025546928447448106, -1.8085528173654903, 0.956346927751347, 0.0, -5.280035898654906e-05, 0.3762294920349018, -0.006485925006208251, 0.10021145302056977, -0.35367963949760894, -0.43167961939951666, 0.06344328915079943, 1.0932541864042096, 0.3682530828412551, 0.055450127364614875, -0.05695736414459113, -1.1934656394247793, -0.014573443343646063}},
  };
  std::vector<double> g_none;
  for (int i = 0; i < 8; ++i) g_none.push_back(i * 0.5 - 1);
  for (const Case& c : cases) {
    for (bool transposed : {false, true}) {
      Tensor x = from_vector<double>(x3, {2, 3, 4});
      // The same logits through a non-contiguous view.
      if (transposed) x = transpose(contiguous(transpose(x, 1, 2)), 1, 2);
      x = x.detach().set_requires_grad();
      CrossEntropyOptions o;
      o.reduction = c.reduction;
      o.label_smoothing = 0.1;
      o.weight = from_vector<double>({1.5, 0.5, 2.0});
      const Tensor loss = cross_entropy(x, from_vector<int64_t>(t3, {2, 4}), o);
      EXPECT_TRUE(all_close(loss, from_vector<double>(c.loss, c.reduction == Reduction::None ? Shape{2, 4} : Shape{}), 1e-13,
                            1e-14))
          << reduction_name(c.reduction);
      loss.backward(upstream(c.reduction, g_none, {2, 4}, 1.0));
      EXPECT_TRUE(all_close(x.grad(), from_vector<double>(c.grad, {2, 3, 4}), 1e-13, 1e-14)) << reduction_name(c.reduction);
    }
  }
}

TEST(CrossEntropy, OneSampleWithoutBatchDim) {
  // PyTorch 1.13: F.cross_entropy(x[0], tensor(3)) and its gradient.
  Tensor x = from_vector<double>({0.5, -1.25, 2.0, 0.0, 1.0}).set_requires_grad();
  const Tensor loss = cross_entropy(x, scalar_tensor(3, kI64));
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_NEAR(loss.item<double>(), 2.568218162549873, 1e-14);
  loss.backward();
  EXPECT_TRUE(all_close(x.grad(),
                        from_vector<double>({0.1264108246920238, 0.021966907501555877, 0.5665340113946644,
                                             -0.9233279591047288, 0.20841621551648468}),
                        1e-13));
  CrossEntropyOptions none;
  none.reduction = Reduction::None;
  EXPECT_EQ(cross_entropy(x, scalar_tensor(3, kI64), none).sizes(), Shape{});
}

TEST(CrossEntropy, AllIgnoredAndEmptyBatches) {
  // PyTorch 1.13 with every target ignored: mean NaN, sum 0, none zeros; the gradient is 0.
  Tensor x = from_vector<double>(kX, {4, 5}).set_requires_grad();
  const Tensor t = full({4}, -100, kI64);
  const Tensor mean_loss = cross_entropy(x, t);
  EXPECT_TRUE(std::isnan(mean_loss.item<double>()));
  mean_loss.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>(20, 0.0));
  CrossEntropyOptions o;
  o.label_smoothing = 0.3;
  EXPECT_TRUE(std::isnan(cross_entropy(x, t, o).item<double>()));
  o.reduction = Reduction::Sum;
  EXPECT_EQ(cross_entropy(x, t, o).item<double>(), 0.0);
  o.reduction = Reduction::None;
  EXPECT_EQ(cross_entropy(x, t, o).to_vector<double>(), std::vector<double>(4, 0.0));
  // A custom ignore_index.
  CrossEntropyOptions ign;
  ign.ignore_index = 2;
  EXPECT_NEAR(cross_entropy(from_vector<double>(kX, {4, 5}), from_vector<int64_t>({1, 2, 2, 2}), ign).item<double>(),
              3.818218162549873, 1e-13);
  // Empty batch: mean NaN (0 / 0), sum 0, and an empty gradient.
  Tensor e = zeros({0, 5}, kF64).set_requires_grad();
  const Tensor el = cross_entropy(e, zeros({0}, kI64));
  EXPECT_TRUE(std::isnan(el.item<double>()));
  el.backward();
  EXPECT_EQ(e.grad().sizes(), (Shape{0, 5}));
}

TEST(CrossEntropy, LargeLogitsAreStable) {
  // PyTorch 1.13 (f32): losses of [[1000, 0], [0, 1000], [-1000, 1000]] with targets [1, 1, 0]
  // and the gradient of their sum.
  for (DType dt : {kF32, kF64}) {
    Tensor x = from_vector<double>({1000, 0, 0, 1000, -1000, 1000}, {3, 2}).to(dt).set_requires_grad();
    CrossEntropyOptions none;
    none.reduction = Reduction::None;
    const Tensor l = cross_entropy(x, from_vector<int64_t>({1, 1, 0}), none);
    EXPECT_EQ(l.to_vector<double>(), (std::vector<double>{1000.0, 0.0, 2000.0})) << dt;
    sum(l).backward();
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1.0, -1.0, 0.0, 0.0, -1.0, 1.0})) << dt;
  }
}

TEST(CrossEntropy, WideRowsMatchLoopsAndComposition) {
  // GPT-2-sized rows: [6, 50304] f32 logits, smoothing 0.1, one target ignored; the loss
  // against an f64 loop reference, and the fused gradient against the composition
  // nll_loss(log_softmax(x)) plus the smoothing term's gradient built from softmax.
  const int64_t n = 6, c = 50304;
  Generator gen(8);
  const Tensor x32 = mul(randn({n, c}, kF32, &gen), 3.0);
  const std::vector<int64_t> tv = {7, 50303, -100, 0, 12345, 999};
  const Tensor t = from_vector<int64_t>(tv);
  CrossEntropyOptions o;
  o.label_smoothing = 0.1;
  o.reduction = Reduction::None;
  const std::vector<double> xv = x32.to_vector<double>();
  const std::vector<double> got = cross_entropy(x32, t, o).to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    if (tv[static_cast<size_t>(i)] == -100) {
      EXPECT_EQ(got[static_cast<size_t>(i)], 0.0);
      continue;
    }
    const std::vector<double> row(xv.begin() + i * c, xv.begin() + (i + 1) * c);
    EXPECT_NEAR(got[static_cast<size_t>(i)], ref_ce_row(row, tv[static_cast<size_t>(i)], 0.1), 2e-5) << "row " << i;
  }
  // The fused gradient of the mean loss against the same loss composed from other ops, in f64
  // (the smoothing term is eps / C / count = 4e-7 per element here: too small to see in f32):
  // (1 - eps) nll_loss(log_softmax(x)) + eps / C * sum(-log_softmax(x)) / count. The composed
  // sum includes the ignored row; PyTorch masks that row out, and its gradient is zero.
  const Tensor x64 = x32.to(kF64);
  Tensor xa = x64.detach().set_requires_grad();
  CrossEntropyOptions mean_ls;
  mean_ls.label_smoothing = 0.1;
  cross_entropy(xa, t, mean_ls).backward();
  Tensor xb = x64.detach().set_requires_grad();
  const Tensor lp = log_softmax(xb, 1);
  const Tensor composed = add(mul(nll_loss(lp, t), 0.9), mul(sum(neg(lp)), 0.1 / static_cast<double>(c) / 5.0));
  composed.backward();
  std::vector<double> want = xb.grad().to_vector<double>();
  for (int64_t j = 0; j < c; ++j) want[static_cast<size_t>(2 * c + j)] = 0.0;
  EXPECT_TRUE(all_close(xa.grad(), from_vector<double>(want, {n, c}), 1e-9, 1e-15));
}

TEST(CrossEntropy, ReducedPrecisionComputesInF32) {
  const Tensor x = from_vector<double>(kX, {4, 5});
  const Tensor t = from_vector<int64_t>(kT);
  for (DType dt : {kF16, kBF16}) {
    Tensor xh = x.to(dt).set_requires_grad();
    const Tensor l = cross_entropy(xh, t);
    EXPECT_EQ(l.dtype(), dt);
    // The f32 loss of the same (rounded) logits, rounded once to dt.
    EXPECT_TRUE(all_close(l, cross_entropy(xh.detach().to(kF32), t).to(dt), 0, 0)) << dt;
    l.backward();
    EXPECT_EQ(xh.grad().dtype(), dt);
    Tensor x32 = xh.detach().to(kF32).set_requires_grad();
    cross_entropy(x32, t).backward();
    EXPECT_TRUE(all_close(xh.grad(), x32.grad().to(dt), 0, 0)) << dt;
  }
}

// NOTE [Half-precision cross-entropy rows]: f16/bf16 logits with the classes innermost are read
// row by row into f32; with and without autocast (where the loss comes back in f32), every
// reduction, label smoothing, ignored positions and class weights, wide rows split over threads:
// the loss and the gradient are the f32 computation on the upcast logits, bit for bit (rounded
// once to the half type where the result is half).
TEST(CrossEntropy, HalfLogitsRowsEqualTheirF32UpcastExactly) {
  Generator g(41);
  const Tensor t = randint(0, 3000, {37}, kI64, &g);
  Tensor tt = t.clone();
  tt.data<int64_t>()[5] = -100;
  tt.data<int64_t>()[20] = -100;
  const Tensor weight = add(rand({3000}, kF32, &g), 0.5);
  const Tensor upstream = randn({37}, kF32, &g);
  for (DType dt : {kF16, kBF16}) {
    const Tensor xh = mul(randn({37, 3000}, kF32, &g), 3.0).to(dt);
    for (bool autocast_on : {false, true}) {
      for (const Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
        for (double smoothing : {0.0, 0.1}) {
          for (bool weighted : {false, true}) {
            SCOPED_TRACE(::testing::Message() << dt << " autocast " << autocast_on << " reduction " << static_cast<int>(r)
                                              << " smoothing " << smoothing << " weighted " << weighted);
            CrossEntropyOptions o{.reduction = r, .ignore_index = -100, .label_smoothing = smoothing, .weight = Tensor()};
            Tensor x = xh.detach().set_requires_grad();
            Tensor l;
            {
              autocast::Guard guard(kBF16, autocast_on);
              if (weighted) o.weight = autocast_on ? weight : weight.to(dt);
              l = cross_entropy(x, tt, o);
            }
            const DType want = autocast_on ? kF32 : dt;
            ASSERT_EQ(l.dtype(), want);
            Tensor x32 = xh.detach().to(kF32).set_requires_grad();
            CrossEntropyOptions o32 = o;
            if (weighted) o32.weight = o.weight.to(kF32);
            const Tensor l32 = cross_entropy(x32, tt, o32);
            EXPECT_TRUE(all_close(l, l32.to(want), 0, 0));
            const Tensor gl = r == Reduction::None ? upstream : ones({}, kF32);
            l.backward(gl.to(want));
            l32.backward(gl.to(want).to(kF32));
            ASSERT_EQ(x.grad().dtype(), dt);
            EXPECT_TRUE(all_close(x.grad(), x32.grad().to(dt), 0, 0));
          }
        }
      }
    }
  }
}

TEST(NllLoss, MatchesPyTorch) {
  // log_softmax(kX) as computed by PyTorch 1.13 (the input of nll_loss here).
  const std::vector<double> logp = {-2.068218162549873, -3.818218162549873, -0.5682181625498728, -2.568218162549873, -1.5682181625498728, -0.8290516021698707, -0.8290516021698707, -6.329051602169871, -2.3290516021698706, -3.5790516021698706, -3.5639395807356276, -2.5639395807356276, -1.8139395807356276, -6.813939580735628, -0.3139395807356276, -4.451914395937593, -3.4519143959375933, -2.4519143959375933, -1.4519143959375933, -0.45191439593759325};
  struct Case {
    bool weighted;
    Reduction reduction;
    std::vector<double> loss, grad;
  };
  // PyTorch 1.13: F.nll_loss(logp, kT, weight, reduction), backward with kGNone or 1.5.
  const std::vector<Case> cases = {
      {false, Reduction::None, {3.818218162549873, 0.8290516021698707, 0.3139395807356276, 0.0},
       {0.0, -1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {false, Reduction::Mean, {1.6537364484851238},
       {0.0, -0.5, 0.0, 0.0, 0.0, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {false, Reduction::Sum, {4.961209345455371},
       {0.0, -1.5, 0.0, 0.0, 0.0, -1.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.5, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {true, Reduction::None, {7.636436325099746, 0.41452580108493536, 0.47090937110344144, 0.0},
       {0.0, -2.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.75, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {true, Reduction::Mean, {2.1304678743220307},
       {0.0, -0.75, 0.0, 0.0, 0.0, -0.1875, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.5625, 0.0, 0.0, 0.0, 0.0, 0.0}},
      {true, Reduction::Sum, {8.521871497288123},
       {0.0, -3.0, 0.0, 0.0, 0.0, -0.75, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -2.25, 0.0, 0.0, 0.0, 0.0, 0.0}},
  };
  for (const Case& c : cases) {
    Tensor lp = from_vector<double>(logp, {4, 5}).set_requires_grad();
    NllLossOptions o;
    o.reduction = c.reduction;
    if (c.weighted) o.weight = from_vector<double>(kW);
    const Tensor loss = nll_loss(lp, from_vector<int64_t>(kT), o);
    EXPECT_TRUE(all_close(loss, from_vector<double>(c.loss, c.reduction == Reduction::None ? Shape{4} : Shape{}), 1e-14))
        << reduction_name(c.reduction) << " weighted " << c.weighted;
    loss.backward(upstream(c.reduction, kGNone, {4}, 1.5));
    EXPECT_TRUE(all_close(lp.grad(), from_vector<double>(c.grad, {4, 5}), 1e-14))
        << reduction_name(c.reduction) << " weighted " << c.weighted;
  }
  // All ignored: NaN mean, as in PyTorch 1.13.
  EXPECT_TRUE(std::isnan(nll_loss(from_vector<double>(logp, {4, 5}), full({4}, -100, kI64)).item<double>()));
}

TEST(MseLoss, MatchesPyTorchWithBroadcasting) {
  struct Case {
    Reduction reduction;
    std::vector<double> loss, ga, gb;
  };
  // PyTorch 1.13: F.mse_loss(a [2, 3], b [3] expanded, reduction), backward with
  // [[1, 2, -1], [0.5, 0, 3]] (None) or 2 (Mean, Sum); a.grad and b.grad.
  const std::vector<Case> cases = {
      {Reduction::None, {0.25, 0.25, 1.5625, 0.25, 0.25, 1.0}, {-1.0, -2.0, -2.5, 0.5, 0.0, -6.0}, {0.5, 2.0, 8.5}},
      {Reduction::Mean, {0.59375}, {-0.3333333333333333, -0.3333333333333333, 0.8333333333333333, 0.3333333333333333, 0.3333333333333333, -0.6666666666666666}, {0.0, 0.0, -0.16666666666666663}},
      {Reduction::Sum, {3.5625}, {-2.0, -2.0, 5.0, 2.0, 2.0, -4.0}, {0.0, 0.0, -1.0}},
  };
  for (const Case& c : cases) {
    Tensor a = from_vector<double>({0.5, -1.0, 2.0, 1.5, 0.0, -0.25}, {2, 3}).set_requires_grad();
    Tensor b = from_vector<double>({1.0, -0.5, 0.75}).set_requires_grad();
    const Tensor loss = mse_loss(a, b, c.reduction);
    EXPECT_TRUE(all_close(loss, from_vector<double>(c.loss, c.reduction == Reduction::None ? Shape{2, 3} : Shape{}), 1e-15))
        << reduction_name(c.reduction);
    loss.backward(upstream(c.reduction, {1.0, 2.0, -1.0, 0.5, 0.0, 3.0}, {2, 3}, 2.0));
    EXPECT_TRUE(all_close(a.grad(), from_vector<double>(c.ga, {2, 3}), 1e-15)) << reduction_name(c.reduction);
    EXPECT_TRUE(all_close(b.grad(), from_vector<double>(c.gb, {3}), 1e-15, 1e-15)) << reduction_name(c.reduction);
  }
  // A long f32 input (many chunks) sums in f64: 3 * 2^20 terms of 0.25.
  const Tensor big = full({3 << 20}, 0.5, kF32);
  EXPECT_EQ(mse_loss(big, zeros({3 << 20}, kF32), Reduction::Sum).item<double>(), 0.25 * (3 << 20));
  EXPECT_EQ(mse_loss(big, zeros({1}, kF32)).item<double>(), 0.25);
  EXPECT_TRUE(std::isnan(mse_loss(zeros({0}), zeros({0})).item<float>()));  // mean of nothing, as PyTorch
}

TEST(BceWithLogits, MatchesPyTorch) {
  struct Case {
    bool pos_weight;
    Reduction reduction;
    std::vector<double> loss, gx, gy;
  };
  // PyTorch 1.13: F.binary_cross_entropy_with_logits(x, y, reduction, pos_weight=[2, 0.5, 1.5])
  // with large logits (30, -40) included; backward with [[1, 2, -1], [0.5, 0.25, 3]] (None) or 2.
  const std::vector<Case> cases = {
      {false, Reduction::None, {0.4740769841801067, 0.31326168751822286, 1.6269280110429727, 30.000000000000092, 40.0, 0.6931471805599453},
       {-0.3775406687981454, 0.5378828427399902, -0.6307970779778823, 0.49999999999995326, -0.25, 0.0},
       {-0.5, 2.0, 2.0, -15.0, 10.0, -0.0}},
      {false, Reduction::Mean, {12.18456897721689},
       {-0.1258468895993818, 0.08964714045666504, 0.2102656926592941, 0.3333333333333022, -0.3333333333333333, 0.0},
       {-0.16666666666666666, 0.3333333333333333, -0.6666666666666666, -10.0, 13.333333333333334, -0.0}},
      {false, Reduction::Sum, {73.10741386330133},
       {-0.7550813375962908, 0.5378828427399902, 1.2615941559557646, 1.999999999999813, -2.0, 0.0},
       {-1.0, 2.0, -4.0, -60.0, 80.0, -0.0}},
      {true, Reduction::None, {0.9481539683602134, 0.3132616875182228, 1.6427940124233442, 30.000000000000092, 20.0, 0.8664339756999316},
       {-0.7550813375962908, 0.5378828427399902, -0.6158967127251176, 0.49999999999995326, -0.125, -0.375},
       {-0.025923015819893314, 0.6867383124817771, 1.9365359944785139, -14.999999999999952, 5.0, 1.0397207708399177}},
      {true, Reduction::Mean, {8.961773940666967},
       {-0.2516937791987636, 0.08964714045666504, 0.20529890424170585, 0.3333333333333022, -0.16666666666666666, -0.041666666666666664},
       {-0.008641005273297772, 0.11445638541362951, -0.6455119981595047, -9.999999999999968, 6.666666666666667, 0.1155245300933242}},
      {true, Reduction::Sum, {53.77064364400181},
       {-1.5101626751925816, 0.5378828427399902, 1.2317934254502352, 1.999999999999813, -1.0, -0.25},
       {-0.05184603163978663, 0.6867383124817771, -3.8730719889570278, -59.99999999999981, 40.0, 0.6931471805599452}},
  };
  for (const Case& c : cases) {
    Tensor x = from_vector<double>({0.5, -1.0, 2.0, 30.0, -40.0, 0.0}, {2, 3}).set_requires_grad();
    Tensor y = from_vector<double>({1.0, 0.0, 0.25, 0.0, 1.0, 0.5}, {2, 3}).set_requires_grad();
    const Tensor pw = c.pos_weight ? from_vector<double>({2.0, 0.5, 1.5}) : Tensor();
    const Tensor loss = binary_cross_entropy_with_logits(x, y, c.reduction, pw);
    EXPECT_TRUE(all_close(loss, from_vector<double>(c.loss, c.reduction == Reduction::None ? Shape{2, 3} : Shape{}), 1e-14))
        << reduction_name(c.reduction) << " pos_weight " << c.pos_weight;
    loss.backward(upstream(c.reduction, {1.0, 2.0, -1.0, 0.5, 0.25, 3.0}, {2, 3}, 2.0));
    EXPECT_TRUE(all_close(x.grad(), from_vector<double>(c.gx, {2, 3}), 1e-12, 1e-15))
        << reduction_name(c.reduction) << " pos_weight " << c.pos_weight;
    EXPECT_TRUE(all_close(y.grad(), from_vector<double>(c.gy, {2, 3}), 1e-12, 1e-15))
        << reduction_name(c.reduction) << " pos_weight " << c.pos_weight;
  }
  // f32 stays finite for huge logits.
  const Tensor l = binary_cross_entropy_with_logits(from_vector<float>({100.f, -100.f}), from_vector<float>({0.f, 1.f}),
                                                    Reduction::None);
  EXPECT_EQ(l.to_vector<float>(), (std::vector<float>{100.f, 100.f}));
}

TEST(LossGradcheck, CrossEntropy) {
  const Tensor t = from_vector<int64_t>({2, 0, -100, 4});
  const Tensor w = from_vector<double>({0.5, 2.0, 1.0, 0.25, 1.5});
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    for (double eps : {0.0, 0.25}) {
      for (bool weighted : {false, true}) {
        CrossEntropyOptions o;
        o.reduction = r;
        o.label_smoothing = eps;
        if (weighted) o.weight = w;
        auto f = [&](const TensorList& in) { return cross_entropy(in[0], t, o); };
        EXPECT_TRUE(grad_ok(gradcheck(f, {rand_leaf({4, 5}, 91)})))
            << reduction_name(r) << " eps " << eps << " weighted " << weighted;
        EXPECT_TRUE(grad_ok(gradcheck(f, {rand_leaf_transposed({4, 5}, 92)})))
            << "transposed " << reduction_name(r) << " eps " << eps << " weighted " << weighted;
      }
    }
    // [N, C, d1, d2] with an ignored position, and a one-class problem.
    CrossEntropyOptions o;
    o.reduction = r;
    o.label_smoothing = 0.1;
    const Tensor t4 = from_vector<int64_t>({0, 2, 1, -100, 2, 2, 0, 1, 1, 0, 2, 0}, {2, 3, 2});
    EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return cross_entropy(in[0], t4, o); },
                                  {rand_leaf({2, 3, 3, 2}, 93)})))
        << "4-D " << reduction_name(r);
    EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return cross_entropy(in[0], zeros({3}, kI64), o); },
                                  {rand_leaf({3, 1}, 94)})))
        << "one class " << reduction_name(r);
  }
  // Many positions along d (more than one 64-wide column block).
  Generator g(9);
  const Tensor tw = randint(0, 3, {2, 70}, kI64, &g);
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return cross_entropy(in[0], tw); }, {rand_leaf({2, 3, 70}, 95)})));
}

TEST(LossGradcheck, NllMseAndBce) {
  const Tensor t = from_vector<int64_t>({2, -100, 0, 1}, {2, 2});
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    NllLossOptions o;
    o.reduction = r;
    o.weight = from_vector<double>({0.5, 2.0, 1.5});
    EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return nll_loss(in[0], t, o); }, {rand_leaf({2, 3, 2}, 101)})))
        << "nll " << reduction_name(r);
    // mse: same shapes, broadcasting both ways, non-contiguous.
    auto mse = [r](const TensorList& in) { return mse_loss(in[0], in[1], r); };
    EXPECT_TRUE(grad_ok(gradcheck(mse, {rand_leaf({3, 4}, 102), rand_leaf({3, 4}, 103)}))) << reduction_name(r);
    EXPECT_TRUE(grad_ok(gradcheck(mse, {rand_leaf({3, 1}, 104), rand_leaf({4}, 105)}))) << reduction_name(r);
    EXPECT_TRUE(grad_ok(gradcheck(mse, {rand_leaf_transposed({3, 4}, 106), rand_leaf({3, 4}, 107)}))) << reduction_name(r);
    // bce: gradients of logits and targets, with and without pos_weight; targets in (0, 1).
    Generator g(108);
    const Tensor y = rand({3, 4}, kF64, &g).set_requires_grad();
    const Tensor pw = from_vector<double>({0.5, 1.0, 2.0, 3.0});
    for (bool use_pw : {false, true}) {
      auto bce = [&](const TensorList& in) { return binary_cross_entropy_with_logits(in[0], in[1], r, use_pw ? pw : Tensor()); };
      EXPECT_TRUE(grad_ok(gradcheck(bce, {rand_leaf({3, 4}, 109, 3.0), y}))) << reduction_name(r) << " pw " << use_pw;
      EXPECT_TRUE(grad_ok(gradcheck(bce, {rand_leaf_transposed({3, 4}, 110), y}))) << reduction_name(r) << " pw " << use_pw;
    }
  }
}

TEST(Loss, Errors) {
  const Tensor x = zeros({3, 5});
  // Out-of-range targets name the value, the position and the class count.
  std::string m = error_message([&] { cross_entropy(x, from_vector<int64_t>({0, 7, 1})); });
  EXPECT_NE(m.find("cross_entropy: target 7 at position [1] is out of range for 5 classes"), std::string::npos) << m;
  m = error_message([&] { cross_entropy(x, from_vector<int64_t>({0, -3, 1})); });
  EXPECT_NE(m.find("target -3"), std::string::npos) << m;
  EXPECT_NE(m.find("ignore_index -100"), std::string::npos) << m;
  m = error_message([&] { nll_loss(zeros({2, 3, 2}), from_vector<int64_t>({0, 1, 2, 3}, {2, 2})); });
  EXPECT_NE(m.find("nll_loss: target 3 at position [1, 1] is out of range for 3 classes"), std::string::npos) << m;
  // -100 is fine (ignored) unless ignore_index says otherwise.
  EXPECT_NO_THROW(cross_entropy(x, from_vector<int64_t>({0, -100, 1})));
  CrossEntropyOptions other;
  other.ignore_index = 4;
  EXPECT_THROW(cross_entropy(x, from_vector<int64_t>({0, -100, 1}), other), Error);
  // Shapes and dtypes.
  m = error_message([&] { cross_entropy(x, from_vector<int64_t>({0, 1})); });
  EXPECT_NE(m.find("expected target of shape [3] for input of shape [3, 5], got target of shape [2]"), std::string::npos) << m;
  m = error_message([&] { cross_entropy(x, from_vector<float>({0, 1, 2})); });
  EXPECT_NE(m.find("target must be an i64 tensor of class indices, got f32"), std::string::npos) << m;
  CrossEntropyOptions bad_w;
  bad_w.weight = ones({4});
  m = error_message([&] { cross_entropy(x, from_vector<int64_t>({0, 1, 2}), bad_w); });
  EXPECT_NE(m.find("weight of shape [4] does not match the 5 classes"), std::string::npos) << m;
  CrossEntropyOptions grad_w;
  grad_w.weight = ones({5}).set_requires_grad();
  EXPECT_THROW(cross_entropy(x, from_vector<int64_t>({0, 1, 2}), grad_w), Error);
  CrossEntropyOptions bad_ls;
  bad_ls.label_smoothing = 1.5;
  m = error_message([&] { cross_entropy(x, from_vector<int64_t>({0, 1, 2}), bad_ls); });
  EXPECT_NE(m.find("label_smoothing must be in [0, 1], got 1.5"), std::string::npos) << m;
  EXPECT_THROW(cross_entropy(scalar_tensor(1.0), scalar_tensor(0, kI64)), Error);
  m = error_message([&] { mse_loss(zeros({2, 3}), zeros({2, 3}, kF64)); });
  EXPECT_NE(m.find("mse_loss"), std::string::npos) << m;
  EXPECT_THROW(mse_loss(zeros({2, 3}), zeros({4})), Error);
  m = error_message([&] { binary_cross_entropy_with_logits(zeros({2, 3}), zeros({3})); });
  EXPECT_NE(m.find("target of shape [3] must have the shape of logits [2, 3]"), std::string::npos) << m;
  m = error_message([&] { binary_cross_entropy_with_logits(zeros({2, 3}), zeros({2, 3}), Reduction::Mean, ones({2})); });
  EXPECT_NE(m.find("pos_weight of shape [2] does not broadcast to the logits' shape [2, 3]"), std::string::npos) << m;
}
