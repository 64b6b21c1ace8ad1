// prepare_text: text files or folders in, GPT-2 token shards (llm.c's format) out.
//
//   prepare_text corpus/ more.txt --vocab ~/.cache/trident/gpt2 --out data/brown [--val-fraction 0.01]
//   -> data/brown_train_000000.bin ... data/brown_val_000000.bin
//
// Each document (a file, by default; see --docs) is preceded by <|endoftext|>, as in llm.c's
// shards, so documents are separated by it; text that spells "<|endoftext|>" is ordinary text.
// Documents are tokenized on several threads, each document whole on one thread, and written
// in input order: the shards are the same for any --threads. A document goes to validation by
// the rule of --val-docs (the first N) or --val-fraction (each with that probability, from a
// seeded Philox stream per document).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "apps/progress.h"
#include "core/error.h"
#include "data/file_util.h"
#include "data/gpt2_tokenizer.h"
#include "data/text_corpus.h"

using namespace trident;
using namespace trident::data;

namespace {

struct Options {
  std::vector<std::string> inputs;
  std::string vocab, out, docs = "file";
  double val_fraction = 0.01;
  int64_t val_docs = -1;
  uint64_t seed = 0;
  int64_t shard_tokens = 100'000'000;
  int threads = 0;
  bool quiet = false;
};

int run(const Options& o) {
  const DocumentSplit split = parse_document_split(o.docs);
  const std::vector<TextFile> files = list_text_files(o.inputs);
  uint64_t total = 0;
  for (const auto& f : files) total += f.bytes;
  const Gpt2Tokenizer tok = Gpt2Tokenizer::from_dir(o.vocab);
  const int32_t eot = tok.eot_id();
  TRIDENT_CHECK(eot >= 0, "the vocabulary in '", o.vocab, "' has no <|endoftext|> token");
  const ValidationSplit val_rule{o.val_fraction, o.val_docs, o.seed};

  make_prefix_folder(o.out);  // --out data/brown: data/ made when missing
  ShardedTokenWriter train(o.out + "_train", o.shard_tokens), val(o.out + "_val", o.shard_tokens);
  apps::Progress progress("prepare_text", total, o.quiet);
  // Batches of whole files, about a twentieth of the input (1 to 64 MB), so the bar moves and
  // memory stays bounded.
  const uint64_t batch_bytes = std::clamp<uint64_t>(total / 20, 1 << 20, 64 << 20);
  std::vector<std::unique_ptr<std::string>> texts;
  std::vector<std::string_view> docs;
  std::vector<std::vector<int32_t>> encoded;
  uint64_t done = 0, pending = 0;
  int64_t n_docs = 0, n_val = 0;
  auto flush = [&] {
    encoded.resize(docs.size());
    parallel_items(docs.size(), o.threads, [&](size_t i) {
      encoded[i].clear();
      encoded[i].push_back(eot);
      tok.encode_into(docs[i], encoded[i]);
    });
    for (size_t i = 0; i < docs.size(); ++i) {
      const bool is_val = val_rule.is_validation(n_docs++);
      n_val += is_val;
      (is_val ? val : train).write(encoded[i]);
    }
    docs.clear();
    texts.clear();
    done += pending;
    pending = 0;
    progress.update(done);
  };
  for (const TextFile& f : files) {
    texts.push_back(std::make_unique<std::string>(read_file(f.path, "input text")));
    for_each_document(*texts.back(), split, [&](std::string_view d) { docs.push_back(d); });
    pending += f.bytes;
    if (pending >= batch_bytes) flush();
  }
  flush();
  train.close();
  val.close();
  progress.finish();
  std::printf("prepare_text: %zu files, %lld documents (%lld for validation); train %lld tokens in %zu shards, val %lld tokens in %zu shards; "
              "%.1f MB in %.1f s (%.2f MB/s)\n",
              files.size(), static_cast<long long>(n_docs), static_cast<long long>(n_val), static_cast<long long>(train.tokens()),
              train.files().size(), static_cast<long long>(val.tokens()), val.files().size(), static_cast<double>(total) / 1e6,
              progress.seconds(), progress.mb_per_s());
  for (const auto* w : {&train, &val})
    for (const auto& f : w->files()) std::printf("  %s\n", f.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"prepare_text: text files or folders -> GPT-2 token shards (llm.c format)"};
  Options o;
  app.add_option("inputs", o.inputs, "text files or folders (walked recursively, in name order)")->required();
  app.add_option("--vocab", o.vocab, "folder holding GPT-2's encoder.json and vocab.bpe")->required();
  app.add_option("--out", o.out, "output prefix: PREFIX_train_000000.bin, ..., PREFIX_val_000000.bin")->required();
  auto* fraction = app.add_option("--val-fraction", o.val_fraction, "probability that a document goes to validation")
                       ->check(CLI::Range(0.0, 1.0))
                       ->capture_default_str();
  app.add_option("--val-docs", o.val_docs, "the first N documents go to validation")->check(CLI::NonNegativeNumber)->excludes(fraction);
  app.add_option("--seed", o.seed, "seed of the validation choice")->capture_default_str();
  app.add_option("--shard-tokens", o.shard_tokens, "tokens per shard")->check(CLI::Range(int64_t{1}, int64_t{2147483647}))->capture_default_str();
  app.add_option("--threads", o.threads, "tokenizer threads (0: all cores)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--docs", o.docs, "what a document is: file, blank-line (blocks between blank lines) or line")
      ->check(CLI::IsMember({"file", "blank-line", "line"}))
      ->capture_default_str();
  app.add_flag("--quiet", o.quiet, "no progress bar");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const trident::Error& e) {
    std::fprintf(stderr, "prepare_text: %s\n", e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prepare_text: %s\n", e.what());
    return 1;
  }
}
