// Reading and writing model configs as JSON (internal to models/*.cpp: it brings in
// nlohmann/json.hpp, which the public headers stay free of).
#pragma once

#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"

namespace trident::models {

// Parses text that must be one JSON object; errors name `what` and where parsing stopped.
nlohmann::json parse_config_object(const char* what, std::string_view text);

void check_probability(const char* what, const char* key, double p);

// Writes fields into an object: v(key, field).
struct JsonWriter {
  nlohmann::ordered_json& j;
  void operator()(const char* key, const int64_t& v) { j[key] = v; }
  void operator()(const char* key, const double& v) { j[key] = v; }
  void operator()(const char* key, const DType& v) { j[key] = std::string(dtype_name(v)); }
};

// Reads the fields an object names: integers must be integral, numbers numeric, dtypes strings.
// check_unknown() fails on keys no field read (when strict) other than `allowed`.
struct JsonReader {
  const char* what;
  const nlohmann::json& j;
  bool strict;
  std::set<std::string> allowed;
  std::set<std::string> seen = {};

  void operator()(const char* key, int64_t& v);
  void operator()(const char* key, double& v);
  void operator()(const char* key, DType& v);
  void check_unknown() const;
};

}  // namespace trident::models
