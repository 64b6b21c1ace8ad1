// Tokenizer throughput on one core, in MB/s of input text (the issue asks for >= 5 MB/s for
// GPT-2). Text: the Brown corpus as scripts/get-data.sh leaves it (brown/text/*.txt in the data
// cache) when present, otherwise generated pseudo-English of the same size. The vocabularies
// come from the same cache (scripts/get-data.sh --tokenizers); a benchmark whose vocabulary is
// absent reports an error saying so.
//
//   build/benchmarks/bench_tokenizer [--benchmark_filter=Gpt2]
//
// Rates are per CPU second of the one benchmark thread (Google Benchmark's default), so other
// load on a shared machine does not lower them.
// "Warm" runs the same text again, so every repeated piece hits the per-thread cache, as it
// does after the first few megabytes of any corpus; "Cold" loads a fresh tokenizer (outside
// the timing) before every pass, so each distinct piece pays for BPE once.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>

#include "data/file_util.h"
#include "data/gpt2_tokenizer.h"
#include "data/wordpiece_tokenizer.h"

namespace {

using namespace trident::data;
namespace fs = std::filesystem;

std::string cache_dir() {
  if (const char* c = std::getenv("TRIDENT_DATA_CACHE"); c && *c) return c;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/trident";
}

// Pseudo-English: Zipf-distributed words from a fixed list, with punctuation, numbers and line
// breaks, deterministic.
std::string generated_text(size_t bytes) {
  static const char* words[] = {"the", "of", "and", "to", "a", "in", "that", "is", "was", "he", "for", "it", "with", "as",
                                "his", "on", "be", "at", "by", "I", "this", "had", "not", "are", "but", "from", "or",
                                "have", "an", "they", "which", "one", "you", "were", "her", "all", "she", "there",
                                "would", "their", "we", "him", "been", "has", "when", "who", "will", "more", "no",
                                "if", "out", "so", "said", "what", "up", "its", "about", "into", "than", "them", "can",
                                "only", "other", "new", "some", "could", "time", "these", "two", "may", "then", "do",
                                "first", "any", "my", "now", "such", "like", "our", "over", "man", "me", "even",
                                "most", "made", "after", "also", "did", "many", "before", "must", "through", "back",
                                "years", "where", "much", "your", "way", "well", "down", "should", "because", "each",
                                "just", "those", "people", "Mr.", "how", "too", "little", "state", "good", "very",
                                "make", "world", "still", "own", "see", "men", "work", "long", "get", "here",
                                "between", "both", "life", "being", "under", "never", "day", "same", "another",
                                "know", "while", "last", "might", "us", "great", "old", "year", "off", "come",
                                "since", "against", "go", "came", "right", "used", "take", "three", "administration",
                                "constitutional", "investigation", "irregularities", "Atlanta's", "Fulton"};
  constexpr size_t n = std::size(words);
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = 1.0 / static_cast<double>(i + 1);
  std::discrete_distribution<size_t> pick(w.begin(), w.end());
  std::mt19937 rng(42);
  std::string s;
  s.reserve(bytes + 64);
  size_t in_sentence = 0;
  while (s.size() < bytes) {
    if (in_sentence == 0 && !s.empty()) s += ' ';
    std::string word = words[pick(rng)];
    if (in_sentence == 0) word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
    if (rng() % 50 == 0) word = std::to_string(rng() % 10000);
    s += (in_sentence ? " " : "") + word;
    ++in_sentence;
    if (rng() % 12 == 0) s += ',';
    if (in_sentence > 8 && rng() % 10 == 0) {
      s += (rng() % 8 == 0) ? "?" : ".";
      in_sentence = 0;
      if (rng() % 6 == 0) s += '\n';
    }
  }
  return s;
}

const std::string& text(std::string* source = nullptr) {
  static std::string label;
  static const std::string t = [] {
    const fs::path dir = fs::path(cache_dir()) / "brown" / "text";
    if (fs::is_directory(dir)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      std::string all;
      for (const auto& f : files) all += read_file(f.string(), "Brown text") + "\n";
      if (!all.empty()) {
        label = "Brown corpus, " + std::to_string(files.size()) + " files";
        return all;
      }
    }
    label = "generated text";
    return generated_text(6 << 20);
  }();
  if (source) *source = label;
  return t;
}

std::optional<Gpt2Tokenizer> load_gpt2(benchmark::State& state) {
  const std::string dir = cache_dir() + "/gpt2";
  if (!fs::exists(dir + "/encoder.json")) {
    state.SkipWithError(("GPT-2 vocabulary absent from " + dir + ": run scripts/get-data.sh --tokenizers").c_str());
    return std::nullopt;
  }
  return Gpt2Tokenizer::from_dir(dir);
}

void label(benchmark::State& state, size_t tokens) {
  std::string source;
  text(&source);
  state.SetLabel(source);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text().size()));
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(text().size()) * static_cast<double>(state.iterations()) / 1e6,
                                              benchmark::Counter::kIsRate);
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_Gpt2EncodeWarm(benchmark::State& state) {
  auto tok = load_gpt2(state);
  if (!tok) return;
  std::vector<int32_t> ids;
  tok->encode_into(text(), ids);  // fills this thread's cache
  for (auto _ : state) {
    ids.clear();
    tok->encode_into(text(), ids);
    benchmark::DoNotOptimize(ids.data());
  }
  label(state, ids.size());
}
BENCHMARK(BM_Gpt2EncodeWarm)->Unit(benchmark::kMillisecond);

void BM_Gpt2EncodeCold(benchmark::State& state) {
  auto first = load_gpt2(state);
  if (!first) return;
  std::vector<int32_t> ids;
  for (auto _ : state) {
    state.PauseTiming();
    Gpt2Tokenizer tok = Gpt2Tokenizer::from_dir(cache_dir() + "/gpt2");
    ids.clear();
    state.ResumeTiming();
    tok.encode_into(text(), ids);
    benchmark::DoNotOptimize(ids.data());
  }
  label(state, ids.size());
}
BENCHMARK(BM_Gpt2EncodeCold)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_Gpt2Decode(benchmark::State& state) {
  auto tok = load_gpt2(state);
  if (!tok) return;
  const std::vector<int32_t> ids = tok->encode(text());
  for (auto _ : state) {
    std::string out = tok->decode(ids);
    benchmark::DoNotOptimize(out.data());
  }
  label(state, ids.size());
}
BENCHMARK(BM_Gpt2Decode)->Unit(benchmark::kMillisecond);

void BM_WordPieceEncode(benchmark::State& state) {
  const std::string path = cache_dir() + "/bert/assets/vocab.json";
  if (!fs::exists(path)) {
    state.SkipWithError(("BERT vocabulary absent: " + path + ": run scripts/get-data.sh --tokenizers").c_str());
    return;
  }
  const WordPieceTokenizer tok = WordPieceTokenizer::from_file(path);
  std::vector<int32_t> ids;
  for (auto _ : state) {
    ids.clear();
    tok.encode_into(text(), ids);
    benchmark::DoNotOptimize(ids.data());
  }
  label(state, ids.size());
}
BENCHMARK(BM_WordPieceEncode)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
