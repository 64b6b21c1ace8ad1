#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

TEST(Unary, KnownValues) {
  Tensor x = from_vector<double>({-2, -0.5, 0, 0.5, 2});
  EXPECT_EQ(relu(x).to_vector<double>(), (std::vector<double>{0, 0, 0, 0.5, 2}));
  const std::vector<double> t = tanh(x).to_vector<double>();
  const double ref[] = {-0.9640275800758169, -0.46211715726000974, 0, 0.46211715726000974, 0.9640275800758169};
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], ref[i], 1e-15);
  EXPECT_EQ(relu(from_vector<float>({-1, 1}).to(kBF16)).to_vector<float>(), (std::vector<float>{0, 1}));
  EXPECT_THROW(relu(from_vector<int64_t>({1})), Error);
}

TEST(UnaryGradcheck, ReluAwayFromTheKinkAndTanh) {
  // relu's derivative is undefined at 0: the inputs stay at least 0.1 away from it.
  Tensor x = from_vector<double>({-1.5, -0.1, 0.1, 0.7, 2.0, -3.0}, {2, 3}).set_requires_grad();
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return relu(in[0]); }, {x})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return tanh(in[0]); }, {rand_leaf({3, 4}, 81)})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return tanh(in[0]); }, {rand_leaf_transposed({3, 4}, 82)})));
}

TEST(Unary, ReluGradientAtZeroIsZero) {
  Tensor x = from_vector<double>({0.0}).set_requires_grad();
  sum(relu(x)).backward();
  EXPECT_EQ(x.grad().item<double>(), 0.0);
}
