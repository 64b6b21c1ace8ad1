#include "nn/training_checkpoint.h"

#include "autograd/grad_mode.h"
#include "nn/checkpoint.h"
#include "nn/state_dict.h"

namespace trident::nn {
namespace {

std::vector<std::pair<std::string, Generator*>> all_generators(const TrainingCheckpointParts& parts) {
  std::vector<std::pair<std::string, Generator*>> gens{{"default", &default_generator()}};
  for (const auto& [name, g] : parts.generators) {
    TRIDENT_CHECK(g != nullptr, "training checkpoint: generator '", name, "' is null");
    TRIDENT_CHECK(name != "default", "training checkpoint: the name 'default' is reserved for the default generator");
    gens.emplace_back(name, g);
  }
  return gens;
}

}  // namespace

void save_training_checkpoint(const std::string& path, const TrainingCheckpointParts& parts,
                              const TrainingProgress& progress) {
  TRIDENT_CHECK(parts.model != nullptr || parts.model_stream != nullptr, "save_training_checkpoint ", path, ": no model given");
  TRIDENT_CHECK(!(parts.optimizer && parts.optimizer_state), "save_training_checkpoint ", path,
                ": give the optimizer or its state, not both");
  TRIDENT_CHECK(!parts.optimizer_stream || (parts.optimizer_state && parts.optimizer_state->tensors.empty()),
                "save_training_checkpoint ", path, ": an optimizer stream goes with an optimizer state without tensors");
  CheckpointWriter w(path);
  const StringMap model_metadata{{"format", "trident"}};
  if (parts.model_stream) {
    w.write_tensor_stream("model", *parts.model_stream, model_metadata);
  } else {
    const std::map<std::string, Tensor> model_state = parts.model->state_dict();
    w.write_tensors("model", StateDict(model_state.begin(), model_state.end()), model_metadata);
  }
  nlohmann::json trainer;
  trainer["step"] = progress.step;
  if (parts.optimizer || parts.optimizer_state) {
    // A live optimizer's state aliases its buffers: written right away.
    const optim::OptimizerState st = parts.optimizer ? parts.optimizer->state_dict() : *parts.optimizer_state;
    const StringMap metadata{{"optimizer_state", st.to_json()}};
    if (parts.optimizer_stream)
      w.write_tensor_stream("optimizer", *parts.optimizer_stream, metadata);
    else
      w.write_tensors("optimizer", StateDict(st.tensors.begin(), st.tensors.end()), metadata);
    trainer["optimizer"] = st.optimizer;
  }
  if (parts.scaler) trainer["grad_scaler"] = parts.scaler->state_dict();
  nlohmann::json gens = nlohmann::json::object();
  for (const auto& [name, g] : all_generators(parts)) {
    const PhiloxState s = g->state();
    gens[name] = {{"seed", s.seed}, {"offset", s.offset}};
  }
  trainer["generators"] = gens;
  trainer["data_position"] = progress.data_position;
  trainer["extra"] = progress.extra;
  w.write_json("trainer", trainer);
  w.commit();
}

TrainingProgress load_training_checkpoint(const std::string& path, const TrainingCheckpointParts& parts) {
  TRIDENT_CHECK(parts.model != nullptr, "load_training_checkpoint ", path, ": no model given");
  const bool partial = parts.load_only != nullptr || parts.load_optimizer != nullptr;
  // Verifies the manifest and every checksum; a partial load maps the files rather than read them.
  const Checkpoint ck = read_checkpoint(path, partial ? LoadMode::Mmap : LoadMode::Copy);
  auto part_tensors = [&](const std::string& part) -> const SafetensorsFile& {
    auto it = ck.tensors.find(part);
    TRIDENT_CHECK(it != ck.tensors.end(), "checkpoint ", path, " has no '", part, "' part");
    return it->second;
  };
  auto it = ck.documents.find("trainer");
  TRIDENT_CHECK(it != ck.documents.end(), "checkpoint ", path, " has no 'trainer' part (trainer.json)");
  const nlohmann::json& trainer = it->second;

  TrainingProgress progress;
  try {
    // Read and check every part first; change things only when all of them are usable.
    const SafetensorsFile& model_file = part_tensors("model");
    const std::map<std::string, Tensor> mine = parts.model->state_dict();
    const StateDict target(mine.begin(), mine.end());
    bool model_matches = model_file.tensors.size() == target.size();
    for (const auto& [name, t] : target) {
      auto src = model_file.tensors.find(name);
      model_matches = model_matches && src != model_file.tensors.end() && src->second.sizes() == t.sizes() &&
                      src->second.dtype() == t.dtype();
    }
    if (!model_matches) load_into(target, model_file.tensors, /*strict=*/true);  // throws, naming every difference
    // A partial load: the entries to read (every entry's name, shape and dtype was checked above).
    StateDict load_to, load_from;
    if (parts.load_only != nullptr)
      for (const std::string& name : *parts.load_only) {
        const auto t = target.find(name);
        TRIDENT_CHECK(t != target.end(), "load_only names '", name, "', which the model does not have");
        load_to.emplace(name, t->second);
        load_from.emplace(name, model_file.tensors.at(name));
      }

    std::map<std::string, double> scaler_state;
    if (parts.scaler) {
      TRIDENT_CHECK(trainer.contains("grad_scaler"), "trainer.json has no grad_scaler state");
      scaler_state = trainer.at("grad_scaler").get<std::map<std::string, double>>();
      GradScaler probe;
      probe.load_state_dict(scaler_state);  // validates
    }
    std::vector<PhiloxState> gen_states;
    const nlohmann::json& gens = trainer.at("generators");
    for (const auto& [name, g] : all_generators(parts)) {
      TRIDENT_CHECK(gens.contains(name), "trainer.json has no state for generator '", name, "'");
      gen_states.push_back({gens.at(name).at("seed").get<uint64_t>(), gens.at(name).at("offset").get<uint64_t>()});
    }
    progress.step = trainer.at("step").get<int64_t>();
    progress.data_position = trainer.value("data_position", nlohmann::json());
    progress.extra = trainer.value("extra", nlohmann::json());

    if (parts.optimizer || parts.load_optimizer) {  // all or nothing: validates before it changes anything
      const SafetensorsFile& f = part_tensors("optimizer");
      auto m = f.metadata.find("optimizer_state");
      TRIDENT_CHECK(m != f.metadata.end(), "the optimizer part has no 'optimizer_state' metadata");
      std::map<std::string, Tensor> tensors(f.tensors.begin(), f.tensors.end());
      const optim::OptimizerState state = optim::OptimizerState::from_json(m->second, std::move(tensors));
      if (parts.load_optimizer)
        parts.load_optimizer(state);
      else
        parts.optimizer->load_state_dict(state);
    }
    {
      NoGradGuard no_grad;
      if (parts.load_only == nullptr)
        load_into(target, model_file.tensors, /*strict=*/true);
      else
        load_into(load_to, load_from, /*strict=*/true);
    }
    if (parts.scaler) parts.scaler->load_state_dict(scaler_state);
    const auto all = all_generators(parts);
    for (size_t i = 0; i < all.size(); ++i) all[i].second->set_state(gen_states[i]);
  } catch (const Error& e) {
    TRIDENT_FAIL("cannot resume from checkpoint ", path, ": ", e.message());
  } catch (const nlohmann::json::exception& e) {
    TRIDENT_FAIL("cannot resume from checkpoint ", path, ": trainer.json is malformed: ", e.what());
  }
  return progress;
}

}  // namespace trident::nn
