#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {


// Inputs and upstream gradients of the PyTorch comparisons below ([2, 3, 4] for layer norm,
// [3, 2, 4] for batch norm: channel 1 is offset by 4 to give it a large mean).
const std::vector<double> kLnX = {-0.8, 0.8600000000000001, -0.030000000000000027, 0.9299999999999995, 0.6799999999999999, -2.1, -0.2400000000000001, -0.3300000000000003, 0.26, -1.2600000000000002, 0.5000000000000001, -1.5899999999999987, -0.16000000000000036, -0.4199999999999995, 0.2899999999999999, 2.8499999999999996, -0.5799999999999998, 0.4199999999999995, 0.08000000000000018, 1.5900000000000014, 0.9000000000000006, 1.2600000000000002, -0.12999999999999956, 0.3300000000000003};
const std::vector<double> kLnG = {0.0, 0.8414709848078965, 0.9092974268256817, 0.1411200080598672, -0.7568024953079282, -0.9589242746631385, -0.27941549819892586, 0.6569865987187891, 0.9893582466233818, 0.4121184852417566, -0.5440211108893698, -0.9999902065507035, -0.5365729180004349, 0.4201670368266409, 0.9906073556948704, 0.6502878401571168, -0.2879033166650653, -0.9613974918795568, -0.750987246771676, 0.14987720966295234, 0.9129452507276277, 0.8366556385360561, -0.008851309290403876, -0.8462204041751706};
const std::vector<double> kBnX = {-1.5, -0.585, 0.32999999999999996, 1.245, 2.71, 3.625, 4.540000000000001, 5.455, -1.0799999999999996, -0.16499999999999915, 0.75, 1.6650000000000005, 3.1300000000000012, 4.045, 4.959999999999999, 5.875000000000002, -0.6599999999999993, 0.2549999999999999, 1.1700000000000017, -1.3649999999999989, 3.5500000000000003, 4.465000000000002, 5.380000000000001, 2.8450000000000006};
const std::vector<double> kBnG = {1.0, 0.7648421872844885, 0.16996714290024104, -0.5048461045998571, -0.9422223406686581, -0.9364566872907963, -0.4902608213407002, 0.18651236942257488, 0.7755658785102496, 0.9998586363834151, 0.7539022543433046, 0.15337386203786524, -0.5192886541166841, -0.9477216021311119, -0.9304262721047539, -0.4755369279959925, 0.2030048638187504, 0.7860702961410383, 0.9994345855010047, 0.7427491727036707, 0.1367372182078336, -0.5335843865891177, -0.9529529168871798, -0.9241328000731309};

// Direct reference: layer norm of each row of `cols` values, in f64 loops.
std::vector<double> ref_layer_norm(const std::vector<double>& x, int64_t cols, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(cols); ++r) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mu += x[r * static_cast<size_t>(cols) + static_cast<size_t>(j)];
    mu /= static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) {
      const double d = x[r * static_cast<size_t>(cols) + static_cast<size_t>(j)] - mu;
      var += d * d;
    }
    var /= static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) {
      const size_t i = r * static_cast<size_t>(cols) + static_cast<size_t>(j);
      y[i] = (x[i] - mu) / std::sqrt(var + eps);
    }
  }
  return y;
}

}  // namespace

TEST(LayerNorm, MatchesPyTorchWithAndWithoutAffine) {
  // PyTorch 1.13: F.layer_norm(x [2, 3, 4], (4,), weight, bias, eps=1e-5), backward with kLnG.
  const Tensor g = from_vector<double>(kLnG, {2, 3, 4});
  {
    Tensor x = from_vector<double>(kLnX, {2, 3, 4}).set_requires_grad();
    const Tensor y = layer_norm(x, {4});
    EXPECT_TRUE(all_close(y, from_vector<double>({-1.4652829599675148, 0.8735340722883266, -0.3804099992223354, 0.9721588869015237, 1.1703656899327108, -1.5927906735602284, 0.2559398430213784, 0.1664851406061392, 0.8561613761685111, -0.8069252586891725, 1.1187540027249876, -1.167990120204326, -0.6149190541166814, -0.814767746704602, -0.269027086176048, 1.6987138869973313, -1.2166850232800017, 0.054004296072479474, -0.37803007250736353, 1.540710799714886, 0.5829787266997064, 1.2599862802864614, -1.3540151071735116, -0.48894989981265735}, {2, 3, 4}), 1e-13, 1e-14));
    y.backward(g);
    EXPECT_TRUE(all_close(x.grad(), from_vector<double>({-0.3947293101417628, 0.35724043543974315, 0.6852754456861704, -0.6477865709841506, -0.6173149357938098, -0.35166836824312797, 0.011575402451969419, 0.9574079015849681, 0.8699953358285607, 0.7269244338108659, -0.884862956445062, -0.7120568131943645, -0.6078097252075125, 0.15929939322385567, 0.5111692883791208, -0.06265895639546418, 0.5362890383633927, -0.6477638698446596, -0.26879246064399576, 0.380267292125263, 0.7448085614213572, -0.03910826886303864, 0.8436935413846373, -1.5493938339429547}, {2, 3, 4}), 1e-12, 1e-14));
  }
  {
    Tensor x = from_vector<double>(kLnX, {2, 3, 4}).set_requires_grad();
    Tensor w = from_vector<double>({0.5, -1.0, 2.0, 1.5}).set_requires_grad();
    Tensor b = from_vector<double>({0.1, 0.2, -0.3, 0.0}).set_requires_grad();
    const Tensor y = layer_norm(x, {4}, w, b);
    EXPECT_TRUE(all_close(y, from_vector<double>({-0.6326414799837574, -0.6735340722883265, -1.060819998444671, 1.4582383303522857, 0.6851828449663554, 1.7927906735602284, 0.2118796860427568, 0.2497277109092088, 0.5280806880842556, 1.0069252586891726, 1.9375080054499751, -1.7519851803064888, -0.20745952705834067, 1.014767746704602, -0.838054172352096, 2.548070830495997, -0.5083425116400009, 0.14599570392752054, -1.0560601450147271, 2.3110661995723287, 0.3914893633498532, -1.0599862802864615, -3.008030214347023, -0.733424849718986}, {2, 3, 4}), 1e-13, 1e-14));
    y.backward(g);
    EXPECT_TRUE(all_close(x.grad(), from_vector<double>({-1.048955776456268, -1.2285953895460104, 1.9799160519071237, 0.29763511409515486, -0.059514337797626646, -0.06861449041971102, -0.6817491479265402, 0.8098779761438778, 0.9242873394751392, 0.5193218701514323, -0.9001398768875988, -0.5434693327389724, -0.4493187087624434, -0.5034144303575762, 1.1713300244640934, -0.21859688534407387, 0.40421421479969455, 1.348096990464974, -1.6254548025580826, -0.1268564027065862, 1.6815815768346836, -0.7045855622425413, 0.6592217373734712, -1.6362177519656136}, {2, 3, 4}), 1e-12, 1e-14));
    EXPECT_TRUE(all_close(w.grad(), from_vector<double>({1.1737788679450953, 2.5897868833415147, -0.996664828153256, 3.16387805979148}), 1e-12, 1e-14));
    EXPECT_TRUE(all_close(b.grad(), from_vector<double>({0.321024767377581, 0.5900903788696548, 0.31662961737017636, -0.24793895412714861}), 1e-12, 1e-14));
  }
  {
    // Over the last two dims, eps = 1e-3, parameters of shape [3, 4].
    Tensor x = from_vector<double>(kLnX, {2, 3, 4}).set_requires_grad();
    Tensor w = reshape(arange(-1.0, 2.0001, 3.0 / 11, kF64), {3, 4}).detach().set_requires_grad();
    Tensor b = reshape(arange(0.5, -0.5001, -1.0 / 11, kF64), {3, 4}).detach().set_requires_grad();
    const Tensor y = layer_norm(x, {3, 4}, w, b, 1e-3);
    EXPECT_TRUE(all_close(y, from_vector<double>({1.0661152869965274, -0.4448473015974557, 0.20858037372962854, 0.00044539005863045926, 0.22595090400281737, -0.6559946990394682, -0.03211176091253986, -0.20307755907366512, 0.41699315489840494, -1.8430714801253267, 0.9671220108131073, -3.288641969279188, 1.2422568250259625, 1.1506204274837477, 0.437379294165846, -0.22155627721221474, 0.028156571724576786, 0.0005231578971761074, -0.35488311192426863, 0.8859062424146353, 0.23181938192406024, 0.8054261181449073, -1.6358955754729583, -0.9391315827099701}, {2, 3, 4}), 1e-12, 1e-14));
    y.backward(g);
    EXPECT_TRUE(all_close(x.grad(), from_vector<double>({0.2807894221259235, -0.6277541761661161, -0.27635101736355705, -0.02433573198483613, -0.02935811197708027, 0.12429762891074614, 0.004318755215827974, 0.831347030105819, 1.3361036342166164, 0.9832038337041085, -0.9133991622646629, -1.6888621045227892, 0.741940973997445, -0.10853686789431696, -0.39357513786827036, -0.5105805283069206, 0.21895688771675592, -0.31010947205068545, -0.3843899556015282, -0.007197242877435839, 1.125381586519637, 1.2063455409683757, 0.14773934363138808, -1.7259751282344442}, {2, 3, 4}), 1e-12, 1e-14));
    EXPECT_TRUE(all_close(w.grad(), from_vector<double>({0.3982749105099189, 0.5596222041443359, -0.04051868716123062, 1.7813285577022833, -0.4031136439107259, 1.9685424860578178, 0.35930514150997495, 0.12032328416385413, 0.8939917667000136, 0.21425091723106746, -0.4271647680852478, 1.5801083821311845}, {3, 4}), 1e-12, 1e-14));
    EXPECT_TRUE(all_close(b.grad(), from_vector<double>({-0.5365729180004349, 1.2616380216345373, 1.8999047825205522, 0.7914078482169841, -1.0447058119729935, -1.9203217665426953, -1.030402744970602, 0.8068638083817414, 1.9023034973510096, 1.2487741237778127, -0.5528724201797737, -1.846210610725874}, {3, 4}), 1e-12, 1e-14));
  }
}

TEST(LayerNorm, F32AndHalfAgainstLoops) {
  // BERT/GPT-2 rows of 768, f32, with a mean far from 0; non-contiguous input.
  Generator gen(21);
  const Tensor x = add(mul(randn({33, 768}, kF32, &gen), 2.0), 50.0);
  const std::vector<double> want = ref_layer_norm(x.to_vector<double>(), 768, 1e-5);
  EXPECT_TRUE(all_close(layer_norm(x, {768}), from_vector<double>(want, {33, 768}), 2e-5, 2e-5));
  const Tensor xt = t(contiguous(t(x)));
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_TRUE(all_close(layer_norm(xt, {768}), from_vector<double>(want, {33, 768}), 2e-5, 2e-5));
  // f16 / bf16 are computed in f32: the same as normalizing the rounded values in f32, rounded once.
  for (DType dt : {kF16, kBF16}) {
    const Tensor xh = x.to(dt);
    const Tensor y = layer_norm(xh, {768});
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(all_close(y, layer_norm(xh.to(kF32), {768}).to(dt), 0, 0)) << dt;
  }
}

TEST(LayerNormGradcheck, AffineAndNot) {
  for (bool affine : {false, true}) {
    const Tensor w = affine ? rand_leaf({5}, 31) : Tensor(), b = affine ? rand_leaf({5}, 32) : Tensor();
    auto f = [&](const TensorList& in) { return layer_norm(in[0], {5}, in[1], in[2]); };
    EXPECT_TRUE(grad_ok(gradcheck(f, {rand_leaf({3, 5}, 33), w, b}))) << "affine " << affine;
    EXPECT_TRUE(grad_ok(gradcheck(f, {rand_leaf_transposed({2, 3, 5}, 34), w, b}))) << "transposed, affine " << affine;
    EXPECT_TRUE(grad_ok(gradcheck(f, {rand_leaf({5}, 35), w, b}))) << "one row, affine " << affine;
  }
  // Two normalized dims; only the weight requires grad; a size-1 normalized dim.
  const Tensor w = rand_leaf({2, 3}, 36);
  const Tensor b = rand_leaf({2, 3}, 37).detach();
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return layer_norm(in[0], {2, 3}, in[1], b, 1e-3); },
                                {rand_leaf({4, 2, 3}, 38), w})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return layer_norm(in[0], {1, 4}); }, {rand_leaf({3, 1, 4}, 39)})));
  // Many rows: dw and db are summed over several chunks.
  const Tensor wb = rand_leaf({3}, 40), bb = rand_leaf({3}, 41);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return layer_norm(in[0], {3}, in[1], in[2]); },
                                {rand_leaf({150, 3}, 42), wb, bb})));
  // Empty batch: an empty output and empty / zero gradients.
  Tensor e = zeros({0, 4}, kF64).set_requires_grad();
  Tensor ew = ones({4}, kF64).set_requires_grad();
  sum(layer_norm(e, {4}, ew)).backward();
  EXPECT_EQ(e.grad().sizes(), (Shape{0, 4}));
  EXPECT_EQ(ew.grad().to_vector<double>(), (std::vector<double>{0, 0, 0, 0}));
}

TEST(AddLayerNorm, HandComputedRow) {
  // x + r = [1, 2, 3, 6]: mean 3, biased variance (4 + 1 + 0 + 9) / 4 = 3.5, eps 0.
  const Tensor x = from_vector<double>({0.5, 2, 4, 1}, {1, 4}), r = from_vector<double>({0.5, 0, -1, 5}, {1, 4});
  const AddLayerNorm o = add_layer_norm(x, r, {4}, from_vector<double>({1, 2, 1, 1}), from_vector<double>({0, 0, 1, 0}), 0.0);
  EXPECT_EQ(o.sum.to_vector<double>(), (std::vector<double>{1, 2, 3, 6}));
  const double s = std::sqrt(3.5);
  EXPECT_TRUE(all_close(o.out, from_vector<double>({-2 / s, -2 / s, 1.0, 3 / s}, {1, 4}), 1e-15, 1e-15));
}

TEST(AddLayerNorm, EqualsAddThenLayerNormExactly) {
  // The sum is rounded to the dtype before it is normalized (f16 / bf16 included), so both
  // results equal add then layer_norm bit for bit, forward and backward; transposed inputs.
  Generator gen(77);
  for (DType dt : {kF32, kF64, kF16, kBF16}) {
    const Tensor x0 = randn({6, 40}, dt, &gen), r0 = t(contiguous(t(randn({6, 40}, dt, &gen))));
    const Tensor w0 = randn({40}, dt, &gen), b0 = randn({40}, dt, &gen);
    const Tensor gs = randn({6, 40}, dt, &gen), go = randn({6, 40}, dt, &gen);
    Tensor x = x0.clone().set_requires_grad(), r = r0.clone().set_requires_grad(), w = w0.clone().set_requires_grad(),
           b = b0.clone().set_requires_grad();
    const AddLayerNorm o = add_layer_norm(x, r, {40}, w, b);
    EXPECT_EQ(o.sum.dtype(), dt);
    EXPECT_EQ(o.out.dtype(), dt);
    add(sum(mul(o.sum, gs)), sum(mul(o.out, go))).backward();
    Tensor x2 = x0.clone().set_requires_grad(), r2 = r0.clone().set_requires_grad(), w2 = w0.clone().set_requires_grad(),
           b2 = b0.clone().set_requires_grad();
    const Tensor s2 = add(x2, r2), o2 = layer_norm(s2, {40}, w2, b2);
    add(sum(mul(s2, gs)), sum(mul(o2, go))).backward();
    EXPECT_TRUE(all_close(o.sum, s2, 0, 0)) << dt;
    EXPECT_TRUE(all_close(o.out, o2, 0, 0)) << dt;
    EXPECT_TRUE(all_close(x.grad(), x2.grad(), 0, 0)) << dt;
    EXPECT_TRUE(all_close(r.grad(), r2.grad(), 0, 0)) << dt;
    EXPECT_TRUE(all_close(w.grad(), w2.grad(), 0, 0)) << dt;
    EXPECT_TRUE(all_close(b.grad(), b2.grad(), 0, 0)) << dt;
  }
}

TEST(AddLayerNormGradcheck, BothOutputsAndEachInput) {
  // The loss uses both outputs (weighted differently), so x and residual get d sum + the layer
  // norm gradient; without affine, with only some inputs requiring grad, two normalized dims.
  const auto both = [](const AddLayerNorm& o) { return add(mul(o.sum, 0.7), o.out); };
  const Tensor w = rand_leaf({5}, 51), b = rand_leaf({5}, 52);
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return both(add_layer_norm(in[0], in[1], {5}, in[2], in[3])); },
                                {rand_leaf({3, 5}, 53), rand_leaf_transposed({3, 5}, 54), w, b})));
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return both(add_layer_norm(in[0], in[1], {5})); },
                                {rand_leaf({2, 3, 5}, 55), rand_leaf({2, 3, 5}, 56)})));
  const Tensor fixed = rand_leaf({4, 2, 3}, 57).detach();
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return both(add_layer_norm(in[0], fixed, {2, 3}, in[1])); },
                                {rand_leaf({4, 2, 3}, 58), rand_leaf({2, 3}, 59)})));
  // Only the normalized output used: the sum's gradient is zero, not missing.
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return add_layer_norm(in[0], in[1], {5}, w, b).out; },
                                {rand_leaf({3, 5}, 60), rand_leaf({3, 5}, 61)})));
}

TEST(AddLayerNorm, Errors) {
  std::string m = error_message([] { add_layer_norm(zeros({2, 4}), zeros({1, 4}), {4}); });
  EXPECT_NE(m.find("add_layer_norm: the input of shape [2, 4] and the residual of shape [1, 4] must have the same shape"),
            std::string::npos)
      << m;
  m = error_message([] { add_layer_norm(zeros({2, 4}), zeros({2, 4}, kF64), {4}); });
  EXPECT_NE(m.find("add_layer_norm"), std::string::npos) << m;
  m = error_message([] { add_layer_norm(zeros({2, 4}), zeros({2, 4}), {3}); });
  EXPECT_NE(m.find("add_layer_norm: normalized_shape [3] does not match the last dims of the input of shape [2, 4]"),
            std::string::npos)
      << m;
  m = error_message([] { add_layer_norm(zeros({2, 4}), Tensor(), {4}); });
  EXPECT_NE(m.find("add_layer_norm"), std::string::npos) << m;
}

TEST(BatchNorm, TrainingMatchesPyTorchAndUpdatesRunningStats) {
  // PyTorch 1.13: F.batch_norm(x [3, 2, 4], rm, rv, w, b, training=True, momentum=0.3, eps=1e-4),
  // backward with kBnG; then the running statistics, and again after a second batch 2x + 1.
  Tensor x = from_vector<double>(kBnX, {3, 2, 4}).set_requires_grad();
  Tensor w = from_vector<double>({1.5, -0.5}).set_requires_grad();
  Tensor b = from_vector<double>({0.25, 1.0}).set_requires_grad();
  Tensor rm = from_vector<double>({0.5, -1.0}), rv = from_vector<double>({2.0, 0.5});
  const uint32_t v0 = rm.version();
  const Tensor y = batch_norm(x, rm, rv, w, b, /*training=*/true, 0.3, 1e-4);
  EXPECT_TRUE(all_close(y, from_vector<double>({-1.9607267011551537, -0.6166636237086652, 0.727399453737823, 2.0714625311843116, 1.736908900385051, 1.2888878745695551, 0.8408668487540586, 0.392845822938563, -1.3437797147862731, 0.0002833626602158691, 1.344346440106703, 2.688409517553192, 1.5312599049287572, 1.0832388791132619, 0.6352178532977663, 0.18719682748226893, -0.7268327284173928, 0.6172303490290943, 1.9612934264755855, -1.7624223126794407, 1.3256109094724644, 0.8775898836569678, 0.4295688578414722, 1.6708074375598136}, {3, 2, 4}), 1e-13, 1e-14));
  EXPECT_TRUE(all_close(rm, from_vector<double>({0.3515000000000001, 0.5645000000000002}), 1e-14));
  EXPECT_TRUE(all_close(rv, from_vector<double>({1.7412349999999999, 0.691235}), 1e-14));
  EXPECT_GT(rm.version(), v0);  // an in-place write
  y.backward(from_vector<double>(kBnG, {3, 2, 4}));
  EXPECT_TRUE(all_close(x.grad(), from_vector<double>({0.18701257474734484, 0.1116116381560838, -0.4921856365851364, -1.213405848250327, 0.0906761875266534, 0.13139156424525744, -0.043545513283952036, -0.3313825794389466, -0.01871650230829472, 0.5807793346960315, 0.4895161485764208, -0.12258544988592818, -0.09642438630266312, 0.1568921956655881, 0.19196217614443226, 0.012768419923911558, -0.7358166213515053, 0.39068807349303314, 0.9741308492715375, -0.15102856055926064, -0.39765632644825427, -0.025901270004769522, 0.22297700625451305, 0.08824252571822977}, {3, 2, 4}), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(w.grad(), from_vector<double>({-2.4618531402692483, 1.1908272239420847}), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(b.grad(), from_vector<double>({6.843922775024171, -7.329333821567717}), 1e-12, 1e-14));
  batch_norm(add(mul(from_vector<double>(kBnX, {3, 2, 4}), 2.0), 1.0), rm, rv, w, b, true, 0.3, 1e-4);
  EXPECT_TRUE(all_close(rm, from_vector<double>({0.5490500000000003, 3.2241500000000003}), 1e-14));
  EXPECT_TRUE(all_close(rv, from_vector<double>({2.5838045, 1.8488045000000002}), 1e-14));
  // f32 running statistics with an f32 input update the same way.
  Tensor rm32 = from_vector<float>({0.5f, -1.0f}), rv32 = from_vector<float>({2.0f, 0.5f});
  batch_norm(from_vector<double>(kBnX, {3, 2, 4}).to(kF32), rm32, rv32, Tensor(), Tensor(), true, 0.3, 1e-4);
  EXPECT_TRUE(all_close(rm32, from_vector<double>({0.3515000000000001, 0.5645000000000002}).to(kF32), 1e-6));
  EXPECT_TRUE(all_close(rv32, from_vector<double>({1.7412349999999999, 0.691235}).to(kF32), 1e-6));
}

TEST(BatchNorm, EvalMatchesPyTorch) {
  // PyTorch 1.13: the same call with training=False: the running statistics normalize and do
  // not change.
  Tensor x = from_vector<double>(kBnX, {3, 2, 4}).set_requires_grad();
  Tensor w = from_vector<double>({1.5, -0.5}).set_requires_grad();
  Tensor b = from_vector<double>({0.25, 1.0}).set_requires_grad();
  const Tensor rm = from_vector<double>({0.5, -1.0}), rv = from_vector<double>({2.0, 0.5});
  const Tensor y = batch_norm(x, rm, rv, w, b, /*training=*/false, 0.3, 1e-4);
  EXPECT_TRUE(all_close(y, from_vector<double>({-1.8712673125397083, -0.9007875170527917, 0.06969227843412475, 1.0401720739210414, -1.6231038609302062, -2.270041875148842, -2.9169798893674783, -3.5639179035861135, -1.4258011769063692, -0.4553213814194521, 0.5151584140674635, 1.4856382095543805, -1.9200590149977774, -2.566997029216412, -3.2139350434350473, -3.860873057653685, -0.9803350412730301, -0.009855245786114386, 0.9606245497008041, -1.7280817689432768, -2.2170141690653473, -2.863952183283984, -3.510890197502619, -1.718553731880497}, {3, 2, 4}), 1e-13, 1e-14));
  EXPECT_EQ(rm.to_vector<double>(), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(rv.to_vector<double>(), (std::vector<double>{2.0, 0.5}));
  y.backward(from_vector<double>(kBnG, {3, 2, 4}));
  EXPECT_TRUE(all_close(x.grad(), from_vector<double>({1.0606336562698542, 0.8112173655689796, 0.18027287222002344, -0.5354567697753397, 0.666185191283734, 0.6621086663143931, 0.3466320898440983, -0.13187097475568654, 0.8225912734024676, 1.0604837212603322, 0.7996141044942248, 0.1626734800694492, 0.3671558149732411, 0.6700733675571645, 0.6578449451937678, 0.33622176599492654, 0.21531379095264508, 0.8337326122811966, 1.0600339586224767, 0.7877847707361035, -0.0966781469039958, 0.3772634136371941, 0.6737720958413647, 0.6533952333919332}, {3, 2, 4}), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(w.grad(), from_vector<double>({-4.173014616540914, -52.32979615552881}), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(b.grad(), from_vector<double>({6.843922775024171, -7.329333821567717}), 1e-12, 1e-14));
}

TEST(BatchNorm, TwoDimsWithoutAffineMatchesPyTorch) {
  // PyTorch 1.13: F.batch_norm(x [4, 3], None, None, training=True) and its gradient.
  Tensor x = from_vector<double>({1.0, -2.0, 0.5, 3.0, 0.0, -1.5, -0.5, 1.0, 2.0, 2.0, 2.5, 0.0}, {4, 3}).set_requires_grad();
  const Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  EXPECT_TRUE(all_close(y, from_vector<double>({-0.2900200793652259, -1.4529635955198996, 0.19999936000307197, 1.2567536772493126, -0.22941530455577364, -1.3999955200215037, -1.4501003968261297, 0.38235884092628936, 1.3999955200215037, 0.4833667989420434, 1.3000200591493838, -0.19999936000307197}, {4, 3}), 1e-13, 1e-14));
  y.backward(from_vector<double>({0.5, 1.0, -1.0, 2.0, 0.0, 0.5, -1.0, 1.5, 1.0, 0.25, -0.5, 2.0}, {4, 3}));
  EXPECT_TRUE(all_close(x.grad(), from_vector<double>({0.2692385031755036, -0.033986180486535136, -1.303995801620275, 0.25117576313614504, -0.35955127061906833, -0.07199994879938561, -0.0072345211602035915, 0.7012144752787911, 0.2719993088024576, -0.513179745151445, -0.30767702417318754, 1.103996441617203}, {4, 3}), 1e-12, 1e-14));
}

TEST(BatchNorm, F32LargeFeatureMapsAgainstLoops) {
  // [8, 16, 12, 12] f32 (AmoebaNet-like), channel means far from 0: against f64 loops.
  Generator gen(22);
  const Tensor x = add(mul(randn({8, 16, 12, 12}, kF32, &gen), 3.0), 20.0);
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> want(v.size());
  const int64_t n = 8, c = 16, s = 144;
  for (int64_t ch = 0; ch < c; ++ch) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) mu += v[static_cast<size_t>((i * c + ch) * s + j)];
    mu /= static_cast<double>(n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) var += std::pow(v[static_cast<size_t>((i * c + ch) * s + j)] - mu, 2);
    var /= static_cast<double>(n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const size_t k = static_cast<size_t>((i * c + ch) * s + j);
        want[k] = (v[k] - mu) / std::sqrt(var + 1e-5);
      }
  }
  EXPECT_TRUE(all_close(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true), from_vector<double>(want, x.sizes()),
                        1e-5, 2e-5));
}

// NOTE [Batch norm gradients of channel slices]: a gradient that is a channel slice of a larger
// tensor (cat's backward) is read in place; every result is that of its contiguous copy, bit for
// bit, in f64, f32 and with a bf16 input; and other layouts (a transposed gradient) still work.
TEST(BatchNorm, GradientsOfChannelSlicesGiveTheContiguousResults) {
  for (const DType dt : {kF64, kF32, kBF16}) {
    for (const bool training : {true, false}) {
      for (const int64_t n : {int64_t{1}, int64_t{3}}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " training " << training << " n " << n);
        Generator gen(31);
        const DType pd = dt == kBF16 ? kF32 : dt;
        const Tensor x0 = randn({n, 4, 5, 7}, pd, &gen).to(dt), w0 = randn({4}, pd, &gen), b0 = randn({4}, pd, &gen);
        const Tensor big = randn({n, 9, 5, 7}, pd, &gen);
        std::vector<std::vector<double>> results[3];
        int64_t allocations[3] = {0, 0, 0};
        for (int route = 0; route < 3; ++route) {  // 0: the slice; 1: its contiguous copy; 2: transposed
          Tensor x = x0.clone().set_requires_grad(), w = w0.clone().set_requires_grad(), b = b0.clone().set_requires_grad();
          const Tensor rm = zeros({4}, pd), rv = ones({4}, pd);
          Tensor y;
          {
            autocast::Guard ac(kBF16, dt == kBF16);  // a bf16 input: autocast's batch norm (f32 out)
            y = batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5);
          }
          Tensor gy = narrow(big, 1, 3, 4);
          if (route == 0 && n > 1) {  // one image's slice is contiguous
            ASSERT_FALSE(gy.is_contiguous());
          }
          if (route == 1) gy = gy.contiguous();
          if (route == 2) gy = transpose(transpose(gy, 2, 3).contiguous(), 2, 3);
          const int64_t before = memory_stats(Device::cpu()).total_allocations;
          y.backward(gy);
          allocations[route] = memory_stats(Device::cpu()).total_allocations - before;
          for (const Tensor& t : {x.grad(), w.grad(), b.grad()}) results[route].push_back(t.to(kF64).to_vector<double>());
        }
        for (int k = 0; k < 3; ++k) {
          EXPECT_EQ(results[0][static_cast<size_t>(k)], results[1][static_cast<size_t>(k)]) << "slice, gradient " << k;
          EXPECT_EQ(results[2][static_cast<size_t>(k)], results[1][static_cast<size_t>(k)]) << "transposed, gradient " << k;
        }
        EXPECT_EQ(allocations[0], allocations[1]) << "the slice is read in place, not copied";
      }
    }
  }
}

TEST(BatchNormGradcheck, TrainingAndEval) {
  const Tensor rm = from_vector<double>({0.3, -0.2, 0.1}), rv = from_vector<double>({1.5, 0.7, 2.0});
  for (bool training : {true, false}) {
    for (bool affine : {false, true}) {
      const Tensor w = affine ? rand_leaf({3}, 51) : Tensor(), b = affine ? rand_leaf({3}, 52) : Tensor();
      // Copies of the running statistics per call: training updates them in place.
      auto f = [&](const TensorList& in) {
        return batch_norm(in[0], rm.clone(), rv.clone(), in[1], in[2], training, 0.1, 1e-3);
      };
      EXPECT_TRUE(grad_ok(gradcheck(f, {rand_leaf({4, 3, 5}, 53), w, b}))) << "training " << training << " affine " << affine;
      EXPECT_TRUE(grad_ok(gradcheck(f, {rand_leaf_transposed({2, 3, 2, 2}, 54), w, b})))
          << "transposed, training " << training << " affine " << affine;
      EXPECT_TRUE(grad_ok(gradcheck(f, {rand_leaf({5, 3}, 55), w, b}))) << "2-D, training " << training << " affine " << affine;
    }
  }
  // Without running statistics (training only), and with only the bias requiring grad.
  const Tensor w = rand_leaf({2}, 56).detach();
  EXPECT_TRUE(grad_ok(gradcheck(
      [&](const TensorList& in) { return batch_norm(in[0], Tensor(), Tensor(), w, in[1], true); },
      {rand_leaf({3, 2, 2}, 57), rand_leaf({2}, 58)})));
}

TEST(Norm, Errors) {
  std::string m = error_message([] { layer_norm(zeros({2, 3, 4}), {5}); });
  EXPECT_NE(m.find("layer_norm: normalized_shape [5] does not match the last dims of the input of shape [2, 3, 4]"),
            std::string::npos)
      << m;
  m = error_message([] { layer_norm(zeros({2, 4}), {4}, ones({3})); });
  EXPECT_NE(m.find("layer_norm: weight of shape [3] does not match normalized_shape [4]"), std::string::npos) << m;
  m = error_message([] { layer_norm(zeros({2, 4}), {4}, Tensor(), ones({4}, kF64)); });
  EXPECT_NE(m.find("bias has dtype f64 but the input has f32"), std::string::npos) << m;
  EXPECT_THROW(layer_norm(zeros({2, 4}), {}), Error);
  EXPECT_THROW(layer_norm(zeros({2, 4}, kI64), {4}), Error);
  m = error_message([] { batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true); });
  EXPECT_NE(m.find("batch_norm: expected an input of at least 2 dims [N, C, *], got shape [4]"), std::string::npos) << m;
  m = error_message([] { batch_norm(zeros({1, 3}), zeros({3}), ones({3}), Tensor(), Tensor(), true); });
  EXPECT_NE(m.find("expected more than 1 value per channel when training, got input of shape [1, 3]"), std::string::npos)
      << m;
  m = error_message([] { batch_norm(zeros({2, 3}), Tensor(), Tensor(), Tensor(), Tensor(), false); });
  EXPECT_NE(m.find("running_mean and running_var are required in eval mode"), std::string::npos) << m;
  m = error_message([] { batch_norm(zeros({2, 3, 5}), zeros({4}), ones({4}), Tensor(), Tensor(), false); });
  EXPECT_NE(m.find("running_mean of shape [4] does not match the channels [3] (input of shape [2, 3, 5])"),
            std::string::npos)
      << m;
  m = error_message([] { batch_norm(zeros({2, 3}), zeros({3}), Tensor(), Tensor(), Tensor(), true); });
  EXPECT_NE(m.find("must be given together"), std::string::npos) << m;
  m = error_message([] { batch_norm(zeros({2, 3}), Tensor(), Tensor(), ones({2}), Tensor(), true); });
  EXPECT_NE(m.find("batch_norm: weight of shape [2] does not match the channels [3]"), std::string::npos) << m;
  // One value per channel is fine in eval mode; an empty batch is fine in training.
  EXPECT_NO_THROW(batch_norm(ones({1, 3}), zeros({3}), ones({3}), Tensor(), Tensor(), false));
  Tensor rm = zeros({3}), rv = ones({3});
  EXPECT_EQ(batch_norm(zeros({0, 3}), rm, rv, Tensor(), Tensor(), true).sizes(), (Shape{0, 3}));
  EXPECT_EQ(rm.to_vector<float>(), (std::vector<float>{0, 0, 0}));  // not updated, as PyTorch
}
