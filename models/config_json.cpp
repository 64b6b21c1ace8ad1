#include "models/config_json.h"

#include <vector>

namespace trident::models {

nlohmann::json parse_config_object(const char* what, std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    TRIDENT_FAIL(what, ": malformed JSON at byte ", e.byte, ": ", e.what());
  }
  TRIDENT_CHECK(j.is_object(), what, ": expected a JSON object, got ", j.type_name());
  return j;
}

void check_probability(const char* what, const char* key, double p) {
  TRIDENT_CHECK(p >= 0 && p < 1, what, ": ", key, " must be in [0, 1), got ", p);
}

void JsonReader::operator()(const char* key, int64_t& v) {
  seen.insert(key);
  if (!j.contains(key)) return;
  const nlohmann::json& x = j[key];
  TRIDENT_CHECK(x.is_number_integer(), what, ": \"", key, "\" must be an integer, got ", x.dump());
  v = x.get<int64_t>();
}

void JsonReader::operator()(const char* key, double& v) {
  seen.insert(key);
  if (!j.contains(key)) return;
  const nlohmann::json& x = j[key];
  TRIDENT_CHECK(x.is_number(), what, ": \"", key, "\" must be a number, got ", x.dump());
  v = x.get<double>();
}

void JsonReader::operator()(const char* key, DType& v) {
  seen.insert(key);
  if (!j.contains(key)) return;
  const nlohmann::json& x = j[key];
  TRIDENT_CHECK(x.is_string(), what, ": \"", key, "\" must be a dtype name such as \"f32\", got ", x.dump());
  try {
    v = dtype_from_string(x.get<std::string>());
  } catch (const Error& e) {
    TRIDENT_FAIL(what, ": \"", key, "\": ", e.message());
  }
}

void JsonReader::check_unknown() const {
  if (!strict) return;
  std::vector<std::string> unknown;
  for (const auto& [key, value] : j.items())
    if (!seen.count(key) && !allowed.count(key)) unknown.push_back(key);
  if (unknown.empty()) return;
  std::vector<std::string> known(seen.begin(), seen.end());
  known.insert(known.end(), allowed.begin(), allowed.end());
  TRIDENT_FAIL(what, ": unknown key", unknown.size() > 1 ? "s " : " ", unknown, " (known: ", known, ")");
}

}  // namespace trident::models
