// Samplers and the loader (data/sampler.h, data/loader.h): orders, the distributed partition,
// batching, determinism across worker counts, in-order delivery, resume from a saved position,
// errors from a dataset, shutdown, the prefetch bound and the pinned-memory hook.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "data/image_datasets.h"
#include "data/image_test_util.h"
#include "data/loader.h"
#include "test_util.h"

using namespace trident;
using namespace trident::data;
using namespace trident::testing;

namespace {

// ---- samplers ----------------------------------------------------------------------------------------

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i)
    if (v[static_cast<size_t>(i)] != i) return false;
  return true;
}

TEST(Sampler, SequentialAndShuffled) {
  EXPECT_EQ(SequentialSampler(5).indices(3), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  const ShuffledSampler s(1000, 42);
  EXPECT_EQ(s.size(), 1000);
  const std::vector<int64_t> e0 = s.indices(0), e1 = s.indices(1);
  EXPECT_TRUE(is_permutation_of_range(e0, 1000));
  EXPECT_TRUE(is_permutation_of_range(e1, 1000));
  EXPECT_NE(e0, e1);                                      // reshuffled every epoch
  EXPECT_EQ(e0, s.indices(0));                            // the same epoch, the same order
  EXPECT_NE(e0, ShuffledSampler(1000, 43).indices(0));    // another seed, another order
  EXPECT_EQ(e0, permutation(1000, 42, 0));
  EXPECT_TRUE(permutation(0, 1, 0).empty());
  EXPECT_EQ(permutation(1, 1, 0), (std::vector<int64_t>{0}));
}

// Each of the 5 values lands first in about a fifth of 5000 shuffles (binomial sd ~28: the
// bounds are over 7 sd away; the seeds are fixed, so this never flakes).
TEST(Sampler, PermutationsAreUniform) {
  std::vector<int64_t> first(5, 0), last(5, 0);
  for (int64_t e = 0; e < 5000; ++e) {
    const std::vector<int64_t> p = permutation(5, 7, e);
    ++first[static_cast<size_t>(p.front())];
    ++last[static_cast<size_t>(p.back())];
  }
  for (int k = 0; k < 5; ++k) {
    EXPECT_GT(first[k], 800);
    EXPECT_LT(first[k], 1200);
    EXPECT_GT(last[k], 800);
    EXPECT_LT(last[k], 1200);
  }
}

// PyTorch's DistributedSampler(shuffle=False): pad range(n) with its beginning, then
// indices[rank::world]. n = 10 on 4 ranks pads with 0, 1; n = 2 on 5 ranks repeats [0, 1].
TEST(Sampler, DistributedMatchesPyTorchWithoutShuffle) {
  const std::vector<std::vector<int64_t>> want10 = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(DistributedSampler(10, r, 4, false).indices(0), want10[static_cast<size_t>(r)]);
  const std::vector<std::vector<int64_t>> want2 = {{0}, {1}, {0}, {1}, {0}};
  for (int64_t r = 0; r < 5; ++r) EXPECT_EQ(DistributedSampler(2, r, 5, false).indices(0), want2[static_cast<size_t>(r)]);
  // drop_last: floor(10 / 4) = 2 each, the tail 8, 9 dropped.
  const std::vector<std::vector<int64_t>> drop = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(DistributedSampler(10, r, 4, false, 0, true).indices(0), drop[static_cast<size_t>(r)]);
  expect_error([] { DistributedSampler(10, 4, 4); }, {"rank 4", "[0, 4)"});
  expect_error([] { DistributedSampler(10, 0, 0); }, {"world size"});
}

// Shuffled: every rank takes its positions of the same permutation; all indices covered, equal
// sizes, duplicates only from the padding (which repeats the order's beginning).
TEST(Sampler, DistributedPartitionsEveryEpoch) {
  for (int64_t n : {1, 10, 11, 13, 16, 97}) {
    for (int64_t world : {1, 2, 3, 4, 8}) {
      for (int64_t epoch : {0, 1}) {
        SCOPED_TRACE(detail::str("n ", n, " world ", world, " epoch ", epoch));
        const std::vector<int64_t> order = permutation(n, 5, epoch);
        const int64_t per = (n + world - 1) / world;
        std::vector<int64_t> merged(static_cast<size_t>(per * world));
        std::map<int64_t, int> count;
        for (int64_t r = 0; r < world; ++r) {
          const DistributedSampler s(n, r, world, true, 5);
          const std::vector<int64_t> mine = s.indices(epoch);
          ASSERT_EQ(static_cast<int64_t>(mine.size()), per);
          ASSERT_EQ(s.size(), per);
          for (int64_t k = 0; k < per; ++k) {
            merged[static_cast<size_t>(k * world + r)] = mine[static_cast<size_t>(k)];
            ++count[mine[static_cast<size_t>(k)]];
          }
        }
        ASSERT_EQ(static_cast<int64_t>(count.size()), n);  // every index at least once
        const int64_t pad = per * world - n;
        for (int64_t p = 0; p < per * world; ++p)
          EXPECT_EQ(merged[static_cast<size_t>(p)], order[static_cast<size_t>(p % n)]);
        for (const auto& [index, c] : count) {
          // Padding wraps the order's beginning (possibly more than once when pad > n).
          int expected = 1;
          for (int64_t q = n; q < n + pad; ++q) expected += order[static_cast<size_t>(q % n)] == index;
          EXPECT_EQ(c, expected) << "index " << index;
        }
        // drop_last: disjoint, equal, floor(n / world) each.
        std::set<int64_t> seen;
        for (int64_t r = 0; r < world; ++r) {
          const std::vector<int64_t> mine = DistributedSampler(n, r, world, true, 5, true).indices(epoch);
          ASSERT_EQ(static_cast<int64_t>(mine.size()), n / world);
          for (int64_t i : mine) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice";
        }
      }
    }
  }
}

TEST(Sampler, Batches) {
  const std::vector<int64_t> order = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  EXPECT_EQ(make_batches(order, 4, false), (std::vector<std::vector<int64_t>>{{9, 8, 7, 6}, {5, 4, 3, 2}, {1, 0}}));
  EXPECT_EQ(make_batches(order, 4, true), (std::vector<std::vector<int64_t>>{{9, 8, 7, 6}, {5, 4, 3, 2}}));
  EXPECT_EQ(make_batches(order, 5, true).size(), 2u);
  EXPECT_EQ(batch_count(10, 3, false), 4);
  EXPECT_EQ(batch_count(10, 3, true), 3);
  EXPECT_EQ(batch_count(2, 3, true), 0);
  expect_error([] { batch_count(10, 0, false); }, {"batch size", "0"});
}

// ---- loader ------------------------------------------------------------------------------------------

// Example i: {values drawn from the generator + i (shape [3]), label i}. Examples take longer
// the lower their index within a group of 5, so workers finish out of order.
class RandomDataset : public Dataset {
 public:
  explicit RandomDataset(int64_t n, bool sleep = true) : n_(n), sleep_(sleep) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index, Generator& gen) const override {
    calls.fetch_add(1);
    threads_seen.store(get_num_threads());
    if (sleep_) std::this_thread::sleep_for(std::chrono::microseconds(200 * (5 - index % 5)));
    std::vector<float> v(3);
    for (float& x : v) x = static_cast<float>(uniform_draw(gen)) + static_cast<float>(index);
    return {from_vector(v, {3}), scalar_tensor(static_cast<double>(index), kI64)};
  }
  mutable std::atomic<int64_t> calls{0};
  mutable std::atomic<int> threads_seen{0};

 private:
  int64_t n_;
  bool sleep_;
};

std::vector<Example> run_epoch(Loader& loader) {
  std::vector<Example> out;
  while (std::optional<Example> b = loader.next()) out.push_back(std::move(*b));
  return out;
}

::testing::AssertionResult same_batches(const std::vector<Example>& a, const std::vector<Example>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " batches";
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return ::testing::AssertionFailure() << "batch " << i << ": tensor counts differ";
    for (size_t k = 0; k < a[i].size(); ++k) {
      auto r = all_close(a[i][k], b[i][k], 0, 0);
      if (!r) return ::testing::AssertionFailure() << "batch " << i << " tensor " << k << ": " << r.message();
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<int64_t> labels_of(const Example& batch) { return batch[1].to_vector<int64_t>(); }

TEST(Loader, BatchesFollowTheSamplerWithPerExampleGenerators) {
  auto ds = std::make_shared<RandomDataset>(23);
  auto sampler = std::make_shared<ShuffledSampler>(23, 3);
  LoaderOptions o;
  o.batch_size = 5;
  o.seed = 99;
  o.num_workers = 3;
  Loader loader(ds, o, sampler);
  EXPECT_EQ(loader.batches_per_epoch(), 5);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    if (epoch > 0) loader.set_epoch(epoch);
    const std::vector<Example> batches = run_epoch(loader);
    ASSERT_EQ(batches.size(), 5u);
    const std::vector<int64_t> order = sampler->indices(epoch);
    for (size_t b = 0; b < batches.size(); ++b) {
      const std::vector<int64_t> want(order.begin() + static_cast<std::ptrdiff_t>(b * 5),
                                      order.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(23, b * 5 + 5)));
      ASSERT_EQ(labels_of(batches[b]), want) << "epoch " << epoch << " batch " << b;
      ASSERT_EQ(batches[b][0].sizes(), (Shape{static_cast<int64_t>(want.size()), 3}));
      // Example i was made from Generator(example_seed(seed, epoch, i)).
      for (size_t k = 0; k < want.size(); ++k) {
        Generator g(example_seed(99, epoch, want[k]));
        const std::vector<float> got = select(batches[b][0], 0, static_cast<int64_t>(k)).to_vector<float>();
        for (float x : got)
          EXPECT_EQ(x, static_cast<float>(uniform_draw(g)) + static_cast<float>(want[k]));
      }
    }
    EXPECT_EQ(loader.position(), (LoaderPosition{epoch, 5}));
    EXPECT_FALSE(loader.next().has_value());  // used up until set_epoch
  }
}

TEST(Loader, SameBatchesForAnyNumberOfWorkers) {
  auto ds = std::make_shared<RandomDataset>(37);
  auto sampler = std::make_shared<ShuffledSampler>(37, 11);
  std::vector<std::vector<Example>> runs;
  for (int workers : {0, 1, 2, 4}) {
    LoaderOptions o;
    o.batch_size = 4;
    o.num_workers = workers;
    o.seed = 5;
    o.prefetch = workers == 4 ? 1 : 0;  // also the tightest queue
    Loader loader(ds, o, sampler);
    std::vector<Example> all;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      loader.set_epoch(epoch);
      for (Example& b : run_epoch(loader)) all.push_back(std::move(b));
    }
    runs.push_back(std::move(all));
  }
  ASSERT_EQ(runs[0].size(), 20u);  // 10 batches per epoch, the last of 1
  for (size_t r = 1; r < runs.size(); ++r) EXPECT_TRUE(same_batches(runs[0], runs[r])) << "run " << r;
  // The two epochs are shuffled differently.
  EXPECT_NE(labels_of(runs[0][0]), labels_of(runs[0][10]));
}

TEST(Loader, DropLast) {
  auto ds = std::make_shared<RandomDataset>(10, false);
  for (bool drop : {false, true}) {
    LoaderOptions o;
    o.batch_size = 4;
    o.drop_last = drop;
    o.num_workers = 2;
    Loader loader(ds, o);
    const std::vector<Example> b = run_epoch(loader);
    ASSERT_EQ(b.size(), drop ? 2u : 3u);
    EXPECT_EQ(labels_of(b[0]), (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(labels_of(b[1]), (std::vector<int64_t>{4, 5, 6, 7}));
    if (!drop) {
      EXPECT_EQ(labels_of(b[2]), (std::vector<int64_t>{8, 9}));
    }
  }
}

TEST(Loader, ResumesFromASavedPosition) {
  auto ds = std::make_shared<RandomDataset>(29);
  auto sampler = std::make_shared<DistributedSampler>(29, 1, 2, true, 8);
  LoaderOptions o;
  o.batch_size = 3;
  o.seed = 12;
  o.num_workers = 2;
  // Uninterrupted: epochs 0 to 2.
  std::vector<Example> full;
  {
    Loader loader(ds, o, sampler);
    for (int64_t e = 0; e < 3; ++e) {
      loader.set_epoch(e);
      for (Example& b : run_epoch(loader)) full.push_back(std::move(b));
    }
  }
  ASSERT_EQ(full.size(), 15u);  // 15 indices per rank, 5 batches per epoch
  // Interrupted after batch 2 of epoch 1, the position saved as JSON, resumed in a new loader
  // with another worker count.
  std::vector<Example> resumed;
  std::string saved;
  {
    Loader loader(ds, o, sampler);
    for (Example& b : run_epoch(loader)) resumed.push_back(std::move(b));
    loader.set_epoch(1);
    for (int k = 0; k < 2; ++k) resumed.push_back(*loader.next());
    saved = loader.position().to_json();
  }
  EXPECT_EQ(nlohmann::json::parse(saved), nlohmann::json::parse(R"({"epoch": 1, "batch": 2})"));
  {
    o.num_workers = 4;
    Loader loader(ds, o, sampler);
    loader.restore(LoaderPosition::from_json(saved));
    EXPECT_EQ(loader.position(), (LoaderPosition{1, 2}));
    for (Example& b : run_epoch(loader)) resumed.push_back(std::move(b));
    loader.set_epoch(2);
    for (Example& b : run_epoch(loader)) resumed.push_back(std::move(b));
  }
  EXPECT_TRUE(same_batches(full, resumed));

  // Restoring a used-up epoch yields nothing until the next set_epoch.
  Loader loader(ds, o, sampler);
  loader.restore({0, 5});
  EXPECT_FALSE(loader.next().has_value());
  expect_error([&] { loader.restore({0, 6}); }, {"batch 6", "5 batches"});
}

TEST(Loader, PositionJson) {
  const LoaderPosition p{7, 123};
  EXPECT_EQ(LoaderPosition::from_json(p.to_json()), p);
  nlohmann::json j = p;  // nlohmann's conversions, for embedding in a checkpoint
  EXPECT_EQ(j["epoch"], 7);
  EXPECT_EQ(j["batch"], 123);
  EXPECT_EQ(j.get<LoaderPosition>(), p);
  expect_error([] { LoaderPosition::from_json(R"({"epoch": 1})"); }, {"missing \"batch\""});
  expect_error([] { LoaderPosition::from_json(R"({"epoch": -1, "batch": 0})"); }, {"\"epoch\"", "non-negative"});
  expect_error([] { LoaderPosition::from_json(R"({"epoch": 1, "batch": "2"})"); }, {"\"batch\""});
  expect_error([] { LoaderPosition::from_json("[1, 2"); }, {"not valid JSON"});
}

// Throws on chosen indices (a trident::Error, a std::exception, or something else).
class FailingDataset : public Dataset {
 public:
  int64_t size() const override { return 40; }
  Example get(int64_t index, Generator& gen) const override {
    if (index == 13) TRIDENT_FAIL("cannot decode /data/img13.JPEG");
    if (index == 27) throw std::runtime_error("disk on fire");
    if (index == 33) throw 42;
    if (index == 38) return {zeros({2}), scalar_tensor(0, kI64)};  // the wrong shape for collate
    return {zeros({3}), scalar_tensor(static_cast<double>(index), kI64)};
  }
};

TEST(Loader, ExceptionsInWorkersSurfaceWithTheIndex) {
  for (int workers : {0, 1, 3}) {
    SCOPED_TRACE(detail::str(workers, " workers"));
    LoaderOptions o;
    o.batch_size = 4;
    o.num_workers = workers;
    Loader loader(std::make_shared<FailingDataset>(), o);
    std::vector<std::string> errors;
    int64_t good = 0;
    for (int b = 0; b < 10; ++b) {
      try {
        std::optional<Example> batch = loader.next();
        ASSERT_TRUE(batch.has_value());
        ++good;
      } catch (const Error& e) {
        errors.push_back(e.message());
      }
    }
    EXPECT_FALSE(loader.next().has_value());
    EXPECT_EQ(good, 6);
    ASSERT_EQ(errors.size(), 4u);
    // Batch 3 holds 12..15, batch 6 holds 24..27, batch 8 holds 32..35, batch 9 holds 36..39.
    EXPECT_NE(errors[0].find("example 13 (batch 3 of epoch 0)"), std::string::npos) << errors[0];
    EXPECT_NE(errors[0].find("cannot decode /data/img13.JPEG"), std::string::npos) << errors[0];
    EXPECT_NE(errors[1].find("example 27"), std::string::npos) << errors[1];
    EXPECT_NE(errors[1].find("disk on fire"), std::string::npos) << errors[1];
    EXPECT_NE(errors[2].find("example 33"), std::string::npos) << errors[2];
    EXPECT_NE(errors[2].find("not a std::exception"), std::string::npos) << errors[2];
    EXPECT_NE(errors[3].find("collating batch 9"), std::string::npos) << errors[3];
  }
}

// A dataset that is slow enough for the loader to be destroyed mid-epoch, with full queues.
TEST(Loader, DestructionJoinsWorkersMidEpoch) {
  auto ds = std::make_shared<RandomDataset>(400);
  for (int consumed : {0, 1, 3}) {
    LoaderOptions o;
    o.batch_size = 2;
    o.num_workers = 4;
    Loader loader(ds, o);
    for (int k = 0; k < consumed; ++k) ASSERT_TRUE(loader.next().has_value());
  }  // each destructor returns (a hang would time the test out)
  LoaderOptions o;
  o.num_workers = 2;
  Loader never_used(ds, o);  // workers waiting for an epoch
  SUCCEED();
}

TEST(Loader, PrefetchIsBounded) {
  auto ds = std::make_shared<RandomDataset>(100, false);
  LoaderOptions o;
  o.batch_size = 1;
  o.num_workers = 2;
  o.prefetch = 3;
  Loader loader(ds, o);
  ASSERT_TRUE(loader.next().has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // One consumed, so at most batches 1, 2, 3 may have been built: 4 gets in all.
  EXPECT_LE(ds->calls.load(), 4);
  ASSERT_TRUE(loader.next().has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_LE(ds->calls.load(), 5);
  // Workers run the dataset single-threaded (NOTE [Single-threaded workers]).
  EXPECT_EQ(ds->threads_seen.load(), 1);
}

TEST(Loader, SingleThreadGuardIsPerThread) {
  const int outside = get_num_threads();
  int inside = 0, after = 0;
  std::thread t([&] {
    {
      SingleThreadGuard g;
      inside = get_num_threads();
    }
    after = get_num_threads();
  });
  t.join();
  EXPECT_EQ(inside, 1);
  EXPECT_EQ(after, outside);
  EXPECT_EQ(get_num_threads(), outside);
}

TEST(Loader, PinMemoryHook) {
  auto ds = std::make_shared<RandomDataset>(10, false);
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.pin_memory = true;
  if (!cuda_is_available()) {  // no hook registered and no GPU: a warning, ordinary batches
    EXPECT_FALSE(has_pin_memory_hook());
    ::testing::internal::CaptureStderr();
    Loader loader(ds, o);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("pin_memory"), std::string::npos) << err;
    EXPECT_EQ(run_epoch(loader).size(), 3u);
  }
  std::atomic<int> pinned{0};
  set_pin_memory_hook([&](const Tensor& t) {
    pinned.fetch_add(1);
    return t.clone();
  });
  EXPECT_TRUE(has_pin_memory_hook());
  {
    Loader loader(ds, o);
    const std::vector<Example> b = run_epoch(loader);
    EXPECT_EQ(b.size(), 3u);
    EXPECT_EQ(labels_of(b[2]), (std::vector<int64_t>{8, 9}));
  }
  EXPECT_EQ(pinned.load(), 6);  // two tensors in each of three batches
  o.pin_memory = false;
  {
    Loader loader(ds, o);
    run_epoch(loader);
  }
  EXPECT_EQ(pinned.load(), 6);  // only when asked for
  set_pin_memory_hook(nullptr);
  EXPECT_FALSE(has_pin_memory_hook());
}

// Decoding real files on workers: the same augmented batches with 1 and 2 workers.
TEST(Loader, ImageFolderTrainingBatchesAreDeterministic) {
  TempDir root;
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 4; ++i) {
      const int h = 30 + 7 * i, w = 41 - 3 * c;
      const std::string name = (root.path() / "train" / ("n0" + std::to_string(c)) / ("img" + std::to_string(i))).string();
      if (i % 2) {
        write_bytes(name + ".JPEG", encode_jpeg(make_pixels(h, w, 3, static_cast<uint64_t>(c * 10 + i), true), h, w, 3));
      } else {
        write_bytes(name + ".png", encode_png(make_pixels(h, w, 3, static_cast<uint64_t>(c * 10 + i)), h, w, 3));
      }
    }
  ImageFolderOptions fo;
  TrainTransformOptions t;
  t.size = 16;
  fo.transform = std::make_shared<TrainTransform>(t);
  auto ds = std::make_shared<ImageFolderDataset>(root.path().string(), "train", fo);
  ASSERT_EQ(ds->size(), 12);
  auto sampler = std::make_shared<ShuffledSampler>(12, 1);
  std::vector<std::vector<Example>> runs;
  for (int workers : {1, 2}) {
    LoaderOptions o;
    o.batch_size = 5;
    o.num_workers = workers;
    o.seed = 3;
    Loader loader(ds, o, sampler);
    runs.push_back(run_epoch(loader));
  }
  ASSERT_EQ(runs[0].size(), 3u);
  EXPECT_EQ(runs[0][0][0].sizes(), (Shape{5, 3, 16, 16}));
  EXPECT_EQ(runs[0][0][1].sizes(), (Shape{5}));
  EXPECT_TRUE(same_batches(runs[0], runs[1]));
  // Labels follow the sampler: index i has label i / 4.
  const std::vector<int64_t> order = sampler->indices(0);
  for (size_t k = 0; k < 5; ++k) EXPECT_EQ(labels_of(runs[0][0])[k], order[k] / 4);
}

}  // namespace
