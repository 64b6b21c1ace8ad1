// train_gpt2: GPT-2 on llm.c-format token shards (apps/prepare_text makes them).
//
//   train_gpt2 --train "$HOME/.cache/trident/brown/gpt2/brown_train_*.bin"
//              --val "$HOME/.cache/trident/brown/gpt2/brown_val_*.bin" --preset tiny --steps 300
//
// The loop, options, checkpoints and metrics are apps/train_common.h's (NOTE [Training apps]).
#include <cstdio>
#include <optional>

#include "apps/mfu.h"
#include "apps/train_common.h"
#include "parallel/tensor_parallel/tp_layers.h"
#include "data/lm_dataset.h"
#include "data/token_shard.h"
#include "models/gpt2.h"

using namespace trident;
using namespace trident::models;

namespace {

std::string describe(const GPT2Config& c, int64_t seq_len) {
  auto n = [](int64_t v) { return std::to_string(v); };
  return "GPT-2: " + n(c.n_layer) + " layers, " + n(c.n_head) + " heads, width " + n(c.n_embd) + ", context " +
         n(c.n_positions) + " (training on " + n(seq_len) + "), vocabulary " + n(c.vocab_size) + " (" + n(c.vocab_rows()) +
         " rows)\nlayers: embedding (wte [" + n(c.vocab_rows()) + ", " + n(c.n_embd) + "] + wpe [" + n(c.n_positions) + ", " +
         n(c.n_embd) + "]), h.0 .. h." + n(c.n_layer - 1) + " (pre-LayerNorm blocks), head (ln_f, output tied to wte)\nconfig: " +
         c.to_json();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train GPT-2 on token shards (llm.c format, from apps/prepare_text)", "train_gpt2"};
  apps::TrainOptions o;
  o.lr = 6e-4;
  std::string train_glob, val_glob, preset = "tiny", model_json;
  int64_t seq_len = 0;
  app.add_option("--train", train_glob, "training shards, a glob pattern (quote it)");
  app.add_option("--val", val_glob, "validation shards, a glob pattern");
  app.add_option("--preset", preset, "tiny, 124M, 355M, 774M, 1.5B or 8.3B")->capture_default_str();
  app.add_option("--model", model_json, "JSON overrides of the preset, e.g. '{\"n_layer\": 2, \"embd_pdrop\": 0}'");
  app.add_option("--seq-len", seq_len, "tokens per example (0: the context, n_positions)")->capture_default_str();
  apps::add_train_options(app, o);
  if (int rc = apps::parse(app, argc, argv); rc >= 0) return rc;

  try {
    apps::check_train_options(o);
    GPT2Config config = GPT2Config::preset(preset, model_json);
    if (seq_len == 0) seq_len = config.n_positions;
    TRIDENT_CHECK(seq_len > 0 && seq_len <= config.n_positions, "--seq-len ", seq_len, " must be in [1, n_positions = ",
                  config.n_positions, "]");
    TRIDENT_CHECK(!o.sequence_parallel || seq_len % o.tp == 0, "--sequence-parallel: --seq-len ", seq_len,
                  " does not divide by --tp ", o.tp);
    if (o.dry_run) {
      apps::print_dry_run(describe(config, seq_len), config.num_parameters(),
                          config.estimate_memory(o.batch, seq_len, apps::memory_options(o.precision, o.device)));
      return 0;
    }
    TRIDENT_CHECK(!train_glob.empty(), "--train is required (token shards, e.g. 'data/brown_train_*.bin')");
    auto train = std::make_shared<data::LmDataset>(data::glob_files(train_glob), seq_len);
    std::shared_ptr<data::LmDataset> val;
    if (!val_glob.empty()) val = std::make_shared<data::LmDataset>(data::glob_files(val_glob), seq_len);
    TRIDENT_CHECK(train->size() > 0, "the training shards '", train_glob, "' hold ", train->num_tokens(),
                  " tokens: not one window of --seq-len ", seq_len, " + 1");

    const parallel::Mesh mesh = apps::make_mesh(o);  // NOTE [Parallel training apps]
    manual_seed(o.seed);  // dropout
    Generator init(o.seed);
    // --tp: the model's splittable layers come from the mesh's tp group (NOTE [Parallel training apps]).
    const auto tp_layers = apps::tensor_parallel_layers(o, mesh);
    if (tp_layers) config.layers = tp_layers;
    // Under --pp each rank builds its stage only (NOTE [Stage-only build]), cut by each layer's
    // parameters (this rank's shards under --tp: the cut the Pipeline would make of the built
    // model) or, with --pp-balance compute, by its model FLOPs per token (NOTE [Pipeline balance
    // in the apps]; the serial model's: under --tp every layer's work divides alike).
    const apps::StageCut cut = apps::cut_for_stage(o, mesh, [&] {
      std::vector<double> costs;
      if (o.pp_balance == "compute") {
        const double C = static_cast<double>(config.n_embd);
        const double block = 6 * (12 * C * C + 13 * C) + 12 * static_cast<double>(seq_len) * C;
        costs.push_back(0.0);  // the embedding: lookups
        costs.insert(costs.end(), static_cast<size_t>(config.n_layer), block);
        costs.push_back(6 * (static_cast<double>(config.vocab_rows()) * C + 2 * C));  // ln_f, the tied output layer
      } else {
        for (const int64_t n : models::gpt2_layer_parameters(config)) costs.push_back(static_cast<double>(n));
      }
      return costs;
    });
    std::optional<GPT2LMHeadModel> built;
    GPT2LMHeadModel& model = apps::build_model(o, [&]() -> GPT2LMHeadModel& { return built.emplace(config, &init, cut.keep); });
    apps::say("GPT-2 %s: %lld parameters, %lld training windows of %lld tokens (%lld tokens)\n", preset.c_str(),
                static_cast<long long>(model.num_parameters()), static_cast<long long>(train->size()),
                static_cast<long long>(seq_len), static_cast<long long>(train->num_tokens()));

    apps::TrainTask task;
    task.app = "train_gpt2";
    task.model_name = "gpt2";
    task.config_json = config.to_json();
    task.model = &model;
    task.mesh = &mesh;
    task.pp_balance = cut.balance;
    task.split_dropout = tp_layers ? tp_layers->split_generator() : nullptr;
    task.train = train;
    task.val = val;
    task.to_batch = [](const data::Example& ex) { return Batch{{"input_ids", ex.at(0)}, {"targets", ex.at(1)}}; };
    task.tokens = [](const Batch& b) { return b.at("input_ids").numel(); };
    // NOTE [MFU]: every position of the windows goes through every parameter but wpe's (the
    // output layer included), plus attention over the window's length. GPU runs only (the only
    // ones with an MFU; the model is whole there: no --tp or --pp).
    if (o.device != "cpu")
      task.flops = [fm = apps::gpt2_flop_model(model)](const Batch& b, const std::vector<double>&) {
        const Tensor& ids = b.at("input_ids");
        return apps::training_flops(fm, ids.size(0), ids.size(1), 0);
      };
    task.eval = [&model](const Activations& out, const Batch& b) {
      const double n = model.loss_counts(b).at(0);
      return std::map<std::string, std::pair<double, double>>{{"val_loss", {model.loss(out, b).item<double>() * n, n}}};
    };
    task.perplexity_of = {{"val_ppl", "val_loss"}};
    return apps::train(o, task);
  } catch (const Error& e) {
    std::fprintf(stderr, "train_gpt2: %s\n", e.message().c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt2: %s\n", e.what());
    return 2;
  }
}
