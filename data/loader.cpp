#include "data/loader.h"

#include <nlohmann/json.hpp>

#include <iostream>

#include "core/error.h"
#include "core/parallel.h"
#include "trident_config.h"

#if TRIDENT_HAVE_CUDA
namespace trident::cuda {
Tensor pin_memory(const Tensor& t);  // core/cuda/allocator.h (kept out of this file's includes)
}  // namespace trident::cuda
#endif

namespace trident::data {

// ---- position --------------------------------------------------------------------------------------

void to_json(nlohmann::json& j, const LoaderPosition& p) { j = nlohmann::json{{"epoch", p.epoch}, {"batch", p.batch}}; }

void from_json(const nlohmann::json& j, LoaderPosition& p) {
  TRIDENT_CHECK(j.is_object(), "LoaderPosition: expected a JSON object, got ", j.dump());
  for (const char* key : {"epoch", "batch"}) {
    TRIDENT_CHECK(j.contains(key), "LoaderPosition: missing \"", key, "\" in ", j.dump());
    TRIDENT_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() >= 0, "LoaderPosition: \"", key,
                  "\" must be a non-negative integer, got ", j[key].dump());
  }
  p.epoch = j["epoch"].get<int64_t>();
  p.batch = j["batch"].get<int64_t>();
}

std::string LoaderPosition::to_json() const {
  nlohmann::json j = *this;
  return j.dump();
}

LoaderPosition LoaderPosition::from_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  TRIDENT_CHECK(!j.is_discarded(), "LoaderPosition: not valid JSON: ", text);
  return j.get<LoaderPosition>();
}

// ---- seeds and pinning --------------------------------------------------------------------------

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::mutex g_pin_mu;
PinMemoryHook g_pin_hook;

}  // namespace

uint64_t example_seed(uint64_t seed, int64_t epoch, int64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(index));
}

void set_pin_memory_hook(PinMemoryHook hook) {
  std::lock_guard<std::mutex> lock(g_pin_mu);
  g_pin_hook = std::move(hook);
}

bool has_pin_memory_hook() {
  std::lock_guard<std::mutex> lock(g_pin_mu);
  return static_cast<bool>(g_pin_hook);
}

// ---- loader ----------------------------------------------------------------------------------------

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, std::shared_ptr<const Sampler> sampler)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  TRIDENT_CHECK(dataset_ != nullptr, "Loader: no dataset");
  if (!sampler_) sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  TRIDENT_CHECK(options_.num_workers >= 0, "Loader: num_workers must be >= 0, got ", options_.num_workers);
  TRIDENT_CHECK(options_.prefetch >= 0, "Loader: prefetch must be >= 0, got ", options_.prefetch);
  batches_per_epoch_ = batch_count(sampler_->size(), options_.batch_size, options_.drop_last);
  prefetch_ = options_.prefetch > 0 ? options_.prefetch : 2 * std::max(1, options_.num_workers);
  if (options_.pin_memory) {
    std::lock_guard<std::mutex> lock(g_pin_mu);
    pin_ = g_pin_hook;
#if TRIDENT_HAVE_CUDA
    // NOTE [Pinned batches]: without a registered hook, the CUDA backend's pinned allocator.
    if (!pin_ && cuda_is_available()) pin_ = [](const Tensor& t) { return cuda::pin_memory(t); };
#endif
    if (!pin_) {
      static std::once_flag warned;
      std::call_once(warned, [] {
        std::cerr << "trident: warning: Loader pin_memory is set but no pinned-memory allocator is registered (no CUDA "
                     "backend in this build, or no GPU): batches stay in ordinary memory\n";
      });
    }
  }
  try {
    for (int w = 0; w < options_.num_workers; ++w) workers_.emplace_back([this] { worker_loop(); });
  } catch (...) {  // no thread left running when the constructor fails
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    throw;
  }
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void Loader::start(int64_t epoch, int64_t batch) {
  TRIDENT_CHECK(epoch >= 0, "Loader: negative epoch ", epoch);
  TRIDENT_CHECK(batch >= 0 && batch <= batches_per_epoch_, "Loader: batch ", batch, " is outside epoch ", epoch,
                " (", batches_per_epoch_, " batches)");
  // The sampler runs outside the lock: shuffling a million indices takes milliseconds.
  auto plan = std::make_shared<Plan>();
  plan->epoch = epoch;
  plan->batches = make_batches(sampler_->indices(epoch), options_.batch_size, options_.drop_last);
  TRIDENT_ASSERT(static_cast<int64_t>(plan->batches.size()) == batches_per_epoch_, "Loader: the sampler gave ",
                 plan->batches.size(), " batches for epoch ", epoch, ", expected ", batches_per_epoch_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
    plan_ = std::move(plan);
    epoch_ = epoch;
    next_claim_ = next_yield_ = batch;
    ready_.clear();
    started_ = true;
  }
  work_cv_.notify_all();
}

void Loader::set_epoch(int64_t epoch) { start(epoch, 0); }

void Loader::restore(const LoaderPosition& p) { start(p.epoch, p.batch); }

LoaderPosition Loader::position() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {epoch_, next_yield_};
}

namespace {

// Called inside a catch block: the exception being handled, as an Error whose message starts
// with `context` (what and where) and ends with the original message.
std::exception_ptr wrap_current_exception(const std::string& context) {
  std::string what;
  try {
    throw;
  } catch (const Error& e) {
    what = e.message();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  try {
    TRIDENT_FAIL(context, ": ", what);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

Loader::Result Loader::build(const Plan& plan, int64_t b, uint64_t generation) const {
  Result r;
  const std::vector<int64_t>& indices = plan.batches[static_cast<size_t>(b)];
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t index : indices) {
    {  // abandoned: the loader moved to another epoch or position, or is shutting down
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ || generation != generation_) return r;
    }
    try {
      Generator gen(example_seed(options_.seed, plan.epoch, index));
      examples.push_back(dataset_->get(index, gen));
    } catch (...) {
      r.error = wrap_current_exception(detail::str("Loader: Dataset::get failed on example ", index, " (batch ", b,
                                                   " of epoch ", plan.epoch, ")"));
      return r;
    }
  }
  try {
    r.batch = collate(examples);
    if (pin_) {
      for (Tensor& t : r.batch) t = pin_(t);
    }
  } catch (...) {
    r.error = wrap_current_exception(detail::str("Loader: collating batch ", b, " of epoch ", plan.epoch, " failed"));
  }
  return r;
}

void Loader::worker_loop() {
  SingleThreadGuard single;  // NOTE [Single-threaded workers]
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] {
      return stop_ || (started_ && next_claim_ < batches_per_epoch_ && next_claim_ < next_yield_ + prefetch_);
    });
    if (stop_) return;
    const int64_t b = next_claim_++;
    const uint64_t generation = generation_;
    const std::shared_ptr<const Plan> plan = plan_;
    lock.unlock();
    Result r = build(*plan, b, generation);
    lock.lock();
    if (generation == generation_ && !stop_) {
      ready_.emplace(b, std::move(r));
      ready_cv_.notify_all();
    }
  }
}

std::optional<Example> Loader::next() {
  bool need_start;
  {
    std::lock_guard<std::mutex> lock(mu_);
    need_start = !started_;
  }
  if (need_start) start(0, 0);

  Result r;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (next_yield_ >= batches_per_epoch_) return std::nullopt;
    const int64_t b = next_yield_;
    if (workers_.empty()) {
      const std::shared_ptr<const Plan> plan = plan_;
      const uint64_t generation = generation_;
      lock.unlock();
      r = build(*plan, b, generation);
      lock.lock();
    } else {
      ready_cv_.wait(lock, [&] { return stop_ || ready_.count(b) != 0; });
      TRIDENT_CHECK(!stop_, "Loader: next() called while the loader is being destroyed");
      auto it = ready_.find(b);
      r = std::move(it->second);
      ready_.erase(it);
    }
    next_yield_ = b + 1;
  }
  work_cv_.notify_all();  // room in the prefetch window
  if (r.error) std::rethrow_exception(r.error);
  return std::move(r.batch);
}

}  // namespace trident::data
