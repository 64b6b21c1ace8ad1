// generate: GPT-2 text from a train_gpt2 checkpoint or a Hugging Face model.safetensors.
//
//   generate --ckpt runs/gpt2/step-600 --prompt "The jury said" --max-new-tokens 60
//   generate --hf ~/models/gpt2 --greedy --prompt "Hello, I'm a language model,"
//   generate --ckpt runs/gpt2 --device cuda       # the model and its key/value cache on the GPU
//
// The tokenizer is GPT-2's BPE (scripts/get-data.sh puts encoder.json and vocab.bpe in
// ~/.cache/trident/gpt2; --vocab names another folder).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "apps/device.h"
#include "apps/train_common.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "data/gpt2_tokenizer.h"
#include "models/gpt2_generate.h"
#include "models/gpt2_hf.h"
#include "nn/training_checkpoint.h"
#include "nn/init.h"

using namespace trident;
using namespace trident::models;

namespace {

std::string default_vocab() {
  if (const char* c = std::getenv("TRIDENT_DATA_CACHE")) return std::string(c) + "/gpt2";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/trident/gpt2";
}

// A train_gpt2 checkpoint folder, or a --ckpt-dir holding step-N folders (the newest is taken).
std::shared_ptr<GPT2LMHeadModel> load_checkpoint(std::string path) {
  if (std::filesystem::is_directory(path) && !std::filesystem::exists(path + "/trainer.json"))
    path = apps::resolve_resume("latest", path);
  const auto [name, config] = apps::checkpoint_model(path);
  TRIDENT_CHECK(name == "gpt2", "checkpoint '", path, "' holds a ", name, " model, not gpt2");
  // Every tensor is loaded below (strictly), so the random initialization is skipped (NOTE
  // [Skipped draws]).
  std::shared_ptr<GPT2LMHeadModel> model;
  {
    const nn::init::SkipDrawsGuard skip;
    model = std::make_shared<GPT2LMHeadModel>(GPT2Config::from_json(config));
  }
  nn::load_training_checkpoint(path, {model.get(), nullptr, nullptr, {}, nullptr, {}});
  std::printf("loaded %s (GPT-2, %lld parameters)\n", path.c_str(), static_cast<long long>(model->num_parameters()));
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Generate text with GPT-2 from a train_gpt2 checkpoint or a Hugging Face model.safetensors", "generate"};
  std::string ckpt, hf, vocab = default_vocab(), prompt = "The";
  int64_t max_new = 64, samples = 3, top_k = 40;
  double temperature = 0.8, top_p = 0.95;
  bool greedy = false, no_cache = false;
  uint64_t seed = 1;
  int threads = 0;
  std::string device = "cpu";
  app.add_option("--ckpt", ckpt, "a train_gpt2 checkpoint folder, or its --ckpt-dir (the newest checkpoint)");
  app.add_option("--hf", hf, "a Hugging Face GPT-2: a folder with model.safetensors (and config.json), or the file");
  app.add_option("--vocab", vocab, "folder with GPT-2's encoder.json and vocab.bpe")->capture_default_str();
  app.add_option("--prompt", prompt, "text to continue (empty: start from <|endoftext|>)")->capture_default_str();
  app.add_option("--max-new-tokens", max_new, "tokens to generate per sample")->capture_default_str();
  app.add_option("--num-samples", samples, "samples, generated as one batch")->capture_default_str();
  app.add_option("--temperature", temperature, "sampling temperature")->capture_default_str();
  app.add_option("--top-k", top_k, "sample among the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", top_p, "nucleus sampling: the most likely tokens up to this probability")->capture_default_str();
  app.add_flag("--greedy", greedy, "always take the most likely token");
  app.add_flag("--no-cache", no_cache, "recompute every position at each step (no key/value cache)");
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
  app.add_option("--threads", threads, "compute threads (0: all cores)")->capture_default_str();
  app.add_option("--device", device, "cpu, cuda or cuda:N: where the model and its key/value cache live")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    TRIDENT_CHECK(ckpt.empty() != hf.empty(), "give exactly one of --ckpt (a train_gpt2 checkpoint) and --hf (a model.safetensors)");
    TRIDENT_CHECK(max_new >= 0 && samples > 0, "--max-new-tokens must be >= 0 and --num-samples positive");
    const Device dev = apps::resolve_device(device);  // NOTE [Device in the apps]
    if (threads > 0) set_num_threads(threads);
    const data::Gpt2Tokenizer tok = data::Gpt2Tokenizer::from_dir(vocab);
    std::shared_ptr<GPT2LMHeadModel> model = ckpt.empty() ? load_gpt2_hf(hf) : load_checkpoint(ckpt);
    if (!dev.is_cpu()) {
      model->to(dev);  // loaded on the host, then moved; generate() keeps the cache on the device
      std::printf("device: %s\n", apps::describe_device(dev).c_str());
    }
    TRIDENT_CHECK(tok.vocab_size() <= model->config().vocab_size, "the tokenizer in '", vocab, "' has ", tok.vocab_size(),
                  " tokens, more than the model's vocabulary of ", model->config().vocab_size);

    std::vector<int32_t> ids = tok.encode(prompt);
    if (ids.empty()) ids.push_back(tok.eot_id());
    std::vector<int64_t> rows;
    for (int64_t s = 0; s < samples; ++s) rows.insert(rows.end(), ids.begin(), ids.end());
    const Tensor input = from_vector<int64_t>(rows, {samples, static_cast<int64_t>(ids.size())});

    Generator gen(seed);
    GenerateOptions o;
    o.max_new_tokens = max_new;
    o.sampling = {.greedy = greedy, .temperature = temperature, .top_k = top_k, .top_p = top_p};
    o.use_cache = !no_cache;
    o.generator = &gen;
    // Timing, to stderr (stdout carries the samples): the prompt's step with the first token, then
    // the rest.
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    Clock::time_point first;
    int64_t produced = 0;
    o.on_token = [&](int64_t step, const Tensor&, const Tensor&) {
      if (step == 0) first = Clock::now();
      produced = step + 1;
    };
    const Tensor out = generate(*model, input, o);
    const Clock::time_point end = Clock::now();
    const std::vector<int64_t> all = out.to_vector<int64_t>();
    const int64_t len = out.size(1);
    for (int64_t s = 0; s < samples; ++s) {
      std::vector<int32_t> row;
      for (int64_t t = 0; t < len; ++t) row.push_back(static_cast<int32_t>(all[static_cast<size_t>(s * len + t)]));
      std::printf("--- sample %lld ---\n%s\n", static_cast<long long>(s + 1), tok.decode(row).c_str());
    }
    if (produced > 0) {
      const auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
      std::fprintf(stderr, "generate: %lld tokens x %lld samples in %.2f s: the prompt (%zu tokens) and the first in %.0f ms",
                   static_cast<long long>(produced), static_cast<long long>(samples), ms(end - start) / 1e3, ids.size(),
                   ms(first - start));
      if (produced > 1) std::fprintf(stderr, ", then %.1f tokens/s", static_cast<double>(produced - 1) / (ms(end - first) / 1e3));
      std::fprintf(stderr, "\n");
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "generate: %s\n", e.message().c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 2;
  }
}
