// The README's "A taste" snippet, kept compiling and correct.
#include "test_util.h"

using namespace trident;

TEST(Readme, TasteSnippetRunsAndItsGradientChecks) {
  Tensor w = randn({3, 2}, kF64).set_requires_grad();
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor loss = mean(mul(matmul(x, w), matmul(x, w)));
  loss.backward();  // w.grad() now holds d loss / d w
  auto r = gradcheck([&](const autograd::TensorList& in) { return mean(matmul(x, in[0])); }, {w});
  EXPECT_TRUE(r.ok) << r.report;
  // d/dw mean((xw)^2) = 2 x^T (x w) / numel
  Tensor expected = div(mul(matmul(transpose(x, 0, 1), matmul(x, w.detach())), 2.0), 4.0);
  EXPECT_TRUE(trident::testing::all_close(w.grad(), expected, 1e-12));

  Tensor v = randn({3, 2}, kF64);
  Tensor y = matmul(x, w);  // (backward() above freed the first graph)
  Tensor g = autograd::grad({mean(mul(y, y))}, {w}, {}, /*retain_graph=*/false, /*allow_unused=*/false,
                            /*create_graph=*/true)[0];
  Tensor hv = autograd::grad({sum(mul(g, v))}, {w})[0];  // here 2 x^T x v / 4
  // The Hessian of mean((xw)^2) over its 4 elements is 2 x^T x / 4 on each column of w.
  EXPECT_TRUE(trident::testing::all_close(hv, div(mul(matmul(matmul(transpose(x, 0, 1), x), v), 2.0), 4.0), 1e-12));
}
