// The common command-line options of the training programs (apps/train_common.h): their
// definitions, --config FILE.json (flags overriding it) and the checks run before anything is
// built. The training loop itself is apps/train_common.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/device.h"
#include "apps/train_common.h"
#include "core/error.h"
#include "core/parallel.h"

namespace trident::apps {

namespace {

using json = nlohmann::json;

std::string option_name(const std::string& key) {
  std::string s = key;
  std::replace(s.begin(), s.end(), '_', '-');
  return "--" + s;
}

}  // namespace

void add_train_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--device", o.device, "cpu, cuda or cuda:N (NOTE [Device in the apps]: one process per GPU)")
      ->capture_default_str();
  app.add_option("--precision", o.precision, "fp32, bf16 or fp16 (autocast with f32 master weights)")->capture_default_str();
  app.add_option("--initial-loss-scale", o.initial_loss_scale,
                 "fp16: the dynamic loss scale to start from (0: 65536; halved and the step skipped on overflow, "
                 "doubled after 2000 clean steps)")
      ->capture_default_str();
  app.add_option("--peak-tflops", o.peak_tflops,
                 "the GPU's dense peak TFLOP/s for the MFU (0: TRIDENT_PEAK_TFLOPS, else apps/mfu.cpp's table)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--batch", o.batch, "examples per micro-batch")->capture_default_str();
  app.add_option("--grad-accum", o.grad_accum, "micro-batches per optimizer step")->capture_default_str();
  app.add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  app.add_option("--optimizer", o.optimizer, "adamw, sgd (Nesterov momentum) or rmsprop")->capture_default_str();
  app.add_option("--beta2", o.beta2, "AdamW's second-moment decay")->capture_default_str();
  app.add_option("--eps", o.eps, "AdamW's and RMSProp's epsilon")->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD's momentum (Nesterov when positive) and RMSProp's")->capture_default_str();
  app.add_option("--rmsprop-alpha", o.rmsprop_alpha, "RMSProp's squared-gradient decay")->capture_default_str();
  app.add_option("--schedule", o.schedule, "learning-rate schedule: cosine, linear or constant")->capture_default_str();
  app.add_option("--warmup", o.warmup, "linear warmup steps")->capture_default_str();
  app.add_option("--min-lr-fraction", o.min_lr_fraction, "cosine/linear decay ends at lr times this")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "weight decay (on matrices, embeddings and kernels only)")->capture_default_str();
  app.add_option("--grad-clip", o.grad_clip, "clip the gradient norm to this (0: off)")->capture_default_str();
  app.add_option("--steps", o.steps, "optimizer steps (0: from --epochs)")->capture_default_str();
  app.add_option("--epochs", o.epochs, "epochs over the training set when --steps is 0")->capture_default_str();
  app.add_option("--time-limit", o.time_limit, "stop after this many seconds of training (0: no limit)")->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "evaluate every N steps (0: before and after training only; -1: never)")->capture_default_str();
  app.add_option("--eval-batches", o.eval_batches, "validation batches per evaluation (0: all)")->capture_default_str();
  app.add_option("--log-every", o.log_every, "a log line and a metrics record every N steps")->capture_default_str();
  app.add_option("--ckpt-dir", o.ckpt_dir, "folder for checkpoints (step-N subfolders) and metrics.jsonl");
  app.add_option("--ckpt-every", o.ckpt_every, "write a checkpoint every N steps (needs --ckpt-dir; the last step always)")
      ->capture_default_str();
  app.add_option("--resume", o.resume, "a checkpoint folder to continue from, or 'latest' (the newest in --ckpt-dir)");
  app.add_option("--seed", o.seed, "random seed (init, dropout, data order)")->capture_default_str();
  app.add_option("--threads", o.threads, "compute threads (0: all cores)")->capture_default_str();
  app.add_option("--workers", o.workers, "data loader threads")->capture_default_str();
  app.add_option("--metrics", o.metrics, "JSON-lines metrics file (default <ckpt-dir>/metrics.jsonl)");
  app.add_option("--plot", o.plot, "PNG loss plot written at the end with gnuplot (default beside the metrics)");
  app.add_flag("--dry-run", o.dry_run, "print the model, its parameter count and memory estimate, then exit");
  app.add_flag("--profile", o.profile, "time each op over the training steps (on the GPU: CUDA events) and print the largest");
  app.add_option("--config", o.config, "a JSON file of options (keys as the flags, e.g. \"grad_accum\": 4); flags override it");
  app.add_option("--dp", o.dp, "data-parallel ranks: run under mpirun -np dp x pp x tp (--batch is per rank)")
      ->capture_default_str();
  app.add_option("--pp", o.pp, "pipeline stages (GPipe): run under mpirun -np dp x pp x tp")->capture_default_str();
  app.add_option("--micro-batches", o.micro_batches, "--pp: micro-batches a step's batch is cut into")
      ->capture_default_str();
  app.add_option("--pp-schedule", o.pp_schedule, "--pp: gpipe (all forwards, then all backwards) or 1f1b")
      ->capture_default_str();
  app.add_option("--pp-chunks", o.pp_chunks,
                 "--pp: model chunks per rank, the interleaved schedule (Megatron-LM's virtual stages; --micro-batches a "
                 "multiple of --pp)")
      ->capture_default_str();
  app.add_option("--remat", o.remat, "--pp: re-materialize always, except_last or never")->capture_default_str();
  app.add_option("--pp-balance", o.pp_balance,
                 "--pp: cut the layers into stages of equal parameters, or of equal compute (train_imagenet)")
      ->capture_default_str();
  app.add_option("--trace", o.trace, "--pp: write the last step's pipeline timeline here (Chrome trace JSON)");
  app.add_option("--tp", o.tp, "tensor-parallel ranks, Megatron-LM's split of every layer (innermost axis)")
      ->capture_default_str();
  app.add_flag("--zero", o.zero, "ZeRO-1: shard the optimizer state over the --dp ranks");
  app.add_flag("--sequence-parallel", o.sequence_parallel,
               "with --tp: LayerNorm and dropout on sequence shards, all-gather/reduce-scatter for the all-reduces");
}

int parse(CLI::App& app, int argc, char** argv) {
  for (CLI::Option* opt : app.get_options()) opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::vector<std::string> cli(argv + 1, argv + argc);
  std::string config;
  for (size_t i = 0; i < cli.size(); ++i) {
    if (cli[i] == "--config" && i + 1 < cli.size()) config = cli[i + 1];
    if (cli[i].rfind("--config=", 0) == 0) config = cli[i].substr(9);
  }
  std::vector<std::string> args;
  if (!config.empty()) {
    std::ifstream f(config);
    if (!f) {
      std::fprintf(stderr, "%s: cannot read the config file '%s'\n", app.get_name().c_str(), config.c_str());
      return 2;
    }
    json j;
    try {
      j = json::parse(f);
    } catch (const json::exception& e) {
      std::fprintf(stderr, "%s: the config file '%s' is not valid JSON: %s\n", app.get_name().c_str(), config.c_str(), e.what());
      return 2;
    }
    if (!j.is_object()) {
      std::fprintf(stderr, "%s: the config file '%s' must hold a JSON object, got %s\n", app.get_name().c_str(), config.c_str(),
                   j.type_name());
      return 2;
    }
    for (const auto& [key, value] : j.items()) {
      const std::string name = option_name(key);
      const CLI::Option* opt = app.get_option_no_throw(name);
      if (opt == nullptr || key == "config") {
        std::fprintf(stderr, "%s: unknown key \"%s\" in the config file '%s' (the keys are the options of --help)\n",
                     app.get_name().c_str(), key.c_str(), config.c_str());
        return 2;
      }
      if (value.is_boolean()) {
        if (value.get<bool>()) args.push_back(name);
        continue;
      }
      args.push_back(name);
      args.push_back(value.is_string() ? value.get<std::string>() : value.dump());
    }
  }
  args.insert(args.end(), cli.begin(), cli.end());
  std::reverse(args.begin(), args.end());  // CLI11 takes the vector in reverse order
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return -1;
}

void check_train_options(const TrainOptions& o) {
  TRIDENT_CHECK(o.dp > 0 && o.pp > 0 && o.tp > 0, "--dp, --pp and --tp must be positive, got --dp ", o.dp, " --pp ", o.pp,
                " --tp ", o.tp);
  resolve_device(o.device);  // NOTE [Device in the apps]
  TRIDENT_CHECK(o.precision == "fp32" || o.precision == "bf16" || o.precision == "fp16",
                "--precision must be fp32, bf16 or fp16, got '", o.precision, "'");
  TRIDENT_CHECK(o.initial_loss_scale >= 0 && std::isfinite(o.initial_loss_scale),
                "--initial-loss-scale must be positive (or 0 for the default), got ", o.initial_loss_scale);
  TRIDENT_CHECK(o.initial_loss_scale == 0 || o.precision == "fp16", "--initial-loss-scale is fp16's (bf16 and fp32 ",
                "need no loss scaling): it needs --precision fp16, got --precision ", o.precision);
  TRIDENT_CHECK(o.schedule == "cosine" || o.schedule == "linear" || o.schedule == "constant",
                "--schedule must be cosine, linear or constant, got '", o.schedule, "'",
                o.schedule == "gpipe" || o.schedule == "1f1b" ? " (the pipeline's schedule is --pp-schedule)" : "");
  TRIDENT_CHECK(o.batch > 0, "--batch must be positive, got ", o.batch);
  TRIDENT_CHECK(o.grad_accum > 0, "--grad-accum must be positive, got ", o.grad_accum);
  TRIDENT_CHECK(o.lr > 0 && std::isfinite(o.lr), "--lr must be positive, got ", o.lr);
  TRIDENT_CHECK(o.optimizer == "adamw" || o.optimizer == "sgd" || o.optimizer == "rmsprop",
                "--optimizer must be adamw, sgd or rmsprop, got '", o.optimizer, "'");
  TRIDENT_CHECK(o.beta2 >= 0 && o.beta2 < 1, "--beta2 must be in [0, 1), got ", o.beta2);
  TRIDENT_CHECK(o.eps > 0 && std::isfinite(o.eps), "--eps must be positive, got ", o.eps);
  TRIDENT_CHECK(o.rmsprop_alpha >= 0 && o.rmsprop_alpha < 1, "--rmsprop-alpha must be in [0, 1), got ", o.rmsprop_alpha);
  TRIDENT_CHECK(o.momentum >= 0 && o.momentum < 1, "--momentum must be in [0, 1), got ", o.momentum);
  TRIDENT_CHECK(o.weight_decay >= 0, "--weight-decay must be >= 0, got ", o.weight_decay);
  TRIDENT_CHECK(o.steps >= 0 && o.warmup >= 0 && o.ckpt_every >= 0 && o.eval_batches >= 0,
                "--steps, --warmup, --eval-batches and --ckpt-every must be >= 0");
  TRIDENT_CHECK(o.eval_every >= -1, "--eval-every must be >= 0, or -1 for no evaluation, got ", o.eval_every);
  TRIDENT_CHECK(o.steps > 0 || o.epochs > 0, "--epochs must be positive when --steps is 0, got ", o.epochs);
  TRIDENT_CHECK(o.log_every > 0, "--log-every must be positive, got ", o.log_every);
  TRIDENT_CHECK(o.ckpt_every == 0 || !o.ckpt_dir.empty(), "--ckpt-every needs --ckpt-dir");
  TRIDENT_CHECK(o.threads >= 0 && o.workers >= 0, "--threads and --workers must be >= 0");
  // NOTE [Pipeline training apps]
  if (o.pp > 1) {
    // bf16 and fp16 run through the stages under the step's autocast scope (NOTE [Autocast
    // state]); fp16's loss scale multiplies the last stage's loss (Pipeline::set_loss_scale) and
    // the ranks agree on skipping an overflowing step (NOTE [Pipeline training apps]).
    TRIDENT_CHECK(o.pp_schedule == "gpipe" || o.pp_schedule == "1f1b", "--pp-schedule must be gpipe or 1f1b, got '",
                  o.pp_schedule, "'");
    TRIDENT_CHECK(o.remat == "always" || o.remat == "except_last" || o.remat == "never",
                  "--remat must be always, except_last or never, got '", o.remat, "'");
    TRIDENT_CHECK(o.micro_batches >= 1, "--micro-batches must be positive, got ", o.micro_batches);
    TRIDENT_CHECK(o.pp_balance == "parameters" || o.pp_balance == "compute", "--pp-balance must be parameters or compute, got '",
                  o.pp_balance, "'");
    TRIDENT_CHECK(o.batch * o.grad_accum % o.micro_batches == 0, "--micro-batches ", o.micro_batches,
                  " does not divide a step's batch of ", o.batch * o.grad_accum, " rows (--batch ", o.batch,
                  " x --grad-accum ", o.grad_accum, ")");
    // NOTE [Interleaved schedule]
    TRIDENT_CHECK(o.pp_chunks >= 1, "--pp-chunks must be positive, got ", o.pp_chunks);
    TRIDENT_CHECK(o.pp_chunks == 1 || o.micro_batches % o.pp == 0, "--pp-chunks ", o.pp_chunks,
                  " (the interleaved schedule) takes the micro-batches in groups of the ", o.pp, " stages: --micro-batches ",
                  o.micro_batches, " is not a multiple of --pp ", o.pp);
  } else {
    TRIDENT_CHECK(o.micro_batches == 1 && o.trace.empty() && o.pp_chunks == 1,
                  "--micro-batches, --pp-chunks and --trace are the pipeline's: they need --pp > 1",
                  " (without it, --grad-accum splits a step's batch)");
  }
  TRIDENT_CHECK(!o.sequence_parallel || o.tp > 1,
                "--sequence-parallel splits the sequence over the tensor-parallel ranks: it needs --tp > 1");
  if (o.threads > 0) set_num_threads(o.threads);
}

}  // namespace trident::apps
