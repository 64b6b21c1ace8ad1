// Pipeline benchmarks, run under mpirun with K ranks (scripts/bench-pipeline.sh): the pipeline
// has K stages of a small GPT-2 (8 blocks, width 64, cut by profiled time).
//
//   bubble [--max-m 32] [--trace PREFIX]
//     For M = 1, 2, 4, 8, 16, 32 micro-batches (2 rows of 32 tokens each), GPipe schedule, the
//     measured bubble of a step (NOTE [Pipeline timeline]; the median of 3 steps after a warm-up)
//     beside (K - 1) / (M + K - 1). With --trace, the Chrome trace and a Gantt PNG of M = 8.
//   interleaved [--max-m 16]
//     NOTE [Interleaved schedule]: 1F1B with V = 1, 2 and 4 chunks per rank (as many as the 10
//     layers allow) of GPT-2 8 x 256, 4 rows of 64 tokens per micro-batch, for M = K, 2K, ...: the measured bubble beside
//     (K - 1) / (V M + K - 1) and the step time (medians of 3 steps after a warm-up), and each
//     V's step time over V = 1's.
//   memory
//     Peak activation bytes per stage at M = 8 (16 rows of 64 tokens): re-materialization
//     always / except_last / never under GPipe, and never / always under 1F1B, plain and over
//     two chunks per rank; the ratios.
//   memory-amoebanet
//     The same for AmoebaNet-D(6, 16) on 16 images of 32x32 (cut by parameter count).
//   held [gpt2-124m | amoebanet-d(18,208)]
//     NOTE [Stage-only model]: per stage, the parameters it holds and the bytes this rank's
//     allocator holds once the whole model is built, then once the pipeline has cut it (the
//     allocator's current bytes above what the rank held before building), and the process's
//     resident memory (VmRSS) above its start at the same two points. GPipe's memory argument:
//     the cut columns fall to the stage's share.
//   build [amoebanet-d(L,D) | gpt2-PRESET | bert-PRESET]   (default amoebanet-d(18,208), 1000
//   classes at 224; gpt2-124m, bert-large, ...)
//     NOTE [Stage-only build]: per stage, the peak resident memory (VmHWM, reset between the
//     two) of building the stage as the whole model cut by keep_stage, and as the stage-only
//     build, above the process's resident memory before each; what stays; and the seconds each
//     build took (all ranks build at once: the apps used to build whole models one rank after
//     another, K times the whole build's seconds in all).
//
// Plain program (not Google Benchmark): every rank runs the same steps; rank 0 prints.
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include "trident.h"

using namespace trident;
using namespace trident::parallel;
using namespace trident::parallel::pipeline;

namespace {

models::GPT2Config bench_config() {
  models::GPT2Config c = models::GPT2Config::preset("tiny");
  c.n_layer = 8;
  c.n_head = 4;
  c.n_embd = 64;
  c.vocab_size = 64;
  c.padded_vocab_size = 64;
  c.n_positions = 64;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  return c;
}

models::Batch bench_batch(int64_t rows, int64_t T, uint64_t seed) {
  Generator g(seed);
  return models::Batch{{"input_ids", randint(0, 64, {rows, T}, DType::I64, &g)},
                       {"targets", randint(0, 64, {rows, T}, DType::I64, &g)}};
}

std::shared_ptr<comm::Communicator> world() { return comm::Communicator::world(); }

// The median bubble and span of 3 steps after a warm-up, and the last step's trace.
struct Measured {
  double bubble = 0, span = 0;
  PipelineTrace trace;
};
Measured median_step(Pipeline& pipe, int64_t M, int64_t rows = 2, int64_t T = 32) {
  std::vector<double> bubbles, spans;
  Measured out;
  for (int s = 0; s < 4; ++s) {
    pipe.step(bench_batch(rows * M, T, static_cast<uint64_t>(s)));
    pipe.zero_grad();
    PipelineTrace t = pipe.gather_trace();
    if (s == 0) continue;  // warm-up
    bubbles.push_back(t.bubble_fraction());
    spans.push_back(t.span());
    out.trace = std::move(t);
  }
  std::sort(bubbles.begin(), bubbles.end());
  std::sort(spans.begin(), spans.end());
  out.bubble = bubbles[1];
  out.span = spans[1];
  return out;
}

void interleaved(int64_t max_m) {
  const int K = world()->size();
  // Wider than bench_config(), with longer micro-batches: a chunk's work (a few ms) well above
  // a transfer's cost, as on a real model.
  models::GPT2Config c = bench_config();
  c.n_embd = 256;
  const int64_t L = c.n_layer + 2, rows = 4, T = 64;
  if (world()->rank() == 0)
    std::printf("interleaved 1F1B, K = %d stages, GPT-2 8 x 256, 4 rows x 64 tokens per micro-batch, cut by profiled time\n"
                "%6s %3s %10s %10s %10s %12s\n",
                K, "M", "V", "measured", "theory", "step ms", "vs V = 1");
  for (int64_t M = K; M <= max_m; M *= 2) {
    double base = 0;
    for (int64_t V : {1, 2, 4}) {
      if (K * V > L) continue;
      Generator init(1);
      models::GPT2LMHeadModel model(c, &init);
      Pipeline pipe(model, world(),
                    {.micro_batches = M, .schedule = Schedule::OneFOneB, .remat = Remat::Never,
                     .balance_by = BalanceBy::Time, .profile_batch = bench_batch(rows, T, 9), .timeline = true, .chunks = V});
      const Measured r = median_step(pipe, M, rows, T);
      const double b = r.bubble, span = r.span;
      if (V == 1) base = span;
      if (world()->rank() == 0)
        std::printf("%6lld %3lld %9.1f%% %9.1f%% %10.2f %11.2fx\n", static_cast<long long>(M), static_cast<long long>(V),
                    100 * b, 100 * theoretical_bubble(K, M, V), 1e3 * span, span / base);
    }
  }
}

void bubble(int64_t max_m, const std::string& trace_prefix) {
  const int K = world()->size();
  if (world()->rank() == 0)
    std::printf("pipeline bubble, K = %d stages, GPipe schedule, 2 rows x 32 tokens per micro-batch\n%6s %10s %10s %8s %10s\n",
                K, "M", "measured", "theory", "diff", "step ms");
  for (int64_t M = 1; M <= max_m; M *= 2) {
    // A fresh model for each pipeline: the cut by time may differ, and a pipeline keeps only its
    // stage's tensors (NOTE [Stage-only model]).
    Generator init(1);
    models::GPT2LMHeadModel model(bench_config(), &init);
    Pipeline pipe(model, world(),
                  {.micro_batches = M, .schedule = Schedule::GPipe, .remat = Remat::Never, .balance_by = BalanceBy::Time,
                   .profile_batch = bench_batch(2, 32, 9), .timeline = true});
    const Measured r = median_step(pipe, M);
    const double b = r.bubble, th = theoretical_bubble(K, M);
    if (world()->rank() == 0) {
      std::printf("%6lld %9.1f%% %9.1f%% %+7.1f %10.2f\n", static_cast<long long>(M), 100 * b, 100 * th, 100 * (b - th),
                  1e3 * r.span);
      if (M == 8 && !trace_prefix.empty()) {
        r.trace.write_chrome_trace(trace_prefix + ".json");
        const bool png = r.trace.write_gantt_png(trace_prefix + ".png");
        std::printf("       trace: %s.json%s\n", trace_prefix.c_str(), png ? (", Gantt chart: " + trace_prefix + ".png").c_str() : " (no gnuplot: no PNG)");
      }
    }
  }
}

void memory(const std::function<std::unique_ptr<models::LayeredModel>()>& build, const models::Batch& batch,
            const std::string& what) {
  const int K = world()->size();
  // A fresh model per pipeline: an interleaved one cuts it otherwise (NOTE [Stage-only model]).
  auto peak = [&](Schedule s, Remat r, int64_t chunks = 1) {
    const std::unique_ptr<models::LayeredModel> model = build();
    if (K * chunks > static_cast<int64_t>(model->layers().size())) return std::vector<int64_t>{};
    Pipeline pipe(*model, world(), {.micro_batches = 8, .schedule = s, .remat = r, .chunks = chunks});
    pipe.step(batch);
    pipe.zero_grad();
    pipe.step(batch);
    pipe.zero_grad();
    return pipe.gather_peak_activation_bytes();
  };
  struct Row {
    const char* name;
    std::vector<int64_t> bytes;
  };
  std::vector<Row> rows{{"gpipe always", peak(Schedule::GPipe, Remat::Always)},
                        {"gpipe except_last", peak(Schedule::GPipe, Remat::ExceptLast)},
                        {"gpipe never", peak(Schedule::GPipe, Remat::Never)},
                        {"1f1b always", peak(Schedule::OneFOneB, Remat::Always)},
                        {"1f1b never", peak(Schedule::OneFOneB, Remat::Never)},
                        // NOTE [Interleaved schedule]: more micro-batches in flight in the warm-up.
                        {"1f1b V=2 always", peak(Schedule::OneFOneB, Remat::Always, 2)},
                        {"1f1b V=2 never", peak(Schedule::OneFOneB, Remat::Never, 2)}};
  if (world()->rank() != 0) return;
  std::printf("peak activation bytes per stage, K = %d, M = 8, %s\n%-18s", K, what.c_str(), "");
  for (int s = 0; s < K; ++s) std::printf(" %11s", ("stage " + std::to_string(s)).c_str());
  std::printf(" %11s %14s\n", "max", "max / gpipe never");
  const double base = static_cast<double>(*std::max_element(rows[2].bytes.begin(), rows[2].bytes.end()));
  for (const Row& r : rows) {
    if (r.bytes.empty()) continue;  // too few layers for the chunks
    std::printf("%-18s", r.name);
    for (int64_t b : r.bytes) std::printf(" %11lld", static_cast<long long>(b));
    const auto mx = *std::max_element(r.bytes.begin(), r.bytes.end());
    std::printf(" %11lld %14.2f\n", static_cast<long long>(mx), static_cast<double>(mx) / base);
  }
}

// A memory field of /proc/self/status ("VmRSS", "VmHWM"), bytes; 0 where /proc is missing.
double status_bytes(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  const std::string format = std::string(field) + ": %lf kB";
  char line[256];
  double kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, format.c_str(), &kb) == 1) break;
  std::fclose(f);
  return kb * 1024;
}
// This process's resident memory, and its peak.
double resident_bytes() { return status_bytes("VmRSS"); }
double peak_resident_bytes() { return status_bytes("VmHWM"); }

// Resets the process's peak resident memory to its current one (Linux 4.0 and later: writing 5
// to /proc/self/clear_refs); false where that is not possible.
bool reset_peak_resident() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

// The model `which` names, built whole (keep = kAllLayers) or its layers `keep` only.
std::unique_ptr<models::LayeredModel> build_model(const std::string& which, Generator* gen, const models::LayerRange& keep) {
  if (which.rfind("gpt2-", 0) == 0)
    return std::make_unique<models::GPT2LMHeadModel>(models::GPT2Config::preset(which.substr(5)), gen, keep);
  if (which.rfind("bert-", 0) == 0)
    return std::make_unique<models::BertForPreTraining>(models::BertConfig::preset(which.substr(5)), gen, keep);
  return std::make_unique<models::AmoebaNetLayered>(
      std::make_shared<models::AmoebaNet>(models::AmoebaNetConfig::from_name(which, 1000, 224), gen, keep));
}

void build_peak(const std::string& which) {
  const int K = world()->size(), stage = world()->rank();
  std::vector<double> costs;
  int64_t parameters = 0;
  if (which.rfind("gpt2-", 0) == 0 || which.rfind("bert-", 0) == 0) {
    // Per-layer counts without building the model (one block is built to count).
    const std::vector<int64_t> n = which[0] == 'g' ? models::gpt2_layer_parameters(models::GPT2Config::preset(which.substr(5)))
                                                   : models::bert_layer_parameters(models::BertConfig::preset(which.substr(5)));
    for (const int64_t p : n) costs.push_back(static_cast<double>(p));
    parameters = which[0] == 'g' ? models::GPT2Config::preset(which.substr(5)).num_parameters()
                                 : models::BertConfig::preset(which.substr(5)).num_parameters();
  } else {
    const models::AmoebaNetPlan plan = models::amoebanet_plan(models::AmoebaNetConfig::from_name(which, 1000, 224));
    for (const models::AmoebaLayerInfo& l : plan.layers) costs.push_back(static_cast<double>(l.parameters));
    parameters = plan.parameters;
  }
  const Balance balance = balance_by_costs(costs, K);
  const auto range = stage_ranges(balance)[static_cast<size_t>(stage)];
  // Per stage: whole then cut: peak, seconds; stage-only: peak, seconds; held after the stage-only build.
  double v[5] = {0, 0, 0, 0, 0};
  for (int mode = 0; mode < 2; ++mode) {
    empty_cache(Device::cpu());
    TRIDENT_CHECK(reset_peak_resident(), "build: cannot reset the peak resident memory (/proc/self/clear_refs)");
    const double rss0 = resident_bytes();
    Generator init(1);
    const auto t0 = std::chrono::steady_clock::now();
    if (mode == 0) {
      const std::unique_ptr<models::LayeredModel> model = build_model(which, &init, models::kAllLayers);
      keep_stage(*model, balance, stage);
      v[0] = peak_resident_bytes() - rss0;
      v[1] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else {
      const std::unique_ptr<models::LayeredModel> model =
          build_model(which, &init, {static_cast<size_t>(range.first), static_cast<size_t>(range.second)});
      v[2] = peak_resident_bytes() - rss0;
      v[3] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      v[4] = resident_bytes() - rss0;
    }
  }
  Tensor t = zeros({K, 5}, DType::F64);
  std::copy(v, v + 5, t.data<double>() + 5 * stage);
  world()->all_reduce(t).wait();
  if (world()->rank() != 0) return;
  std::printf("building one stage per rank, %s (%.1fM parameters), K = %d stages cut by parameter count %s\n",
              which.c_str(), static_cast<double>(parameters) / 1e6, K, balance_str(balance).c_str());
  std::printf("%6s %10s %26s %24s %14s %8s %18s %18s\n", "stage", "layers", "peak MB: whole, then cut", "peak MB: stage-only",
              "MB held", "ratio", "s: whole, then cut", "s: stage-only");
  const double* r = t.data<double>();
  const auto ranges = stage_ranges(balance);
  for (int s = 0; s < K; ++s)
    std::printf("%6d %4lld-%-5lld %26.1f %24.1f %14.1f %8.2f %18.2f %18.2f\n", s,
                static_cast<long long>(ranges[static_cast<size_t>(s)].first),
                static_cast<long long>(ranges[static_cast<size_t>(s)].second), r[5 * s] / 1e6, r[5 * s + 2] / 1e6,
                r[5 * s + 4] / 1e6, r[5 * s + 2] / r[5 * s], r[5 * s + 1], r[5 * s + 3]);
}

void held(const std::string& which) {
  const int K = world()->size();
  const int64_t base = memory_stats(Device::cpu()).current_bytes;
  const double rss0 = resident_bytes();
  Generator init(1);
  std::shared_ptr<models::LayeredModel> model;
  if (which == "gpt2-124m") {
    model = std::make_shared<models::GPT2LMHeadModel>(models::GPT2Config::preset("124M"), &init);
  } else {
    TRIDENT_CHECK(which == "amoebanet-d(18,208)", "held: unknown model '", which, "'; choose gpt2-124m or amoebanet-d(18,208)");
    model = std::make_shared<models::AmoebaNetLayered>(
        std::make_shared<models::AmoebaNet>(models::AmoebaNetConfig::from_name(which, 1000, 224), &init));
  }
  const int64_t built = memory_stats(Device::cpu()).current_bytes - base;
  const double rss_built = resident_bytes() - rss0;
  Pipeline pipe(*model, world(), {.micro_batches = 1});
  const int64_t kept = memory_stats(Device::cpu()).current_bytes - base;
  const double rss_kept = resident_bytes() - rss0;
  int64_t params = 0;
  for (const Tensor& p : pipe.parameters()) params += p.numel();
  Tensor t = zeros({K, 5}, DType::F64);
  double* row = t.data<double>() + 5 * pipe.stage();
  row[0] = static_cast<double>(params);
  row[1] = static_cast<double>(built);
  row[2] = static_cast<double>(kept);
  row[3] = rss_built;
  row[4] = rss_kept;
  world()->all_reduce(t).wait();
  if (world()->rank() != 0) return;
  std::printf("memory held per rank, %s (%.1fM parameters), K = %d stages cut by parameter count %s\n", which.c_str(),
              static_cast<double>(model->num_parameters()) / 1e6, K, balance_str(pipe.balance()).c_str());
  std::printf("%6s %14s %16s %16s %8s %14s %14s\n", "stage", "parameters", "MB model built", "MB after the cut", "ratio",
              "RSS MB built", "RSS MB cut");
  const double* v = t.data<double>();
  for (int s = 0; s < K; ++s)
    std::printf("%6d %13.1fM %16.1f %16.1f %8.3f %14.1f %14.1f\n", s, v[5 * s] / 1e6, v[5 * s + 1] / 1e6,
                v[5 * s + 2] / 1e6, v[5 * s + 2] / v[5 * s + 1], v[5 * s + 3] / 1e6, v[5 * s + 4] / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string what = argc > 1 ? argv[1] : "bubble";
    int64_t max_m = 32;
    std::string trace;
    for (int i = what == "held" || what == "build" ? argc : 2; i + 1 < argc; i += 2) {
      const std::string k = argv[i];
      if (k == "--max-m") max_m = std::stoll(argv[i + 1]);
      else if (k == "--trace") trace = argv[i + 1];
      else TRIDENT_CHECK(false, "unknown option ", k, " (--max-m N, --trace PREFIX)");
    }
    if (what == "bubble") bubble(max_m, trace);
    else if (what == "memory") {
      memory(
          [] {
            Generator init(1);
            return std::make_unique<models::GPT2LMHeadModel>(bench_config(), &init);
          },
          bench_batch(16, 64, 3), "16 rows x 64 tokens, GPT-2 8 x 64");
    } else if (what == "memory-amoebanet") {
      // AmoebaNet-D(6, 16) on 32x32 images of 10 classes (small stem), with the auxiliary head;
      // 16 images per step.
      models::AmoebaNetConfig c = models::AmoebaNetConfig::from_name("amoebanet-d(6,16)", 10, 32);
      c.aux_head = true;
      auto build = [c] {
        Generator init(1);
        return std::make_unique<models::AmoebaNetLayered>(std::make_shared<models::AmoebaNet>(c, &init));
      };
      Generator g(3);
      const models::Batch batch{{"images", randn({16, 3, 32, 32}, DType::F32, &g)},
                                {"labels", randint(0, 10, {16}, DType::I64, &g)}};
      memory(build, batch, "16 images 32x32, AmoebaNet-D(6, 16)");
    }
    else if (what == "interleaved") interleaved(max_m);
    else if (what == "held") held(argc > 2 ? argv[2] : "gpt2-124m");
    else if (what == "build") build_peak(argc > 2 ? argv[2] : "amoebanet-d(18,208)");
    else TRIDENT_CHECK(false, "unknown benchmark '", what, "'; choose bubble, memory, memory-amoebanet, held or build");
  } catch (const Error& e) {
    std::fprintf(stderr, "pipeline_bench: %s\n", e.message().c_str());
    return 2;
  }
  return 0;
}
