// load_into: values copied into existing tensors, one message listing every problem.
#include "nn/nn_test_util.h"

namespace trident::nn {
namespace {

using testing::error_message;
using testing::expect_error;

StateDict target_params() {
  StateDict t;
  t["fc.weight"] = zeros({3, 2}, kF32).set_requires_grad();
  t["fc.bias"] = zeros({3}, kF32).set_requires_grad();
  t["emb.weight"] = zeros({4, 2}, kF32).set_requires_grad();
  t["step"] = zeros({}, kI64);
  return t;
}

TEST(StateDict, LoadIntoCopiesInPlaceKeepingHandles) {
  StateDict target = target_params();
  // Handles held elsewhere (an optimizer's list) must see the new values.
  const Tensor held = target.at("fc.weight");
  const void* ptr = held.data_ptr();
  const uint32_t version = held.version();
  StateDict source;
  source["fc.weight"] = arange(6.0, kF32).detach();
  source["fc.weight"] = reshape(source["fc.weight"], {3, 2});
  source["fc.bias"] = full({3}, 0.5, kF32);
  source["emb.weight"] = transpose(reshape(arange(8.0, kF32), {2, 4}), 0, 1);  // not contiguous
  source["step"] = scalar_tensor(42, kI64);
  const LoadResult r = load_into(target, source);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.loaded, (std::vector<std::string>{"emb.weight", "fc.bias", "fc.weight", "step"}));
  EXPECT_EQ(held.data_ptr(), ptr);
  EXPECT_GT(held.version(), version);
  EXPECT_TRUE(held.requires_grad());
  EXPECT_EQ(held.to_vector<double>(), std::vector<double>({0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(target.at("fc.bias").to_vector<double>(), std::vector<double>({0.5, 0.5, 0.5}));
  EXPECT_EQ(target.at("emb.weight").to_vector<double>(), std::vector<double>({0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_EQ(target.at("step").item<int64_t>(), 42);
  // The source is copied, not aliased.
  fill_(source["fc.bias"], 1.0);
  EXPECT_EQ(target.at("fc.bias").to_vector<double>(), std::vector<double>({0.5, 0.5, 0.5}));
}

TEST(StateDict, StrictErrorListsEverythingAndLoadsNothing) {
  StateDict target = target_params();
  StateDict source;
  source["fc.weight"] = ones({2, 3}, kF32);  // transposed shape
  source["fc.bias"] = ones({3}, kF64);       // wrong dtype
  source["emb.weight"] = ones({4, 2}, kF32);  // fine, but must not be loaded
  source["head.weight"] = ones({5}, kF32);    // unexpected
  source["head.bias"] = ones({5}, kF32);      // unexpected
  // "step" missing
  const std::string msg = error_message([&] { load_into(target, source, true); });
  EXPECT_EQ(msg,
            "load_into: state dict does not match: 1 missing, 2 unexpected, 2 mismatched\n"
            "  missing (in the target, not in the source):\n"
            "    step\n"
            "  unexpected (in the source, not in the target):\n"
            "    head.bias\n"
            "    head.weight\n"
            "  mismatched (target vs source):\n"
            "    fc.bias: expected [3] f32, got [3] f64\n"
            "    fc.weight: expected [3, 2] f32, got [2, 3] f32");
  EXPECT_EQ(target.at("emb.weight").to_vector<double>(), std::vector<double>(8, 0.0));
}

TEST(StateDict, NonStrictLoadsTheMatchingOnesAndReports) {
  StateDict target = target_params();
  StateDict source;
  source["fc.weight"] = ones({2, 3}, kF32);
  source["emb.weight"] = full({4, 2}, 3.0, kF32);
  source["extra"] = ones({1}, kF32);
  const LoadResult r = load_into(target, source, false);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.missing, (std::vector<std::string>{"fc.bias", "step"}));
  EXPECT_EQ(r.unexpected, (std::vector<std::string>{"extra"}));
  ASSERT_EQ(r.mismatched.size(), 1u);
  EXPECT_EQ(r.mismatched[0].name, "fc.weight");
  EXPECT_EQ(r.mismatched[0].expected_shape, Shape({3, 2}));
  EXPECT_EQ(r.mismatched[0].got_shape, Shape({2, 3}));
  EXPECT_EQ(r.loaded, (std::vector<std::string>{"emb.weight"}));
  EXPECT_EQ(target.at("emb.weight").to_vector<double>(), std::vector<double>(8, 3.0));
  EXPECT_EQ(target.at("fc.weight").to_vector<double>(), std::vector<double>(6, 0.0));
  EXPECT_NE(describe_load_problems(r).find("fc.weight: expected [3, 2] f32, got [2, 3] f32"), std::string::npos);
}

TEST(StateDict, UndefinedTensorsAreErrors) {
  StateDict target{{"a", Tensor()}};
  StateDict source{{"a", ones({1})}};
  expect_error([&] { load_into(target, source); }, {"target tensor 'a' is undefined"});
  expect_error([&] { load_into(source, target); }, {"source tensor 'a' is undefined"});
}

class StateDictFile : public testing::ScratchDir {};

TEST_F(StateDictFile, SaveLoadIntoRoundTrip) {
  StateDict params = target_params();
  fill_(params.at("fc.weight"), 1.25);
  fill_(params.at("step"), 7);
  save_safetensors(path("model.safetensors"), params);
  StateDict fresh = target_params();
  for (LoadMode mode : {LoadMode::Mmap, LoadMode::Copy}) {
    const LoadResult r = load_into(fresh, load_safetensors(path("model.safetensors"), mode).tensors);
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(fresh.at("fc.weight").to_vector<double>(), std::vector<double>(6, 1.25));
    EXPECT_EQ(fresh.at("step").item<int64_t>(), 7);
  }
}

}  // namespace
}  // namespace trident::nn
