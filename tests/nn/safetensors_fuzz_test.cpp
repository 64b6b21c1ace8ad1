// Fuzzing the safetensors reader: thousands of mutated and random files, each of which must
// either load or throw trident::Error (never crash, never another exception, never read out of
// bounds). The ctest entry nn.safetensors_fuzz_asan runs this same file compiled with
// AddressSanitizer and UBSan together with the reader's sources (tests/CMakeLists.txt), so an
// out-of-bounds read or undefined behaviour fails the test instead of passing unseen.
//
// Loaded files are checked against an oracle independent of the reader: the header is parsed
// again here with nlohmann::json, and every tensor's dtype, shape and bytes must match what its
// entry declares. Each case is reproducible from its seed (printed on failure).
//
// Only nn/safetensors.h is used (no op), so the sanitized build links the reader and the core.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/safetensors.h"

namespace trident::nn {
namespace {

using Bytes = std::string;  // a file's bytes
using Rng = std::mt19937_64;

// Iterations per mutation family; TRIDENT_FUZZ_ITERATIONS overrides (more for a long soak).
int iterations() {
  const char* s = std::getenv("TRIDENT_FUZZ_ITERATIONS");
  return s != nullptr ? std::max(1, std::atoi(s)) : 3000;
}

uint64_t rand_below(Rng& rng, uint64_t n) { return n == 0 ? 0 : rng() % n; }

// ---- a minimal independent writer: header text and data bytes assembled by hand ----------
Bytes assemble(const std::string& header, const Bytes& data) {
  Bytes out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

Bytes pattern_bytes(size_t n, uint8_t seed) {
  Bytes b(n, '\0');
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<char>(seed + 37 * i);
  return b;
}

// The seed corpus: valid files of several shapes.
std::vector<Bytes> corpus() {
  std::vector<Bytes> c;
  c.push_back(assemble("{}      ", ""));
  c.push_back(assemble(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", pattern_bytes(24, 1)));
  {
    // Mixed dtypes, metadata, a 0-dim and an empty tensor, names out of order, no padding.
    const Bytes bools("\x01\x00\x01\x01", 4);
    std::string h = R"({"__metadata__":{"format":"pt","note":"fuzz"},)"
                    R"("z":{"dtype":"F64","shape":[3],"data_offsets":[0,24]},)"
                    R"("a":{"dtype":"F16","shape":[2,2],"data_offsets":[24,32]},)"
                    R"("s":{"dtype":"I64","shape":[],"data_offsets":[32,40]},)"
                    R"("e":{"dtype":"BF16","shape":[0,4],"data_offsets":[40,40]},)"
                    R"("m":{"dtype":"BOOL","shape":[4],"data_offsets":[40,44]},)"
                    R"("u":{"dtype":"U8","shape":[5],"data_offsets":[44,49]},)"
                    R"("i":{"dtype":"I32","shape":[1,1],"data_offsets":[49,53]}})";
    c.push_back(assemble(h, pattern_bytes(40, 7) + bools + pattern_bytes(9, 3)));
  }
  c.push_back(assemble(R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}} )", Bytes("\x00\x01\x00", 3)));
  return c;
}

// ---- the oracle ------------------------------------------------------------------------
int expected_itemsize(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "U8" || dtype == "BOOL") return 1;
  return -1;
}

// A file the reader accepted: check every tensor against its header entry, read by hand.
void check_loaded(const Bytes& file, const SafetensorsFile& got, const std::string& what) {
  ASSERT_GE(file.size(), 8u) << what;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[i]);
  ASSERT_LE(8 + n, file.size()) << what;
  const nlohmann::json h = nlohmann::json::parse(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  ASSERT_TRUE(h.is_object()) << what;
  const uint64_t data_start = 8 + n;
  uint64_t covered = 0;
  size_t entries = 0;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      ASSERT_EQ(got.metadata.size(), e.size()) << what;
      for (const auto& [k, v] : e.items()) EXPECT_EQ(got.metadata.at(k), v.get<std::string>()) << what;
      continue;
    }
    ++entries;
    auto it = got.tensors.find(name);
    ASSERT_NE(it, got.tensors.end()) << what << ": tensor " << name << " missing";
    const Tensor& t = it->second;
    const std::string dtype = e.at("dtype").get<std::string>();
    EXPECT_EQ(dtype, safetensors_dtype_name(t.dtype())) << what;
    Shape shape;
    for (const auto& d : e.at("shape")) shape.push_back(d.get<int64_t>());
    EXPECT_EQ(t.sizes(), shape) << what;
    EXPECT_TRUE(t.is_contiguous()) << what;
    const uint64_t begin = e.at("data_offsets")[0].get<uint64_t>();
    const uint64_t end = e.at("data_offsets")[1].get<uint64_t>();
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(expected_itemsize(dtype));
    ASSERT_EQ(end - begin, nbytes) << what;
    ASSERT_LE(data_start + end, file.size()) << what;
    covered += nbytes;
    if (nbytes > 0) {
      // Touches every byte of the tensor (AddressSanitizer checks the reads).
      EXPECT_EQ(std::memcmp(t.data_ptr(), file.data() + data_start + begin, nbytes), 0) << what << ": bytes of " << name;
    }
    if (dtype == "BOOL") {
      const uint8_t* p = static_cast<const uint8_t*>(t.data_ptr());
      for (uint64_t i = 0; i < nbytes; ++i) ASSERT_LE(p[i], 1) << what;
    }
  }
  EXPECT_EQ(got.tensors.size(), entries) << what;
  EXPECT_EQ(covered, file.size() - data_start) << what << ": the tensors must cover the data buffer";
}

std::string hex(const Bytes& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < std::min<size_t>(b.size(), 512); ++i) {
    s += d[static_cast<uint8_t>(b[i]) >> 4];
    s += d[static_cast<uint8_t>(b[i]) & 15];
  }
  return b.size() > 512 ? s + "..." : s;
}

struct Stats {
  int loaded = 0;
  int rejected = 0;
};

// Runs one case through the in-memory reader and, every 8th case, through both file readers,
// which must agree with it.
void run_case(const Bytes& file, const std::string& what, uint64_t index, Stats& stats) {
  bool ok = false;
  std::string error;
  // An allocation of exactly the file's size, so AddressSanitizer sees any read past its end
  // (a std::string's spare capacity would hide it).
  const std::unique_ptr<char[]> exact(new char[std::max<size_t>(file.size(), 1)]);
  if (!file.empty()) std::memcpy(exact.get(), file.data(), file.size());
  try {
    SafetensorsFile f = parse_safetensors(exact.get(), file.size(), "fuzz-case");
    ok = true;
    check_loaded(file, f, what);
  } catch (const Error& e) {
    error = e.message();
    EXPECT_NE(error.find("fuzz-case"), std::string::npos) << what << ": the message must name the file: " << error;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw a non-trident exception: " << e.what() << "\nbytes: " << hex(file);
    return;
  }
  ok ? ++stats.loaded : ++stats.rejected;
  if (index % 8 != 0) return;

  const std::string path = (std::filesystem::temp_directory_path() /
                            ("trident_fuzz_" + std::to_string(::getpid()) + "_" + std::to_string(index) + ".safetensors"))
                               .string();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
  }
  for (LoadMode mode : {LoadMode::Mmap, LoadMode::Copy}) {
    const char* mode_name = mode == LoadMode::Mmap ? "mmap" : "copy";
    try {
      SafetensorsFile f = load_safetensors(path, mode);
      EXPECT_TRUE(ok) << what << " (" << mode_name << "): loaded from a file but not from memory (" << error << ")";
      if (ok) check_loaded(file, f, what + " (" + mode_name + ")");
    } catch (const Error& e) {
      EXPECT_FALSE(ok) << what << " (" << mode_name << "): rejected from a file but loaded from memory: " << e.message();
      EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << " (" << mode_name << "): threw a non-trident exception: " << e.what();
    }
  }
  std::remove(path.c_str());
}

// Drives one mutation family: case i uses its own generator seeded with i.
void fuzz(const char* family, uint64_t family_seed, const std::function<Bytes(Rng&)>& make) {
  Stats stats;
  const int n = iterations();
  for (int i = 0; i < n && !::testing::Test::HasFatalFailure(); ++i) {
    const uint64_t seed = family_seed * 1000003u + static_cast<uint64_t>(i);
    Rng rng(seed);
    const Bytes file = make(rng);
    run_case(file, std::string(family) + " case " + std::to_string(i) + " (seed " + std::to_string(seed) + ")",
             static_cast<uint64_t>(i), stats);
  }
  // The families are built to reach both outcomes often; a family that never loads (or never
  // fails) would test less than it claims.
  std::printf("[fuzz] %s: %d loaded, %d rejected\n", family, stats.loaded, stats.rejected);
  EXPECT_GT(stats.rejected, 0) << family;
}

const Bytes& pick(Rng& rng, const std::vector<Bytes>& v) { return v[rand_below(rng, v.size())]; }

uint64_t header_len(const Bytes& f) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(f[i]);
  return n;
}

const std::vector<std::string> kSnippets = {
    "-1", "1e400", "18446744073709551616", "9223372036854775807", "18446744073709551615", "0.5", "-0", "1e2",
    "\"F32\"", "\"I16\"", "\"XX\"", "\"BOOL\"", "\"__metadata__\"", "\"dtype\"", "\"shape\"", "\"data_offsets\"",
    "[]", "{}", "null", "true", "[0,0]", "[0]", "[1,2,3]", "\"", "{", "}", "[", "]", ",", ":", "\\u0000",
    "\xff", "\xc3\x28", "\"\\ud800\"", "0", "4294967296", " ", "\"w\"", "\"a\"", std::string(1, '\0'),
};

// ---- mutation families ------------------------------------------------------------------

TEST(SafetensorsFuzz, BitFlips) {
  const auto base = corpus();
  fuzz("bit flips", 1, [&](Rng& rng) {
    Bytes f = pick(rng, base);
    const int flips = 1 + static_cast<int>(rand_below(rng, 8));
    const uint64_t hdr_end = std::min<uint64_t>(f.size(), 8 + header_len(f));
    for (int k = 0; k < flips; ++k) {
      // Mostly in the length and header, where a flip changes meaning.
      const uint64_t pos = rand_below(rng, 4) != 0 ? rand_below(rng, hdr_end) : rand_below(rng, f.size());
      f[pos] = static_cast<char>(f[pos] ^ (1u << rand_below(rng, 8)));
    }
    return f;
  });
}

TEST(SafetensorsFuzz, TruncationsAndExtensions) {
  const auto base = corpus();
  fuzz("truncations and extensions", 2, [&](Rng& rng) {
    Bytes f = pick(rng, base);
    if (rand_below(rng, 2) == 0) {
      f.resize(rand_below(rng, f.size()));
    } else {
      const size_t extra = 1 + rand_below(rng, 64);
      for (size_t i = 0; i < extra; ++i) f.push_back(static_cast<char>(rng()));
    }
    return f;
  });
}

TEST(SafetensorsFuzz, HeaderLengthEdits) {
  const auto base = corpus();
  fuzz("header length edits", 3, [&](Rng& rng) {
    Bytes f = pick(rng, base);
    const uint64_t n = header_len(f);
    const uint64_t choices[] = {0, 1, 2, n - 1, n + 1, f.size() - 8, f.size() - 7, f.size(), ~uint64_t(0),
                                uint64_t(1) << 63, 100'000'000, 100'000'001, rng(), rand_below(rng, 256)};
    const uint64_t v = choices[rand_below(rng, std::size(choices))];
    for (int i = 0; i < 8; ++i) f[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
    return f;
  });
}

TEST(SafetensorsFuzz, HeaderTokenEdits) {
  const auto base = corpus();
  fuzz("header token edits", 4, [&](Rng& rng) {
    Bytes f = pick(rng, base);
    const uint64_t n = header_len(f);
    std::string header = f.substr(8, n);
    const Bytes data = f.substr(8 + n);
    const int edits = 1 + static_cast<int>(rand_below(rng, 3));
    for (int k = 0; k < edits; ++k) {
      const size_t at = rand_below(rng, header.size() + 1);
      const size_t len = std::min<size_t>(rand_below(rng, 6), header.size() - at);
      switch (rand_below(rng, 4)) {
        case 0:  // replace a span by a snippet
          header.replace(at, len, kSnippets[rand_below(rng, kSnippets.size())]);
          break;
        case 1:  // delete a span
          header.erase(at, len);
          break;
        case 2: {  // rewrite one number
          std::vector<size_t> starts;
          for (size_t i = 0; i < header.size(); ++i)
            if (isdigit(static_cast<unsigned char>(header[i])) && (i == 0 || !isdigit(static_cast<unsigned char>(header[i - 1]))))
              starts.push_back(i);
          if (starts.empty()) break;
          const size_t s = starts[rand_below(rng, starts.size())];
          size_t e = s;
          while (e < header.size() && isdigit(static_cast<unsigned char>(header[e]))) ++e;
          const uint64_t values[] = {0, 1, 2, 3, 7, 8, 23, 24, 25, 40, 49, 53, 54, rand_below(rng, 100), ~uint64_t(0),
                                     uint64_t(1) << 62, uint64_t(1) << 32};
          header.replace(s, e - s, std::to_string(values[rand_below(rng, std::size(values))]));
          break;
        }
        default: {  // duplicate a key/value member (duplicate names)
          const size_t q = header.find("\":{", rand_below(rng, header.size() + 1));
          if (q == std::string::npos) break;
          const size_t open = header.rfind('"', q - 1);
          const size_t close = header.find('}', q);
          if (open == std::string::npos || close == std::string::npos) break;
          header.insert(close + 1, "," + header.substr(open, close + 1 - open));
        }
      }
    }
    return assemble(header, data);
  });
}

// A random JSON value: mostly objects whose keys look like the real ones.
nlohmann::json random_json(Rng& rng, int depth) {
  static const char* keys[] = {"dtype", "shape", "data_offsets", "__metadata__", "a", "b", "w", ""};
  static const char* strings[] = {"F32", "F64", "F16", "BF16", "I64", "I32", "U8", "BOOL", "I8", "F8_E4M3", "x", ""};
  const uint64_t kind = depth <= 0 ? rand_below(rng, 5) : rand_below(rng, 8);
  switch (kind) {
    case 0: return nullptr;
    case 1: return rand_below(rng, 2) == 0;
    case 2: return static_cast<int64_t>(rand_below(rng, 64)) - 8;
    case 3: return static_cast<double>(rand_below(rng, 100)) / 4.0;
    case 4: return strings[rand_below(rng, std::size(strings))];
    case 5:
    case 6: {
      nlohmann::json o = nlohmann::json::object();
      const int n = static_cast<int>(rand_below(rng, 5));
      for (int i = 0; i < n; ++i) o[keys[rand_below(rng, std::size(keys))]] = random_json(rng, depth - 1);
      return o;
    }
    default: {
      nlohmann::json a = nlohmann::json::array();
      const int n = static_cast<int>(rand_below(rng, 4));
      for (int i = 0; i < n; ++i) a.push_back(random_json(rng, depth - 1));
      return a;
    }
  }
}

TEST(SafetensorsFuzz, RandomJsonHeaders) {
  fuzz("random JSON headers", 5, [&](Rng& rng) {
    const std::string header = random_json(rng, 4).dump();
    return assemble(header, pattern_bytes(rand_below(rng, 32), static_cast<uint8_t>(rng())));
  });
}

// Headers built from random entries whose offsets are consistent most of the time and nudged
// otherwise: this family loads often, so the success path is fuzzed too.
TEST(SafetensorsFuzz, StructuredHeaders) {
  fuzz("structured headers", 6, [&](Rng& rng) {
    static const char* dtypes[] = {"F64", "F32", "F16", "BF16", "I64", "I32", "U8", "BOOL"};
    const int count = static_cast<int>(rand_below(rng, 5));
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (rand_below(rng, 3) == 0) h["__metadata__"] = {{"k", "v"}};
    uint64_t offset = 0;
    Bytes data;
    for (int i = 0; i < count; ++i) {
      const char* dt = dtypes[rand_below(rng, std::size(dtypes))];
      std::vector<int64_t> shape;
      const int rank = static_cast<int>(rand_below(rng, 4));
      int64_t numel = 1;
      for (int d = 0; d < rank; ++d) {
        shape.push_back(static_cast<int64_t>(rand_below(rng, 4)));
        numel *= shape.back();
      }
      const uint64_t nbytes = static_cast<uint64_t>(numel) * static_cast<uint64_t>(expected_itemsize(dt));
      uint64_t begin = offset, end = offset + nbytes;
      if (rand_below(rng, 6) == 0) begin += rand_below(rng, 3) - 1;  // sometimes off by one
      if (rand_below(rng, 6) == 0) end += rand_below(rng, 3) - 1;
      h["t" + std::to_string(rand_below(rng, 6))] = {{"dtype", dt}, {"shape", shape}, {"data_offsets", {begin, end}}};
      offset += nbytes;
      for (uint64_t b = 0; b < nbytes; ++b)
        data.push_back(std::string(dt) == "BOOL" ? static_cast<char>(rand_below(rng, 9) == 0 ? 2 : rand_below(rng, 2))
                                                 : static_cast<char>(rng()));
    }
    if (rand_below(rng, 8) == 0) data.push_back('x');  // a trailing byte
    std::string header = h.dump();
    header.append(rand_below(rng, 8), ' ');
    return assemble(header, data);
  });
}

TEST(SafetensorsFuzz, DeepNesting) {
  fuzz("deep nesting", 7, [&](Rng& rng) {
    const size_t depth = 1 + rand_below(rng, 5000);
    std::string header;
    const bool objects = rand_below(rng, 2) == 0;
    for (size_t i = 0; i < depth; ++i) header += objects ? "{\"a\":" : "[";
    header += "0";
    const size_t closing = rand_below(rng, 4) == 0 ? rand_below(rng, depth) : depth;  // sometimes unbalanced
    for (size_t i = 0; i < closing; ++i) header += objects ? "}" : "]";
    return assemble(header, "");
  });
}

TEST(SafetensorsFuzz, RandomBytes) {
  fuzz("random bytes", 8, [&](Rng& rng) {
    Bytes f(rand_below(rng, 64), '\0');
    for (char& c : f) c = static_cast<char>(rng());
    // Half of them get a plausible length prefix so the JSON parser sees the bytes.
    if (f.size() >= 8 && rand_below(rng, 2) == 0) {
      const uint64_t n = rand_below(rng, f.size() - 7);
      for (int i = 0; i < 8; ++i) f[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
      if (f.size() > 8) f[8] = '{';
    }
    return f;
  });
}

// The seed corpus itself loads, so the oracle and the families start from valid files.
TEST(SafetensorsFuzz, CorpusLoads) {
  Stats stats;
  const auto base = corpus();
  for (size_t i = 0; i < base.size(); ++i) {
    EXPECT_NO_THROW(parse_safetensors(base[i].data(), base[i].size())) << "corpus file " << i;
    run_case(base[i], "corpus file " + std::to_string(i), 0, stats);
  }
  EXPECT_EQ(stats.loaded, static_cast<int>(base.size()));
}

}  // namespace
}  // namespace trident::nn
