// train_bert: BERT pre-training (masked LM + next sentence) on example shards from
// apps/prepare_bert.
//
//   train_bert --train "$HOME/.cache/trident/brown/bert128/bert_train_*.bin"
//              --val "$HOME/.cache/trident/brown/bert128/bert_val_*.bin" --preset tiny --steps 300
//
// The loop, options, checkpoints and metrics are apps/train_common.h's (NOTE [Training apps]).
#include <cstdio>
#include <optional>

#include "apps/mfu.h"
#include "apps/train_common.h"
#include "parallel/tensor_parallel/tp_layers.h"
#include "data/bert_examples.h"
#include "data/token_shard.h"
#include "models/bert.h"
#include "ops/reduce.h"

using namespace trident;
using namespace trident::models;

int main(int argc, char** argv) {
  CLI::App app{"Pre-train BERT (masked LM + next sentence) on example shards from apps/prepare_bert", "train_bert"};
  apps::TrainOptions o;
  o.lr = 1e-3;
  o.weight_decay = 0.01;
  std::string train_glob, val_glob, preset = "tiny", model_json;
  bool remask = false;
  app.add_option("--train", train_glob, "training shards, a glob pattern (quote it)");
  app.add_option("--val", val_glob, "validation shards, a glob pattern");
  app.add_option("--preset", preset, "tiny, base or large")->capture_default_str();
  app.add_option("--model", model_json, "JSON overrides of the preset, e.g. '{\"num_hidden_layers\": 4}'");
  app.add_flag("--remask", remask, "mask the training examples afresh each epoch (dynamic masking)");
  apps::add_train_options(app, o);
  if (int rc = apps::parse(app, argc, argv); rc >= 0) return rc;

  try {
    apps::check_train_options(o);
    BertConfig config = BertConfig::preset(preset, model_json);
    std::shared_ptr<data::BertExampleDataset> train, val;
    int64_t seq_len = 128;
    if (!train_glob.empty()) {
      const std::vector<std::string> paths = data::glob_files(train_glob);
      train = std::make_shared<data::BertExampleDataset>(paths, remask);
      const data::BertShard first(paths.front());
      seq_len = first.max_seq_len();
      // The vocabulary the examples were made with, unless the config names one.
      if (model_json.find("vocab_size") == std::string::npos) config.vocab_size = first.ids().vocab_size;
      TRIDENT_CHECK(first.ids().vocab_size <= config.vocab_size, "the shards were made with a vocabulary of ",
                    first.ids().vocab_size, " tokens, more than the model's vocab_size ", config.vocab_size);
      TRIDENT_CHECK(seq_len <= config.max_position_embeddings, "the shards hold sequences of ", seq_len,
                    " tokens, more than max_position_embeddings ", config.max_position_embeddings);
    }
    if (!val_glob.empty()) val = std::make_shared<data::BertExampleDataset>(data::glob_files(val_glob));
    TRIDENT_CHECK(!o.sequence_parallel || seq_len % o.tp == 0, "--sequence-parallel: the shards' sequences of ", seq_len,
                  " tokens do not divide by --tp ", o.tp);
    const int64_t predictions = (seq_len * 15 + 99) / 100;
    if (o.dry_run) {
      auto n = [](int64_t v) { return std::to_string(v); };
      apps::print_dry_run("BERT: " + n(config.num_hidden_layers) + " layers, " + n(config.num_attention_heads) +
                              " heads, hidden " + n(config.hidden_size) + ", intermediate " + n(config.intermediate_size) +
                              ", sequences of " + n(seq_len) + "\nlayers: embeddings, layer.0 .. layer." +
                              n(config.num_hidden_layers - 1) + " (post-LayerNorm), heads (pooler, MLM tied to the word "
                              "embeddings, NSP)\nconfig: " + config.to_json(),
                          config.num_parameters(),
                          config.estimate_memory(o.batch, seq_len, predictions, apps::memory_options(o.precision, o.device)));
      return 0;
    }
    TRIDENT_CHECK(train != nullptr, "--train is required (BERT example shards, e.g. 'data/bert_train_*.bin')");

    const parallel::Mesh mesh = apps::make_mesh(o);  // NOTE [Parallel training apps]
    manual_seed(o.seed);
    Generator init(o.seed);
    // --tp: the model's splittable layers come from the mesh's tp group (NOTE [Parallel training apps]).
    const auto tp_layers = apps::tensor_parallel_layers(o, mesh);
    if (tp_layers) config.layers = tp_layers;
    // Under --pp each rank builds its stage only (NOTE [Stage-only build]), cut by each layer's
    // parameters (this rank's shards under --tp) or, with --pp-balance compute, by its model
    // FLOPs per position (NOTE [Pipeline balance in the apps], NOTE [MFU]; the serial model's):
    // the embeddings are lookups; a layer's weights run at every position, plus 12 T H of
    // attention; the pooler and NSP head run once per sequence, the MLM head (transform and tied
    // decoder) at the ~15% predicted positions.
    const apps::StageCut cut = apps::cut_for_stage(o, mesh, [&] {
      std::vector<double> costs;
      if (o.pp_balance == "compute") {
        const double H = static_cast<double>(config.hidden_size), I = static_cast<double>(config.intermediate_size);
        const double T = static_cast<double>(seq_len), P = static_cast<double>(predictions);
        const double layer = 6 * (4 * H * H + 4 * H + 2 * H * I + I + H + 4 * H) + 12 * T * H;
        const double heads = 6 * ((H * H + H + 2 * H + 2) / T +
                                  (H * H + 3 * H + static_cast<double>(config.vocab_rows()) * (H + 1)) * P / T);
        costs.push_back(0.0);
        costs.insert(costs.end(), static_cast<size_t>(config.num_hidden_layers), layer);
        costs.push_back(heads);
      } else {
        for (const int64_t n : models::bert_layer_parameters(config)) costs.push_back(static_cast<double>(n));
      }
      return costs;
    });
    std::optional<BertForPreTraining> built;
    BertForPreTraining& model = apps::build_model(o, [&]() -> BertForPreTraining& { return built.emplace(config, &init, cut.keep); });
    apps::say("BERT %s: %lld parameters, %lld training examples of up to %lld tokens\n", preset.c_str(),
                static_cast<long long>(model.num_parameters()), static_cast<long long>(train->size()),
                static_cast<long long>(seq_len));

    apps::TrainTask task;
    task.app = "train_bert";
    task.model_name = "bert";
    task.config_json = config.to_json();
    task.model = &model;
    task.mesh = &mesh;
    task.pp_balance = cut.balance;
    task.split_dropout = tp_layers ? tp_layers->split_generator() : nullptr;
    task.train = train;
    task.val = val;
    task.to_batch = [](const data::Example& ex) {
      return Batch{{"input_ids", ex.at(0)},
                   {"token_type_ids", ex.at(1)},
                   {"attention_mask", ex.at(2)},
                   {"mlm_labels", ex.at(3)},
                   {"next_sentence_label", ex.at(4)}};
    };
    task.tokens = [](const Batch& b) { return static_cast<int64_t>(b.at("attention_mask").to_vector<int64_t>().size()); };
    // NOTE [MFU]: the encoder over every position of the sequences (padding included, as tokens/s
    // counts them), the pooler and NSP head once per sequence, the MLM head (its tied decoder
    // included) at the masked positions only, as BertForPreTraining runs them. GPU runs only (the
    // only ones with an MFU; the model is whole there: no --tp or --pp).
    if (o.device != "cpu")
      task.flops = [fm = apps::bert_flop_model(model)](const Batch& b, const std::vector<double>& counts) {
        const Tensor& ids = b.at("input_ids");
        const auto masked = static_cast<int64_t>(counts.at(0));  // loss_counts: masked tokens first
        return apps::training_flops(fm, ids.size(0), ids.size(1), masked);
      };
    task.eval = [&model](const Activations& out, const Batch& b) {
      const std::vector<double> n = model.loss_counts(b);
      const auto [mlm, nsp] = model.loss_terms(out, b);
      const std::vector<int64_t> pred = argmax(out[1], 1).to_vector<int64_t>();
      const std::vector<int64_t> truth = b.at("next_sentence_label").to_vector<int64_t>();
      double correct = 0;
      for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == truth[i] ? 1.0 : 0.0;
      return std::map<std::string, std::pair<double, double>>{
          {"val_mlm_loss", {mlm.item<double>() * n[0], n[0]}},
          {"val_nsp_loss", {nsp.item<double>() * n[1], n[1]}},
          {"val_nsp_acc", {correct, static_cast<double>(pred.size())}}};
    };
    task.perplexity_of = {{"val_mlm_ppl", "val_mlm_loss"}};
    return apps::train(o, task);
  } catch (const Error& e) {
    std::fprintf(stderr, "train_bert: %s\n", e.message().c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_bert: %s\n", e.what());
    return 2;
  }
}
