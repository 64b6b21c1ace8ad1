// The safetensors reader: header validation (NOTE [safetensors validation] in safetensors.h) and
// the two ways of making tensors from a file. Kept free of any op (only core Storage and
// make_tensor), so that the fuzz test can compile it with sanitizers without the library.
#include <algorithm>
#include <bit>
#include <cstring>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "nn/safetensors.h"

namespace trident::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps here");

namespace {

using json = nlohmann::json;

// The reference implementation refuses headers over 100 MB (its MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Real headers nest three levels deep (root, entry, shape); anything far deeper is hostile.
constexpr int kMaxJsonDepth = 64;

struct KnownDType {
  const char* name;
  bool supported;
  DType dtype;  // meaningful when supported
};
// Every dtype the format defines. The last ones are valid safetensors but have no Trident type.
constexpr KnownDType kKnownDTypes[] = {
    {"F64", true, DType::F64},       {"F32", true, DType::F32},       {"F16", true, DType::F16},
    {"BF16", true, DType::BF16},     {"I64", true, DType::I64},       {"I32", true, DType::I32},
    {"U8", true, DType::U8},         {"BOOL", true, DType::Bool},     {"I8", false, DType::F32},
    {"I16", false, DType::F32},      {"U16", false, DType::F32},      {"U32", false, DType::F32},
    {"U64", false, DType::F32},      {"F8_E5M2", false, DType::F32},  {"F8_E4M3", false, DType::F32},
    {"F8_E8M0", false, DType::F32},  {"F6_E2M3", false, DType::F32},  {"F6_E3M2", false, DType::F32},
    {"F4", false, DType::F32},       {"C64", false, DType::F32},
};

// Names from a hostile file can be huge: messages show at most 200 bytes of them.
std::string quoted(const std::string& s) {
  constexpr size_t kMax = 200;
  std::string out(1, '\'');
  out.append(s, 0, std::min(s.size(), kMax));
  if (s.size() <= kMax) return out.append(1, '\'');
  return out.append("...' (").append(std::to_string(s.size())).append(" bytes)");
}

template <typename... Args>
[[noreturn]] void fail(const std::string& source, const Args&... args) {
  TRIDENT_FAIL("safetensors file '", source, "': ", args...);
}

// A problem found by the JSON parser callback.
struct Rejected {
  std::string why;
};

json parse_json(const char* text, size_t n, const std::string& source) {
  // The callback sees every object's keys (the DOM parser would silently keep the last of two
  // equal keys) and every nesting level.
  std::vector<std::set<std::string>> keys;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) throw Rejected{detail::str("header JSON nests deeper than ", kMaxJsonDepth, " levels")};
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!keys.empty() && !keys.back().insert(k).second)
          throw Rejected{keys.size() == 1 ? "duplicate tensor name " + quoted(k) + " in the header"
                                          : "duplicate key " + quoted(k) + " in the header"};
        break;
      }
      default:
        break;
    }
    return true;
  };
  // nlohmann's lexer takes a NUL byte for the end of the input, so "{} \0<anything>" would
  // parse; a NUL is never valid in JSON text (not even inside a string), so refuse it here.
  if (const void* nul = std::memchr(text, 0, n))
    fail(source, "the header is not valid JSON: a NUL byte at header offset ", static_cast<const char*>(nul) - text);
  try {
    return json::parse(text, text + n, callback);
  } catch (const Rejected& r) {
    fail(source, r.why);
  } catch (const json::exception& e) {
    fail(source, "the header is not valid JSON: ", e.what());
  }
}

// A JSON number that must be a non-negative integer.
uint64_t as_u64(const json& v, const std::string& source, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x >= 0) return static_cast<uint64_t>(x);
    fail(source, what, " is ", x, ", must be a non-negative integer");
  }
  if (v.is_number_float()) fail(source, what, " is ", v.dump(), ", must be an integer (at most 2^64-1)");
  fail(source, what, " must be a non-negative integer, got a JSON ", v.type_name());
}

const json& field(const json& entry, const char* key, const std::string& name, const std::string& source) {
  const auto it = entry.find(key);
  if (it == entry.end()) fail(source, "tensor ", quoted(name), " has no \"", key, "\"");
  return *it;
}

SafetensorsEntry parse_entry(const std::string& name, const json& entry, uint64_t data_size, const std::string& source) {
  if (!entry.is_object()) fail(source, "the entry of tensor ", quoted(name), " must be an object, got a JSON ", entry.type_name());
  SafetensorsEntry e;
  e.name = name;

  const json& dt = field(entry, "dtype", name, source);
  if (!dt.is_string()) fail(source, "tensor ", quoted(name), ": \"dtype\" must be a string, got a JSON ", dt.type_name());
  const std::string& dts = dt.get_ref<const std::string&>();
  const KnownDType* known = nullptr;
  for (const KnownDType& k : kKnownDTypes)
    if (dts == k.name) known = &k;
  if (known == nullptr) fail(source, "tensor ", quoted(name), " has unknown dtype ", quoted(dts));
  if (!known->supported)
    fail(source, "tensor ", quoted(name), " has dtype ", dts,
         ", which Trident does not support (it reads F64 F32 F16 BF16 I64 I32 U8 BOOL)");
  e.dtype = known->dtype;

  const json& shape = field(entry, "shape", name, source);
  if (!shape.is_array()) fail(source, "tensor ", quoted(name), ": \"shape\" must be an array, got a JSON ", shape.type_name());
  for (size_t i = 0; i < shape.size(); ++i) {
    const uint64_t d = as_u64(shape[i], source, detail::str("tensor ", quoted(name), ": shape[", i, "]"));
    if (d > static_cast<uint64_t>(INT64_MAX)) fail(source, "tensor ", quoted(name), ": shape[", i, "] = ", d, " is above 2^63-1");
    e.shape.push_back(static_cast<int64_t>(d));
  }
  // The product of the dims, zeros counted as ones, must fit an int64: Trident's contiguous
  // strides are those products, even for an empty tensor. (The reference implementation lets
  // [0, 2^40, 2^40] through; Trident cannot describe its strides, so it refuses it.) The byte
  // count must fit 64 bits.
  uint64_t span = 1;
  bool overflow = false;
  for (const int64_t d : e.shape) overflow = overflow || __builtin_mul_overflow(span, static_cast<uint64_t>(std::max<int64_t>(d, 1)), &span);
  const bool empty = std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end();
  const uint64_t numel = empty ? 0 : span;
  uint64_t nbytes = 0;
  if (overflow || span > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, uint64_t(itemsize(e.dtype)), &nbytes))
    fail(source, "tensor ", quoted(name), ": shape ", e.shape, " of ", dts, " overflows a 64-bit element or byte count");

  const json& off = field(entry, "data_offsets", name, source);
  if (!off.is_array() || off.size() != 2)
    fail(source, "tensor ", quoted(name), ": \"data_offsets\" must be an array [begin, end], got ", off.dump());
  e.begin = as_u64(off[0], source, detail::str("tensor ", quoted(name), ": data_offsets[0]"));
  e.end = as_u64(off[1], source, detail::str("tensor ", quoted(name), ": data_offsets[1]"));
  if (e.end < e.begin) fail(source, "tensor ", quoted(name), ": data_offsets [", e.begin, ", ", e.end, "] are reversed");
  if (e.end > data_size)
    fail(source, "tensor ", quoted(name), ": data_offsets [", e.begin, ", ", e.end, "] run past the end of the ", data_size,
         "-byte data buffer");
  if (e.end - e.begin != nbytes)
    fail(source, "tensor ", quoted(name), " (", dts, ", shape ", e.shape, ") needs ", nbytes, " bytes but data_offsets [",
         e.begin, ", ", e.end, "] span ", e.end - e.begin);
  return e;
}

// Checks the 8-byte length prefix against the file size; returns the header length.
uint64_t header_length(const uint8_t* prefix, uint64_t file_size, const std::string& source) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > kMaxHeaderBytes)
    fail(source, "header length ", n, " exceeds the ", kMaxHeaderBytes, "-byte limit (corrupt, or not a safetensors file)");
  if (n > file_size - 8)
    fail(source, "header length ", n, " runs past the end of the file (", file_size, " bytes, so at most ", file_size - 8,
         " bytes of header)");
  return n;
}

void check_file_size(uint64_t file_size, const std::string& source) {
  if (file_size < 8) fail(source, "the file is ", file_size, " bytes long, shorter than the 8-byte header length");
}

SafetensorsHeader parse_header(const char* text, uint64_t n, uint64_t file_size, const std::string& source) {
  SafetensorsHeader h;
  h.data_start = 8 + n;
  h.data_size = file_size - h.data_start;
  const json root = parse_json(text, static_cast<size_t>(n), source);
  if (!root.is_object()) fail(source, "the header must be a JSON object, got a JSON ", root.type_name());
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(source, "\"__metadata__\" must be an object of strings, got a JSON ", value.type_name());
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) fail(source, "\"__metadata__\" value of key ", quoted(k), " must be a string, got a JSON ", v.type_name());
        h.metadata.emplace(k, v.get<std::string>());
      }
      continue;
    }
    h.entries.push_back(parse_entry(name, value, h.data_size, source));
  }
  // Coverage: sorted by offsets, each tensor must start where the previous one ended and the
  // last must end at the end of the buffer (empty tensors sit anywhere on a boundary).
  std::sort(h.entries.begin(), h.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t pos = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : h.entries) {
    if (e.begin > pos)
      fail(source, "bytes [", pos, ", ", e.begin, ") of the data buffer belong to no tensor (a gap before tensor ",
           quoted(e.name), ")");
    if (e.begin < pos)
      fail(source, "tensor ", quoted(e.name), " at data_offsets [", e.begin, ", ", e.end, "] overlaps tensor ",
           quoted(prev->name), " at [", prev->begin, ", ", prev->end, "]");
    if (e.end > e.begin || prev == nullptr || prev->end == prev->begin) prev = &e;
    pos = e.end;
  }
  if (pos != h.data_size)
    fail(source, "the data buffer has ", h.data_size, " bytes but the tensors cover only ", pos, " (",
         h.data_size - pos, " bytes after the last tensor)");
  return h;
}

void check_bools(const uint8_t* p, const SafetensorsEntry& e, const std::string& source) {
  for (uint64_t i = 0; i < e.end - e.begin; ++i)
    if (p[i] > 1)
      fail(source, "tensor ", quoted(e.name), " (BOOL) holds byte ", int(p[i]), " at element ", i,
           "; BOOL elements must be 0 or 1");
}

Tensor owned_tensor(const SafetensorsEntry& e) {
  auto storage = std::make_shared<Storage>(static_cast<size_t>(e.end - e.begin), Device::cpu());
  return make_tensor(std::move(storage), e.dtype, e.shape, contiguous_strides(e.shape), 0);
}

// Tensors copied out of a buffer holding the whole file.
SafetensorsFile tensors_from_buffer(const uint8_t* file, const SafetensorsHeader& h, const std::string& source) {
  SafetensorsFile out;
  out.metadata = h.metadata;
  for (const SafetensorsEntry& e : h.entries) {
    const uint8_t* src = file + h.data_start + e.begin;
    if (e.dtype == DType::Bool) check_bools(src, e, source);
    Tensor t = owned_tensor(e);
    if (e.end > e.begin) std::memcpy(t.data_ptr(), src, static_cast<size_t>(e.end - e.begin));
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const KnownDType& k : kKnownDTypes)
    if (k.supported && k.dtype == dtype) return k.name;
  TRIDENT_FAIL("safetensors: no name for dtype ", dtype);
}

SafetensorsFile parse_safetensors(const void* data, size_t size, const std::string& source) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  check_file_size(size, source);
  const uint64_t n = header_length(p, size, source);
  const SafetensorsHeader h = parse_header(reinterpret_cast<const char*>(p + 8), n, size, source);
  return tensors_from_buffer(p, h, source);
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  InputFile f(path);
  check_file_size(f.size(), path);
  uint8_t prefix[8];
  f.read_at(0, prefix, 8);
  const uint64_t n = header_length(prefix, f.size(), path);
  std::string text(static_cast<size_t>(n), '\0');
  f.read_at(8, text.data(), text.size());
  return parse_header(text.data(), n, f.size(), path);
}

SafetensorsFile load_safetensors(const std::string& path, LoadMode mode) {
  if (mode == LoadMode::Copy) {
    InputFile f(path);
    check_file_size(f.size(), path);
    uint8_t prefix[8];
    f.read_at(0, prefix, 8);
    const uint64_t n = header_length(prefix, f.size(), path);
    std::string text(static_cast<size_t>(n), '\0');
    f.read_at(8, text.data(), text.size());
    const SafetensorsHeader h = parse_header(text.data(), n, f.size(), path);
    SafetensorsFile out;
    out.metadata = h.metadata;
    for (const SafetensorsEntry& e : h.entries) {
      Tensor t = owned_tensor(e);
      if (e.end > e.begin) {
        f.read_at(h.data_start + e.begin, t.data_ptr(), static_cast<size_t>(e.end - e.begin));
        if (e.dtype == DType::Bool) check_bools(static_cast<const uint8_t*>(t.data_ptr()), e, path);
      }
      out.tensors.emplace(e.name, std::move(t));
    }
    return out;
  }

  std::shared_ptr<MappedFile> m = MappedFile::open(path);
  check_file_size(m->size(), path);
  const uint64_t n = header_length(m->data(), m->size(), path);
  const SafetensorsHeader h = parse_header(reinterpret_cast<const char*>(m->data() + 8), n, m->size(), path);
  SafetensorsFile out;
  out.metadata = h.metadata;
  for (const SafetensorsEntry& e : h.entries) {
    uint8_t* p = m->mutable_data() + h.data_start + e.begin;
    const size_t nbytes = static_cast<size_t>(e.end - e.begin);
    if (e.dtype == DType::Bool) check_bools(p, e, path);
    Tensor t;
    if (nbytes == 0 || reinterpret_cast<uintptr_t>(p) % itemsize(e.dtype) != 0) {
      // Empty, or misaligned for its element type (typed loads would be undefined behaviour):
      // a copy of its own.
      t = owned_tensor(e);
      if (nbytes > 0) std::memcpy(t.data_ptr(), p, nbytes);
    } else {
      // The view's storage holds the mapping: it is unmapped when the last such tensor goes.
      auto storage = std::make_shared<Storage>(p, nbytes, Device::cpu(), [mapping = m](void*) mutable { mapping.reset(); });
      t = make_tensor(std::move(storage), e.dtype, e.shape, contiguous_strides(e.shape), 0);
    }
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace trident::nn
