// The safetensors writer (the reader is nn/safetensors.cpp).
#include <algorithm>

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

struct Planned {
  const std::string* name;
  const Tensor* tensor;
};

// The padded header text and the order the tensors' bytes follow it in.
std::string plan(const StateDict& tensors, const StringMap& metadata, std::vector<Planned>& order) {
  for (const auto& [name, t] : tensors) {
    TRIDENT_CHECK(name != "__metadata__", "save_safetensors: \"__metadata__\" is reserved for the metadata and cannot name a tensor");
    TRIDENT_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    check_utf8(name, "a tensor name");
    order.push_back({&name, &t});
  }
  std::stable_sort(order.begin(), order.end(), [](const Planned& a, const Planned& b) {
    return reference_rank(a.tensor->dtype()) > reference_rank(b.tensor->dtype());
  });  // names are already sorted (std::map), and the sort is stable

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
  for (const Planned& p : order) {
    const Tensor& t = *p.tensor;
    const uint64_t n = static_cast<uint64_t>(t.numel()) * itemsize(t.dtype());
    ordered_json entry = ordered_json::object();
    entry["dtype"] = safetensors_dtype_name(t.dtype());
    entry["shape"] = t.sizes();
    entry["data_offsets"] = {offset, offset + n};
    root[*p.name] = std::move(entry);
    offset += n;
  }
  std::string header = root.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

template <typename Sink>
void emit(const StateDict& tensors, const StringMap& metadata, Sink&& sink) {
  std::vector<Planned> order;
  const std::string header = plan(tensors, metadata, order);
  uint8_t prefix[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(n >> (8 * i));
  sink(prefix, 8);
  sink(header.data(), header.size());
  for (const Planned& p : order) {
    // One tensor at a time on the CPU and contiguous, so a large model on the GPU never needs a
    // second full copy in host memory.
    Tensor t = p.tensor->detach();
    if (!t.device().is_cpu()) t = t.to(Device::cpu());
    t = t.contiguous();
    if (t.numel() > 0) sink(t.data_ptr(), t.nbytes());
  }
}

}  // namespace

std::vector<uint8_t> serialize_safetensors(const StateDict& tensors, const StringMap& metadata) {
  std::vector<uint8_t> out;
  emit(tensors, metadata, [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

FileDigest save_safetensors(const std::string& path, const StateDict& tensors, const StringMap& metadata) {
  return write_file_atomically(path, [&](OutputFile& f) {
    emit(tensors, metadata, [&](const void* p, size_t n) { f.write(p, n); });
  });
}

}  // namespace trident::nn
