// The safetensors writer (the reader is nn/safetensors.cpp).
#include <algorithm>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "nn/safetensors.h"

namespace trident::nn {

namespace {

using ordered_json = nlohmann::ordered_json;

// The reference writer orders tensors by its dtype enum, descending (U64 I64 F64 F32 U32 I32
// BF16 F16 ... U8 BOOL: widest alignment first), then by name, so that with the header padded to
// 8 bytes every tensor starts aligned to its element size. Same order, same bytes.
int reference_rank(DType d) {
  switch (d) {
    case DType::I64: return 7;
    case DType::F64: return 6;
    case DType::F32: return 5;
    case DType::I32: return 4;
    case DType::BF16: return 3;
    case DType::F16: return 2;
    case DType::U8: return 1;
    case DType::Bool: return 0;
  }
  return -1;
}

void check_utf8(const std::string& s, const char* what) {
  try {
    (void)ordered_json(s).dump();
  } catch (const nlohmann::json::exception& e) {
    TRIDENT_FAIL("save_safetensors: ", what, " is not valid UTF-8: ", e.what());
  }
}

// The padded header text; `order`: the specs in the order their bytes follow it.
std::string plan(const std::vector<TensorSpec>& specs, const StringMap& metadata, const std::vector<size_t>& order) {
  std::set<std::string_view> names;
  for (const TensorSpec& spec : specs) {
    TRIDENT_CHECK(spec.name != "__metadata__", "save_safetensors: \"__metadata__\" is reserved for the metadata and cannot name a tensor");
    TRIDENT_CHECK(names.insert(spec.name).second, "save_safetensors: two tensors are named '", spec.name, "'");
    check_utf8(spec.name, "a tensor name");
  }
  ordered_json root = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json md = ordered_json::object();
    for (const auto& [k, v] : metadata) {
      check_utf8(k, "a metadata key");
      check_utf8(v, "a metadata value");
      md[k] = v;
    }
    root["__metadata__"] = std::move(md);
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const TensorSpec& spec = specs[i];
    uint64_t numel = 1;
    for (int64_t d : spec.shape) {
      TRIDENT_CHECK(d >= 0, "save_safetensors: tensor '", spec.name, "' has a negative dimension in ", spec.shape);
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t n = numel * itemsize(spec.dtype);
    ordered_json entry = ordered_json::object();
    entry["dtype"] = safetensors_dtype_name(spec.dtype);
    entry["shape"] = spec.shape;
    entry["data_offsets"] = {offset, offset + n};
    root[spec.name] = std::move(entry);
    offset += n;
  }
  std::string header = root.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

template <typename Sink>
void emit(const TensorStream& tensors, const StringMap& metadata, Sink&& sink) {
  const std::vector<size_t> order = safetensors_order(tensors.specs);
  const std::string header = plan(tensors.specs, metadata, order);
  uint8_t prefix[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(n >> (8 * i));
  sink(prefix, 8);
  sink(header.data(), header.size());
  for (size_t i : order) {
    const TensorSpec& spec = tensors.specs[i];
    // One tensor at a time on the CPU and contiguous, so a large model on the GPU never needs a
    // second full copy in host memory.
    Tensor t = tensors.produce(i);
    TRIDENT_CHECK(t.defined(), "save_safetensors: tensor '", spec.name, "' is undefined");
    TRIDENT_CHECK(t.dtype() == spec.dtype && t.sizes() == spec.shape, "save_safetensors: tensor '", spec.name,
                  "' was announced as ", safetensors_dtype_name(spec.dtype), " ", spec.shape, " but is ",
                  safetensors_dtype_name(t.dtype()), " ", t.sizes());
    t = t.detach();
    if (!t.device().is_cpu()) t = t.to(Device::cpu());
    t = t.contiguous();
    if (t.numel() > 0) sink(t.data_ptr(), t.nbytes());
  }
}

// A state dict as a stream of its own tensors.
TensorStream stream_of(const StateDict& tensors) {
  TensorStream s;
  std::vector<const Tensor*> at;
  for (const auto& [name, t] : tensors) {
    TRIDENT_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    s.specs.push_back({name, t.dtype(), t.sizes()});
    at.push_back(&t);
  }
  s.produce = [at = std::move(at)](size_t i) { return *at[i]; };
  return s;
}

}  // namespace

std::vector<size_t> safetensors_order(const std::vector<TensorSpec>& specs) {
  std::vector<size_t> order(specs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int ra = reference_rank(specs[a].dtype), rb = reference_rank(specs[b].dtype);
    return ra != rb ? ra > rb : specs[a].name < specs[b].name;
  });
  return order;
}

std::vector<uint8_t> serialize_safetensors(const StateDict& tensors, const StringMap& metadata) {
  std::vector<uint8_t> out;
  emit(stream_of(tensors), metadata, [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

FileDigest save_safetensors(const std::string& path, const StateDict& tensors, const StringMap& metadata) {
  return save_safetensors_streamed(path, stream_of(tensors), metadata);
}

FileDigest save_safetensors_streamed(const std::string& path, const TensorStream& tensors, const StringMap& metadata) {
  TRIDENT_CHECK(tensors.specs.empty() || tensors.produce, "save_safetensors ", path, ": a stream of ",
                tensors.specs.size(), " tensors has no producer");
  return write_file_atomically(path, [&](OutputFile& f) {
    emit(tensors, metadata, [&](const void* p, size_t n) { f.write(p, n); });
  });
}

}  // namespace trident::nn
