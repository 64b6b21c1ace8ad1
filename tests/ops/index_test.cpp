#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {

std::vector<float> f32s(const Tensor& t) { return t.to_vector<float>(); }
std::vector<int64_t> i64s(const Tensor& t) { return t.to_vector<int64_t>(); }
// An i64 index tensor: 1-D unless a shape is given (even for one value).
Tensor idx64(std::vector<int64_t> v, Shape s = {}) {
  if (s.empty()) s = {static_cast<int64_t>(v.size())};
  return from_vector<int64_t>(v, s);
}

// The message of the Error that f throws (fails the test when it throws nothing).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "expected a trident::Error";
  return "";
}
#define EXPECT_ERROR_HAS(expr, text)                                    \
  do {                                                                  \
    const std::string _m = error_of([&] { (void)(expr); });             \
    EXPECT_NE(_m.find(text), std::string::npos) << "message: " << _m;   \
  } while (0)

// A fresh tensor whose elements weigh y's differently: gradcheck of a view must not return the
// view itself (perturbing the input would change it after the fact).
Tensor weighted(const Tensor& y) {
  return mul(y, add(reshape(arange(static_cast<double>(y.numel()), kF64), y.sizes()), 1.0));
}

// Restores the thread count when a test that changes it ends.
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// views: slice, narrow, select, split, chunk
// ---------------------------------------------------------------------------------------------

TEST(IndexViews, SliceFollowsPythonRules) {
  Tensor a = arange(10, kF32);
  EXPECT_EQ(f32s(slice(a, 0, 2, 8, 3)), (std::vector<float>{2, 5}));        // a[2:8:3]
  EXPECT_EQ(f32s(slice(a, 0, -3)), (std::vector<float>{7, 8, 9}));          // a[-3:]
  EXPECT_EQ(f32s(slice(a, 0, std::nullopt, -7)), (std::vector<float>{0, 1, 2}));  // a[:-7]
  EXPECT_EQ(slice(a, 0, -100, 100).numel(), 10);                             // clamped
  EXPECT_EQ(slice(a, 0, 5, 2).sizes(), (Shape{0}));                          // end < start
  EXPECT_EQ(slice(a, 0, 12, 20).sizes(), (Shape{0}));
  EXPECT_EQ(f32s(slice(a, 0, std::nullopt, std::nullopt, 4)), (std::vector<float>{0, 4, 8}));
  EXPECT_EQ(slice(a, 0, 2, 8, 3).storage(), a.storage());  // a view
  Tensor m = reshape(arange(12, kF32), {3, 4});
  Tensor s = slice(m, -1, 1, 3);
  EXPECT_EQ(s.sizes(), (Shape{3, 2}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(f32s(s), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(f32s(slice(transpose(m, 0, 1), 1, 1)), (std::vector<float>{4, 8, 5, 9, 6, 10, 7, 11}));
  EXPECT_ERROR_HAS(slice(a, 0, 0, 5, 0), "step must be positive, got 0");
  EXPECT_ERROR_HAS(slice(m, 2), "dim 2 out of range");
  EXPECT_ERROR_HAS(slice(scalar_tensor(1), 0), "at least 1 dim");
}

TEST(IndexViews, NarrowAndSelect) {
  Tensor m = reshape(arange(12, kF32), {3, 4});
  EXPECT_EQ(f32s(narrow(m, 0, -2, 2)), (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(narrow(m, 1, 4, 0).sizes(), (Shape{3, 0}));
  EXPECT_ERROR_HAS(narrow(m, 1, 3, 2), "start 3 + length 2 exceeds dim 1 of size 4");
  EXPECT_ERROR_HAS(narrow(m, 1, -5, 1), "start -5 is out of range");
  Tensor c = select(m, 1, -1);
  EXPECT_EQ(c.sizes(), (Shape{3}));
  EXPECT_EQ(f32s(c), (std::vector<float>{3, 7, 11}));
  EXPECT_EQ(c.storage(), m.storage());
  EXPECT_EQ(f32s(select(m, 0, 1)), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(select(arange(3, kF32), 0, 2).dim(), 0);
  EXPECT_ERROR_HAS(select(m, 0, 3), "index 3 is out of range for dim 0 of size 3");
  EXPECT_ERROR_HAS(select(m, 0, -4), "expected -3 to 2");
  EXPECT_ERROR_HAS(select(m, -3, 0), "dim -3 out of range");
}

TEST(IndexViews, SplitAndChunk) {
  Tensor x = arange(10, kF32);
  std::vector<Tensor> p = split(x, 4);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(f32s(p[2]), (std::vector<float>{8, 9}));
  EXPECT_EQ(p[1].storage(), x.storage());
  p = split(x, {3, 7});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(f32s(p[0]), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(p[1].sizes(), (Shape{7}));
  EXPECT_EQ(split(x, {0, 10}).front().sizes(), (Shape{0}));
  // A one-element braced list is a list of sizes, not a split size.
  EXPECT_ERROR_HAS(split(x, {4}), "split sizes [4] sum to 4 but dim 0 of the input (shape [10]) has size 10");
  EXPECT_ERROR_HAS(split(x, {2, 2}), "sum to 4");
  EXPECT_ERROR_HAS(split(x, {12, -2}), "non-negative");
  EXPECT_ERROR_HAS(split(x, 0), "split_size must be positive");
  EXPECT_EQ(split(zeros({0}), 2).size(), 1u);  // PyTorch: one empty piece
  auto sizes_of = [](const std::vector<Tensor>& ts) {
    std::vector<int64_t> s;
    for (const Tensor& t : ts) s.push_back(t.numel());
    return s;
  };
  // PyTorch 1.13: zeros(5).chunk(3) -> sizes 2, 2, 1; chunk(6) -> five of 1; zeros(0).chunk(3) -> three empty.
  EXPECT_EQ(sizes_of(chunk(zeros({5}), 3)), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(sizes_of(chunk(zeros({5}), 6)), (std::vector<int64_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(sizes_of(chunk(zeros({0}), 3)), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_ERROR_HAS(chunk(x, 0), "chunks must be positive");
  // Along a dim of a non-contiguous tensor.
  Tensor m = transpose(reshape(arange(12, kF32), {3, 4}), 0, 1);  // [4, 3]
  std::vector<Tensor> q = chunk(m, 2, 1);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(f32s(q[0]), (std::vector<float>{0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_EQ(f32s(q[1]), (std::vector<float>{8, 9, 10, 11}));
}

// ---------------------------------------------------------------------------------------------
// cat, stack, pad
// ---------------------------------------------------------------------------------------------

TEST(IndexJoin, CatKnownValuesAndLegacyEmpty) {
  Tensor a = reshape(arange(6, kF32), {2, 3});
  Tensor b = full({1, 3}, 9, kF32);
  EXPECT_EQ(f32s(cat({a, b})), (std::vector<float>{0, 1, 2, 3, 4, 5, 9, 9, 9}));
  Tensor c = full({2, 1}, 7, kF32);
  Tensor r = cat({a, c, transpose(a, 0, 1).contiguous().as_strided({2, 3}, {1, 2}, 0)}, -1);
  EXPECT_EQ(r.sizes(), (Shape{2, 7}));
  EXPECT_EQ(f32s(r), (std::vector<float>{0, 1, 2, 7, 0, 1, 2, 3, 4, 5, 7, 3, 4, 5}));
  EXPECT_EQ(f32s(cat({transpose(a, 0, 1)}, 0)), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  // 1-D tensors of shape [0] are skipped, whatever their neighbours' shapes (PyTorch's rule).
  EXPECT_EQ(f32s(cat({zeros({0}), a, zeros({0})}, 1)), f32s(a));
  EXPECT_EQ(cat({zeros({0}), zeros({0})}).sizes(), (Shape{0}));
  EXPECT_EQ(cat({zeros({2, 0}), a}, 1).sizes(), (Shape{2, 3}));
  EXPECT_EQ(i64s(cat({idx64({1, 2}), idx64({3})})), (std::vector<int64_t>{1, 2, 3}));
}

TEST(IndexJoin, CatErrorsNameTheMismatch) {
  Tensor a = zeros({2, 3});
  EXPECT_ERROR_HAS(cat({a, zeros({2, 4})}, 0), "tensor 1 has shape [2, 4] and tensor 0 has shape [2, 3] (they differ in dim 1)");
  EXPECT_ERROR_HAS(cat({a, zeros({2, 3}, kF64)}, 0), "tensor 1 is f64 (shape [2, 3]) and tensor 0 is f32");
  EXPECT_ERROR_HAS(cat({a, zeros({2, 3, 1})}, 0), "tensor 1 has 3 dims");
  EXPECT_ERROR_HAS(cat({a, a}, 2), "dim 2 out of range");
  EXPECT_ERROR_HAS(cat({}), "non-empty list");
  EXPECT_ERROR_HAS(cat({scalar_tensor(1)}), "at least 1 dim");
}

TEST(IndexJoin, Stack) {
  Tensor a = reshape(arange(6, kF32), {2, 3});
  Tensor b = add(a, 10.0);
  Tensor s = stack({a, b});
  EXPECT_EQ(s.sizes(), (Shape{2, 2, 3}));
  EXPECT_EQ(f32s(select(s, 0, 1)), f32s(b));
  Tensor t = stack({a, transpose(transpose(b, 0, 1), 0, 1)}, -1);
  EXPECT_EQ(t.sizes(), (Shape{2, 3, 2}));
  EXPECT_EQ(f32s(t), (std::vector<float>{0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15}));
  EXPECT_EQ(stack({scalar_tensor(1), scalar_tensor(2)}).sizes(), (Shape{2}));
  EXPECT_ERROR_HAS(stack({a, zeros({3, 2})}), "tensor 1 has shape [3, 2] and tensor 0 has shape [2, 3]");
  EXPECT_ERROR_HAS(stack({a, zeros({2, 3}, kF64)}), "tensor 1 is f64");
  EXPECT_ERROR_HAS(stack({a}, 3), "dim 3 out of range");
}

TEST(IndexJoin, PadConstant) {
  Tensor x = reshape(arange(6, kF32), {2, 3});
  // PyTorch 1.13: F.pad(x, (1, -1, 0, 1), value=9) -> [[9, 0, 1], [9, 3, 4], [9, 9, 9]]
  Tensor p = pad(x, {1, -1, 0, 1}, 9);
  EXPECT_EQ(p.sizes(), (Shape{3, 3}));
  EXPECT_EQ(f32s(p), (std::vector<float>{9, 0, 1, 9, 3, 4, 9, 9, 9}));
  // PyTorch 1.13: F.pad(x, (-1, 2), value=-1) -> [[1, 2, -1, -1], [4, 5, -1, -1]]
  EXPECT_EQ(f32s(pad(x, {-1, 2}, -1)), (std::vector<float>{1, 2, -1, -1, 4, 5, -1, -1}));
  EXPECT_EQ(pad(x, {-3, 0}).sizes(), (Shape{2, 0}));  // cropped away entirely (PyTorch agrees)
  EXPECT_EQ(f32s(pad(transpose(x, 0, 1), {0, 0, 1, 0})), (std::vector<float>{0, 0, 0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(i64s(pad(idx64({1, 2}), {1, 1}, 7)), (std::vector<int64_t>{7, 1, 2, 7}));
  EXPECT_EQ(f32s(pad(x, {})), f32s(x));
  EXPECT_ERROR_HAS(pad(x, {1}), "even length");
  EXPECT_ERROR_HAS(pad(x, {1, 1, 1, 1, 1, 1}), "address 3 dims but the input (shape [2, 3]) has 2");
  EXPECT_ERROR_HAS(pad(x, {-4, 0}), "give a negative size -1");
}

// ---------------------------------------------------------------------------------------------
// index_select, gather, scatter_add
// ---------------------------------------------------------------------------------------------

TEST(IndexSelect, IndexSelectGatherScatterAddKnownValues) {
  // PyTorch 1.13 on x = [[1, 2, 3], [4, 5, 6]]:
  //   index_select(x, 1, [2, 0, 2]) -> [[3, 1, 3], [6, 4, 6]]
  //   gather(x, 1, [[2, 0], [1, 1]]) -> [[3, 1], [5, 5]];  gather(x, 0, [[1, 0, 1]]) -> [[4, 2, 6]]
  //   zeros(3, 2).scatter_add(0, [[0, 2], [0, 1], [2, 2]], [[1, 2], [3, 4], [5, 6]]) -> [[4, 0], [0, 4], [5, 8]]
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(f32s(index_select(x, 1, idx64({2, 0, 2}))), (std::vector<float>{3, 1, 3, 6, 4, 6}));
  EXPECT_EQ(f32s(index_select(x, 0, from_vector<int32_t>({1}))), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(index_select(x, 0, scalar_tensor(1, kI64)).sizes(), (Shape{1, 3}));
  EXPECT_EQ(index_select(x, 1, zeros({0}, kI64)).sizes(), (Shape{2, 0}));
  EXPECT_EQ(f32s(index_select(transpose(x, 0, 1), 0, idx64({2, 0}))), (std::vector<float>{3, 6, 1, 4}));
  EXPECT_EQ(f32s(gather(x, 1, idx64({2, 0, 1, 1}, {2, 2}))), (std::vector<float>{3, 1, 5, 5}));
  EXPECT_EQ(f32s(gather(x, 0, idx64({1, 0, 1}, {1, 3}))), (std::vector<float>{4, 2, 6}));
  EXPECT_EQ(f32s(gather(transpose(x, 0, 1), 1, from_vector<int32_t>({1, 0, 0}, {3, 1}))), (std::vector<float>{4, 2, 3}));
  Tensor idx = idx64({0, 2, 0, 1, 2, 2}, {3, 2});
  Tensor src = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(f32s(scatter_add(zeros({3, 2}), 0, idx, src)), (std::vector<float>{4, 0, 0, 4, 5, 8}));
  EXPECT_EQ(f32s(scatter_add(ones({3, 2}), 0, idx, src)), (std::vector<float>{5, 1, 1, 5, 6, 9}));
  // src larger than index: only index's part of src is used.
  Tensor big_src = from_vector<float>({1, 2, 100, 3, 4, 100, 5, 6, 100, 100, 100, 100}, {4, 3});
  EXPECT_EQ(f32s(scatter_add(zeros({3, 2}), 0, idx, big_src)), (std::vector<float>{4, 0, 0, 4, 5, 8}));
  // Along the last dim, with repeated destinations, in i64.
  EXPECT_EQ(i64s(scatter_add(zeros({2, 2}, kI64), 1, idx64({1, 1, 0, 1}, {2, 2}), idx64({1, 2, 3, 4}, {2, 2}))),
            (std::vector<int64_t>{0, 3, 3, 4}));
}

TEST(IndexSelect, OutOfRangeIndicesNameValuePositionAndRange) {
  Tensor x = zeros({2, 3});
  EXPECT_ERROR_HAS(index_select(x, 1, idx64({0, 3})),
                   "index_select: index 3 at position [1] of the index tensor (shape [2]) is out of range for dim 1 "
                   "of the input (shape [2, 3]): valid indices are 0 to 2");
  EXPECT_ERROR_HAS(index_select(x, 0, idx64({-1})), "index -1 at position [0]");
  EXPECT_ERROR_HAS(gather(x, 1, idx64({0, 1, 5, 0}, {2, 2})),
                   "gather: index 5 at position [1, 0] of the index tensor (shape [2, 2]) is out of range for dim 1 "
                   "of the input (shape [2, 3]): valid indices are 0 to 2");
  EXPECT_ERROR_HAS(gather(x, 0, idx64({0, -2}, {1, 2})), "index -2 at position [0, 1]");
  EXPECT_ERROR_HAS(scatter_add(x, 0, idx64({2}, {1, 1}), ones({1, 1})),
                   "scatter_add: index 2 at position [0, 0] of the index tensor (shape [1, 1]) is out of range for dim 0 "
                   "of the input (shape [2, 3]): valid indices are 0 to 1");
  // A large index tensor with one bad entry far in (checked as it is read, reported exactly).
  Tensor big = zeros({1000, 64}, kI64);
  big.data<int64_t>()[700 * 64 + 5] = 3;
  EXPECT_ERROR_HAS(gather(zeros({1000, 3}), 1, big), "index 3 at position [700, 5]");
  EXPECT_ERROR_HAS(scatter_add(zeros({1000, 3}), 1, big, zeros({1000, 64})), "index 3 at position [700, 5]");
  // Shapes and dtypes.
  EXPECT_ERROR_HAS(index_select(x, 0, zeros({2}, kF32)), "index must be an i64 or i32 tensor, got f32");
  EXPECT_ERROR_HAS(index_select(x, 0, zeros({1, 1}, kI64)), "index must be 1-D");
  EXPECT_ERROR_HAS(index_select(x, 2, idx64({0})), "dim 2 out of range");
  EXPECT_ERROR_HAS(gather(x, 1, zeros({2}, kI64)), "must have as many dims as the input");
  EXPECT_ERROR_HAS(gather(x, 1, zeros({3, 1}, kI64)), "is larger than the input (shape [2, 3]) in dim 0");
  EXPECT_ERROR_HAS(scatter_add(x, 0, zeros({1, 2}, kI64), zeros({1, 1})), "is larger than src (shape [1, 1]) in dim 1");
  EXPECT_ERROR_HAS(scatter_add(x, 0, zeros({1, 1}, kI64), zeros({1, 1}, kF64)), "same dtype");
}

// ---------------------------------------------------------------------------------------------
// embedding, one_hot
// ---------------------------------------------------------------------------------------------

TEST(IndexEmbedding, ForwardAndPaddingGradient) {
  Tensor w = reshape(arange(12, kF64), {4, 3});
  Tensor e = embedding(w, idx64({0, 2, 2, 3}, {2, 2}));
  EXPECT_EQ(e.sizes(), (Shape{2, 2, 3}));
  EXPECT_EQ(e.to_vector<double>(), (std::vector<double>{0, 1, 2, 6, 7, 8, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(embedding(w, from_vector<int32_t>({3})).to_vector<double>(), (std::vector<double>{9, 10, 11}));
  EXPECT_EQ(embedding(w, scalar_tensor(1, kI64)).sizes(), (Shape{3}));
  EXPECT_EQ(embedding(w, zeros({0, 5}, kI64)).sizes(), (Shape{0, 5, 3}));
  // PyTorch 1.13: F.embedding([[0, 2], [2, 3]], w, padding_idx=2).sum().backward() ->
  //   w.grad = [[1, 1, 1], [0, 0, 0], [0, 0, 0], [1, 1, 1]]: row 2 gets nothing, though it was read.
  for (int64_t pad_idx : {2, -2}) {
    w.set_requires_grad();
    Tensor y = embedding(w, idx64({0, 2, 2, 3}, {2, 2}), pad_idx);
    EXPECT_EQ(y.to_vector<double>()[3], 6.0);  // the forward still reads the padding row
    EXPECT_EQ(autograd::grad({sum(y)}, {w})[0].to_vector<double>(),
              (std::vector<double>{1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1}));
  }
  EXPECT_ERROR_HAS(embedding(w, idx64({0, 1, 2, 4}, {2, 2})),
                   "embedding: index 4 at position [1, 1] of the index tensor (shape [2, 2]) is out of range for a "
                   "weight of 4 rows: valid indices are 0 to 3");
  EXPECT_ERROR_HAS(embedding(w, idx64({-1})), "index -1 at position [0]");
  EXPECT_ERROR_HAS(embedding(w, idx64({0}), 4), "padding_idx 4 is out of range for a weight of 4 rows (expected -4 to 3)");
  EXPECT_ERROR_HAS(embedding(zeros({4}), idx64({0})), "weight must be 2-D");
  EXPECT_ERROR_HAS(embedding(w, zeros({2})), "indices must be an i64 or i32 tensor");
}

TEST(IndexEmbedding, BackwardSumsRepeatedRowsInParallel) {
  ThreadsGuard guard;
  Generator g(101);
  // Many repeats of few rows (counting sort), and few indices into a huge table (comparison
  // sort), each against a direct f64 accumulation, on 1 and 4 threads.
  struct Case {
    int64_t rows, n, used;
  };
  for (const Case& c : {Case{1000, 20000, 50}, Case{300000, 100, 300000}}) {
    const int64_t width = 33;
    Tensor idx = randint(0, c.used, {c.n / 4, 4}, kI64, &g);
    Tensor gout = randn({c.n / 4, 4, width}, kF32, &g);
    const std::vector<int64_t> iv = i64s(idx);
    const std::vector<float> gv = f32s(gout);
    std::vector<double> ref(static_cast<size_t>(c.rows * width), 0.0);
    for (size_t i = 0; i < iv.size(); ++i)
      if (iv[i] != 7)  // the padding row
        for (int64_t k = 0; k < width; ++k)
          ref[static_cast<size_t>(iv[i] * width + k)] += gv[i * static_cast<size_t>(width) + static_cast<size_t>(k)];
    for (int threads : {1, 4}) {
      set_num_threads(threads);
      Tensor w = zeros({c.rows, width}, TensorOptions(kF32).requires_grad());
      const std::vector<float> gw = f32s(autograd::grad({embedding(w, idx, 7)}, {w}, {gout})[0]);
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(gw[i], ref[i], 1e-4 * (1 + std::fabs(ref[i]))) << "rows " << c.rows << " threads " << threads << " at " << i;
    }
  }
}

TEST(IndexOneHot, KnownValuesAndErrors) {
  // PyTorch 1.13: F.one_hot([[0, 2], [3, 1]], 5) -> rows e0, e2, e3, e1 of length 5.
  Tensor o = one_hot(idx64({0, 2, 3, 1}, {2, 2}), 5);
  EXPECT_EQ(o.sizes(), (Shape{2, 2, 5}));
  EXPECT_EQ(o.dtype(), kI64);
  EXPECT_EQ(i64s(o), (std::vector<int64_t>{1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(one_hot(from_vector<int32_t>({1, 0})).sizes(), (Shape{2, 2}));  // inferred: max + 1
  EXPECT_EQ(one_hot(zeros({0}, kI64), 3).sizes(), (Shape{0, 3}));
  EXPECT_ERROR_HAS(one_hot(idx64({0, 3}), 3),
                   "one_hot: index 3 at position [1] of the index tensor (shape [2]) is out of range for num_classes 3: "
                   "valid indices are 0 to 2");
  EXPECT_ERROR_HAS(one_hot(idx64({-1}), 3), "index -1");
  EXPECT_ERROR_HAS(one_hot(zeros({0}, kI64)), "cannot infer num_classes");
  EXPECT_ERROR_HAS(one_hot(idx64({0}), -2), "num_classes must be -1");
  EXPECT_ERROR_HAS(one_hot(zeros({2}), 3), "i64 or i32");
}

// ---------------------------------------------------------------------------------------------
// gradients
// ---------------------------------------------------------------------------------------------

TEST(IndexGradcheck, Views) {
  Tensor x = rand_leaf({4, 5, 3}, 111);
  Tensor xt = rand_leaf_transposed({4, 5, 3}, 112);
  for (const Tensor& in : {x, xt}) {
    auto check = [&](const char* name, std::function<Tensor(const Tensor&)> f) {
      EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& v) { return weighted(f(v[0])); }, {in}))) << name;
    };
    check("slice", [](const Tensor& v) { return slice(v, 1, -4, 5, 2); });
    check("slice-empty", [](const Tensor& v) { return slice(v, 0, 3, 1); });
    check("narrow", [](const Tensor& v) { return narrow(v, 2, 1, 2); });
    check("select", [](const Tensor& v) { return select(v, 0, -1); });
    check("select-size1", [](const Tensor& v) { return select(narrow(v, 1, 2, 1), 1, 0); });
    check("slice-of-slice", [](const Tensor& v) { return slice(slice(v, 1, 1), 2, std::nullopt, std::nullopt, 2); });
    // split/chunk: every piece an output (one node, one backward for all), and a single piece used.
    EXPECT_TRUE(grad_ok(gradcheck(
        autograd::GradcheckFn([](const TensorList& v) {
          TensorList out;
          for (const Tensor& p : split(v[0], {1, 3, 0, 1}, 1)) out.push_back(weighted(p));
          return out;
        }),
        {in})));
    EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(chunk(v[0], 3, 0)[1]); }, {in})));
    EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(split(v[0], 2, -1)[1]); }, {in})));
  }
}

TEST(IndexGradcheck, CatStackPad) {
  Tensor a = rand_leaf({2, 3}, 121);
  Tensor b = rand_leaf_transposed({2, 4}, 122);  // non-contiguous
  Tensor c = rand_leaf({2, 0}, 123);             // empty along the cat dim
  Tensor legacy = rand_leaf({0}, 124);           // skipped by cat
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(cat({v[0], v[1], v[2]}, 1)); }, {a, b, c})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(cat({v[3], v[0], v[0]}, 0)); }, {a, b, c, legacy})));
  Tensor a2 = rand_leaf({2, 3}, 125);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(stack({v[0], v[1]}, 1)); }, {a, a2})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(stack({v[0], v[0], v[1]}, -1)); }, {a, a2})));
  Tensor x = rand_leaf_transposed({3, 4, 5}, 126);
  for (std::vector<int64_t> pads : {std::vector<int64_t>{1, 2}, {-1, 2, 0, -2}, {2, -3, 1, 1, -1, 0}, {-5, 0}})
    EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& v) { return weighted(pad(v[0], pads, 3.5)); }, {x})))
        << "pads " << pads.size();
}

TEST(IndexGradcheck, IndexSelectGatherScatterAddEmbedding) {
  Tensor x = rand_leaf({4, 5}, 131);
  Tensor xt = rand_leaf_transposed({4, 5}, 132);
  for (const Tensor& in : {x, xt}) {
    EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(index_select(v[0], 0, idx64({3, 0, 3, 3}))); }, {in})));
    EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(index_select(v[0], 1, from_vector<int32_t>({4, 1}))); }, {in})));
    EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(index_select(v[0], 1, zeros({0}, kI64))); }, {in})));
    Tensor gi = idx64({1, 1, 0, 3, 2, 2, 4, 0, 1}, {3, 3});  // smaller than x, with repeats
    EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& v) { return weighted(gather(v[0], 1, gi)); }, {in})));
    Tensor gi0 = idx64({3, 3, 0, 1, 0, 2}, {2, 3});
    EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& v) { return weighted(gather(v[0], 0, gi0)); }, {in})));
  }
  // scatter_add in both x and src; src larger than index (its extra entries get zero gradient).
  Tensor base = rand_leaf({3, 4}, 133);
  Tensor src = rand_leaf_transposed({4, 5}, 134);
  Tensor si = idx64({2, 0, 2, 1, 0, 0, 1, 1}, {2, 4});
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& v) { return weighted(scatter_add(v[0], 0, si, v[1])); }, {base, src})));
  Tensor si1 = idx64({3, 3, 0, 1, 1, 2}, {3, 2});
  EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& v) { return weighted(scatter_add(v[0], 1, si1, v[1])); }, {base, src})));
  Tensor s = rand_leaf({}, 135), ssrc = rand_leaf({}, 136);  // 0-dim
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return scatter_add(v[0], 0, scalar_tensor(0, kI64), v[1]); }, {s, ssrc})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return gather(v[0], 0, scalar_tensor(0, kI64)); }, {s})));
  // embedding (no padding row: padding is not the derivative of the forward, tested above).
  Tensor w = rand_leaf({5, 3}, 137);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(embedding(v[0], idx64({0, 4, 4, 1, 0, 2}, {2, 3}))); }, {w})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(embedding(v[0], from_vector<int32_t>({3}))); }, {w})));
  // max(dim)'s backward goes through scatter_add; check it on a 3-D tensor along the middle dim.
  Tensor m = rand_leaf({2, 4, 3}, 138);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& v) { return weighted(max(v[0], 1, true).values); }, {m})));
}

TEST(IndexEmbedding, HalfWeights) {
  Generator g(141);
  for (DType dt : {kF16, kBF16}) {
    Tensor w = randn({6, 4}, kF32, &g).to(dt);
    Tensor idx = idx64({5, 0, 5, 2});
    Tensor e = embedding(w, idx);
    EXPECT_EQ(e.dtype(), dt);
    EXPECT_EQ(e.to(kF32).to_vector<float>(), index_select(w.to(kF32), 0, idx).to_vector<float>());
    w.set_requires_grad();
    const std::vector<float> gw = autograd::grad({embedding(w, idx)}, {w}, {ones({4, 4}, dt)})[0].to(kF32).to_vector<float>();
    for (int64_t r = 0; r < 6; ++r)  // row 5 twice, rows 0 and 2 once
      EXPECT_EQ(gw[static_cast<size_t>(r * 4)], r == 5 ? 2.f : (r == 0 || r == 2) ? 1.f : 0.f) << dt << " row " << r;
    EXPECT_EQ(f32s(cat({w.detach(), w.detach()}).to(kF32)).size(), 48u);
  }
}
