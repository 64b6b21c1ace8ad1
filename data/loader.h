// The loader: batches from a dataset, built on worker threads ahead of the training step.
//
//   auto loader = Loader(dataset, {.batch_size = 256, .num_workers = 8, .seed = 1},
//                        std::make_shared<DistributedSampler>(dataset->size(), rank, world));
//   for (int64_t epoch = loader.position().epoch; epoch < epochs; ++epoch) {
//     if (epoch != loader.position().epoch) loader.set_epoch(epoch);
//     while (std::optional<Example> batch = loader.next()) step(*batch);
//   }
//
// NOTE [Loader determinism]: the batches of an epoch are a function of (dataset, sampler, seed,
// batch_size, drop_last, epoch) alone. The sampler fixes the order; example `index` of epoch `e`
// is made with a fresh Generator seeded with example_seed(seed, e, index); each batch is built by
// one worker, and batches come out in order whatever the number of workers and whichever
// finishes first. So 0, 1 or 16 workers give bit-identical batches, and a loader restored to a
// saved LoaderPosition yields exactly the batches the uninterrupted one would have.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"

namespace trident::data {

// Where a loader is: the next batch next() returns is batch `batch` (0-based) of epoch `epoch`;
// batch == batches_per_epoch() means the epoch is used up. Saved in checkpoints as JSON
// {"epoch": e, "batch": b}.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const LoaderPosition&) const = default;
  std::string to_json() const;
  // Errors name the missing or bad field.
  static LoaderPosition from_json(const std::string& text);
};
// nlohmann-json's conversions, for embedding in a larger checkpoint document.
void to_json(nlohmann::json& j, const LoaderPosition& p);
void from_json(const nlohmann::json& j, LoaderPosition& p);

// The seed of example `index`'s Generator in epoch `epoch` (a SplitMix64 hash of the three).
uint64_t example_seed(uint64_t seed, int64_t epoch, int64_t index);

struct LoaderOptions {
  int64_t batch_size = 1;
  bool drop_last = false;  // drop the epoch's last batch when it is short
  // Threads running Dataset::get and collate. 0: next() builds each batch on the calling thread.
  int num_workers = 0;
  // Batches being built or waiting at most (the bounded prefetch queue); 0 means 2 per worker.
  int64_t prefetch = 0;
  uint64_t seed = 0;  // NOTE [Loader determinism]
  // NOTE [Pinned batches]: copy every batch into page-locked host memory (so host-to-device
  // copies can be asynchronous): through a registered hook, else, in a CUDA build with a GPU,
  // through cuda::pin_memory. Without either (no CUDA backend in this build, or no GPU) the
  // batches stay in ordinary memory and a warning says so once.
  bool pin_memory = false;
};

// NOTE [Pinned batches]: a function that copies a CPU tensor into pinned host memory; the loader
// applies it to every tensor of a batch on the worker thread when pin_memory is set. By default
// (no hook registered) a CUDA build with a GPU uses cuda::pin_memory (cudaHostAlloc); a hook
// replaces that (tests use one). An empty function unregisters.
using PinMemoryHook = std::function<Tensor(const Tensor&)>;
void set_pin_memory_hook(PinMemoryHook hook);
bool has_pin_memory_hook();

// One thread consumes a loader (next, set_epoch, restore, position); the workers are its own.
class Loader {
 public:
  // `sampler` defaults to SequentialSampler(dataset->size()).
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, std::shared_ptr<const Sampler> sampler = nullptr);
  // Stops the workers (a batch being built is abandoned after its current example) and joins them.
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const LoaderOptions& options() const { return options_; }

  // The next batch of the current epoch ({tensor i of every example stacked}, data/dataset.h),
  // or nullopt when the epoch is used up. An exception from Dataset::get or collate is re-thrown
  // here, on the batch it belongs to, as an Error naming the example index (or the batch), the
  // epoch and the original message; the position has then moved past that batch.
  std::optional<Example> next();

  // Starts epoch `epoch` from its first batch (workers begin at once).
  void set_epoch(int64_t epoch);
  LoaderPosition position() const;
  // Continues from a saved position: the next batch is batch p.batch of epoch p.epoch.
  void restore(const LoaderPosition& p);

 private:
  struct Result {
    Example batch;
    std::exception_ptr error;
  };
  struct Plan {  // one epoch, from its first batch to build
    int64_t epoch = 0;
    std::vector<std::vector<int64_t>> batches;
  };

  Result build(const Plan& plan, int64_t b, uint64_t generation) const;
  void start(int64_t epoch, int64_t batch);
  void worker_loop();

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const Sampler> sampler_;
  LoaderOptions options_;
  int64_t batches_per_epoch_ = 0;
  PinMemoryHook pin_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // workers: a batch to claim, or stop
  std::condition_variable ready_cv_;  // next(): the awaited batch is ready
  bool stop_ = false;
  bool started_ = false;
  uint64_t generation_ = 0;  // bumped by start(); results of an older generation are dropped
  std::shared_ptr<const Plan> plan_;
  int64_t epoch_ = 0;
  int64_t next_claim_ = 0;  // the next batch a worker will build
  int64_t next_yield_ = 0;  // the next batch next() returns
  int64_t prefetch_ = 0;
  std::map<int64_t, Result> ready_;
  std::vector<std::thread> workers_;
};

}  // namespace trident::data
