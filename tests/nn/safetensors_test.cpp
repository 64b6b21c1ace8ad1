// safetensors: round trips of every dtype bit for bit, the reference writer's exact bytes, files
// written by hand and by PyTorch, memory-mapped views, and every malformed input's message.
#include <climits>
#include <cmath>

#include "nn/file_io.h"
#include "nn/nn_test_util.h"

namespace trident::nn {
namespace {

using testing::expect_error;
using testing::le_bytes;
using testing::read_bytes;
using testing::safetensors_bytes;
using testing::tensor_bytes;
using testing::tensor_from_bytes;
using testing::write_bytes;

class Safetensors : public testing::ScratchDir {};

// Every dtype, with the bit patterns a careless conversion would change: NaNs with payloads
// (quiet and signalling, both signs), -0, infinities, subnormals, integer extremes.
StateDict every_dtype() {
  StateDict d;
  d["f32"] = tensor_from_bytes(kF32, {2, 4},
                               le_bytes<uint32_t>({0x7FC12345u, 0xFF800001u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                                                   0x00000001u, 0x3F800000u, 0x7F7FFFFFu}));
  d["f64"] = tensor_from_bytes(kF64, {3, 2},
                               le_bytes<uint64_t>({0x7FF8000000000ABCull, 0xFFF0000000000001ull, 0x8000000000000000ull,
                                                   0x0000000000000001ull, 0x3FF0000000000000ull, 0x7FF0000000000000ull}));
  d["f16"] = tensor_from_bytes(kF16, {6}, le_bytes<uint16_t>({0x7E01, 0xFC01, 0x8000, 0x0001, 0x3C00, 0x7C00}));
  d["bf16"] = tensor_from_bytes(kBF16, {2, 3}, le_bytes<uint16_t>({0x7FC1, 0xFF81, 0x8000, 0x0001, 0x3F80, 0x7F80}));
  d["i64"] = tensor_from_bytes(kI64, {4}, le_bytes<int64_t>({INT64_MIN, -1, 0, INT64_MAX}));
  d["i32"] = tensor_from_bytes(kI32, {5}, le_bytes<int32_t>({INT32_MIN, -1, 0, INT32_MAX, 7}));
  d["u8"] = tensor_from_bytes(kU8, {5}, le_bytes<uint8_t>({0, 1, 127, 128, 255}));
  d["bool"] = tensor_from_bytes(kBool, {2, 2}, le_bytes<uint8_t>({1, 0, 0, 1}));
  return d;
}

void expect_same(const StateDict& want, const StateDict& got, const std::string& how) {
  ASSERT_EQ(want.size(), got.size()) << how;
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << how << ": missing " << name;
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.dtype(), w.dtype()) << how << ": " << name;
    EXPECT_EQ(g.sizes(), w.sizes()) << how << ": " << name;
    EXPECT_TRUE(g.is_contiguous()) << how << ": " << name;
    EXPECT_EQ(tensor_bytes(g), tensor_bytes(w)) << how << ": bytes of " << name;
  }
}

TEST_F(Safetensors, RoundTripEveryDtypeBitForBit) {
  const StateDict d = every_dtype();
  const FileDigest digest = save_safetensors(path("all.safetensors"), d, {{"format", "pt"}});
  const std::string bytes = read_bytes(path("all.safetensors"));
  EXPECT_EQ(digest.size, bytes.size());
  EXPECT_EQ(digest.crc32c, crc32c_portable(bytes.data(), bytes.size()));
  for (LoadMode mode : {LoadMode::Mmap, LoadMode::Copy}) {
    SafetensorsFile f = load_safetensors(path("all.safetensors"), mode);
    expect_same(d, f.tensors, mode == LoadMode::Mmap ? "mmap" : "copy");
    EXPECT_EQ(f.metadata, (StringMap{{"format", "pt"}}));
  }
  expect_same(d, parse_safetensors(bytes.data(), bytes.size()).tensors, "memory");
  EXPECT_EQ(serialize_safetensors(d, {{"format", "pt"}}), std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

// NOTE [Streamed safetensors]: specs given in any order, the tensors produced one at a time in
// the writer's order (each called once, the previous one already dropped), strided and of every
// dtype: the bytes of the state-dict writer.
TEST_F(Safetensors, StreamedWriteIsTheStateDictWrite) {
  StateDict d = every_dtype();
  d["strided"] = transpose(randn({4, 6}, kF32), 0, 1);
  d["empty"] = empty({2, 0}, kF16);
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : d) specs.push_back({name, t.dtype(), t.sizes()});
  std::reverse(specs.begin(), specs.end());
  std::swap(specs[1], specs[4]);
  const std::vector<size_t> order = safetensors_order(specs);
  ASSERT_EQ(order.size(), specs.size());
  std::vector<size_t> calls;
  std::weak_ptr<Storage> previous;
  bool previous_dropped = true;
  TensorStream stream{specs, [&](size_t i) {
                        previous_dropped = previous_dropped && previous.expired();
                        calls.push_back(i);
                        Tensor t = d.at(specs[i].name).clone();  // a tensor of its own, like a gathered one
                        if (specs[i].name == "strided") t = transpose(transpose(d.at("strided"), 0, 1).clone(), 0, 1);  // strided, its own
                        previous = t.storage();
                        return t;
                      }};
  const FileDigest digest = save_safetensors_streamed(path("streamed.safetensors"), stream, {{"format", "pt"}});
  EXPECT_EQ(calls, order) << "produce runs once per tensor, in the file's order";
  EXPECT_TRUE(previous_dropped) << "each produced tensor is dropped before the next is asked for";
  save_safetensors(path("whole.safetensors"), d, {{"format", "pt"}});
  const std::string bytes = read_bytes(path("streamed.safetensors"));
  EXPECT_EQ(bytes, read_bytes(path("whole.safetensors")));
  EXPECT_EQ(digest.crc32c, crc32c_portable(bytes.data(), bytes.size()));
  // The order: widest alignment first, then by name; the same for any permutation of the specs.
  std::vector<std::string> names;
  for (size_t i : order) names.push_back(specs[i].name);
  EXPECT_EQ(names, (std::vector<std::string>{"i64", "f64", "f32", "strided", "i32", "bf16", "empty", "f16", "u8", "bool"}));
}

TEST_F(Safetensors, StreamedWriteRefusesWhatDisagreesWithItsSpecs) {
  const Tensor x = randn({2, 3}, kF32);
  auto stream_of = [&](std::vector<TensorSpec> specs, Tensor t) {
    return TensorStream{std::move(specs), [t](size_t) { return t; }};
  };
  expect_error([&] { save_safetensors_streamed(path("a.safetensors"), stream_of({{"w", kF32, {3, 2}}}, x)); },
               {"tensor 'w' was announced as F32 [3, 2] but is F32 [2, 3]"});
  expect_error([&] { save_safetensors_streamed(path("a.safetensors"), stream_of({{"w", kF16, {2, 3}}}, x)); },
               {"tensor 'w' was announced as F16 [2, 3] but is F32 [2, 3]"});
  expect_error([&] { save_safetensors_streamed(path("a.safetensors"), stream_of({{"w", kF32, {2, 3}}, {"w", kF32, {2, 3}}}, x)); },
               {"two tensors are named 'w'"});
  expect_error([&] { save_safetensors_streamed(path("a.safetensors"), stream_of({{"w", kF32, {2, 3}}}, Tensor())); },
               {"tensor 'w' is undefined"});
  expect_error([&] { save_safetensors_streamed(path("a.safetensors"), TensorStream{{{"w", kF32, {2}}}, {}}); },
               {"a.safetensors", "has no producer"});
  EXPECT_FALSE(std::filesystem::exists(path("a.safetensors"))) << "a failed write leaves nothing";
}

TEST_F(Safetensors, EmptyAndZeroDimTensors) {
  StateDict d;
  d["empty"] = empty({0}, kF32);
  d["empty3"] = empty({2, 0, 3}, kF16);
  d["scalar"] = tensor_from_bytes(kF64, {}, le_bytes<double>({-2.5}));
  d["scalar_bool"] = tensor_from_bytes(kBool, {}, le_bytes<uint8_t>({1}));
  save_safetensors(path("e.safetensors"), d);
  for (LoadMode mode : {LoadMode::Mmap, LoadMode::Copy}) {
    SafetensorsFile f = load_safetensors(path("e.safetensors"), mode);
    expect_same(d, f.tensors, "empty/0-dim");
    EXPECT_EQ(f.tensors.at("scalar").dim(), 0);
    EXPECT_EQ(f.tensors.at("scalar").item<double>(), -2.5);
    EXPECT_EQ(f.tensors.at("empty3").numel(), 0);
    EXPECT_TRUE(f.metadata.empty());
  }
  // An empty map is a valid file too: "{}" padded to 8 bytes.
  save_safetensors(path("none.safetensors"), {});
  EXPECT_EQ(read_bytes(path("none.safetensors")), safetensors_bytes("{}      ", ""));
  EXPECT_TRUE(load_safetensors(path("none.safetensors")).tensors.empty());
}

// The bytes the reference implementation (huggingface/safetensors) writes for the same input,
// taken from its own serialization tests; here assembled from their text.
TEST_F(Safetensors, WriterMatchesReferenceBytes) {
  const std::string data = le_bytes<float>({0, 1, 2, 3, 4, 5});
  {
    StateDict d{{"attn.0", tensor_from_bytes(kF32, {1, 2, 3}, data)}};
    // 64 bytes of header: already a multiple of 8, no padding.
    const std::string want = safetensors_bytes(R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})", data);
    const std::vector<uint8_t> got = serialize_safetensors(d);
    EXPECT_EQ(std::string(got.begin(), got.end()), want);
  }
  {
    // 65 bytes of JSON, padded with 7 spaces to 72 so the f32 data is aligned.
    StateDict d{{"attn0", tensor_from_bytes(kF32, {1, 1, 2, 3}, data)}};
    const std::string want =
        safetensors_bytes(std::string(R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})") + "       ", data);
    const std::vector<uint8_t> got = serialize_safetensors(d);
    EXPECT_EQ(std::string(got.begin(), got.end()), want);
    EXPECT_EQ(want.size() - 24, 80u);  // 8 + 72
  }
  {
    const std::vector<uint8_t> got = serialize_safetensors({}, {{"framework", "pt"}});
    // 35 bytes of JSON, padded with 5 spaces to 40.
    const std::string want = safetensors_bytes(std::string(R"({"__metadata__":{"framework":"pt"}})") + "     ", "");
    EXPECT_EQ(std::string(got.begin(), got.end()), want);
  }
}

// Widest alignment first, then name (the reference's order), so every tensor is aligned.
TEST_F(Safetensors, WriterOrdersByAlignmentThenName) {
  StateDict d;
  d["a"] = zeros({3}, kU8);
  d["b"] = zeros({1}, kF64);
  d["c"] = zeros({2}, kF32);
  d["d"] = zeros({1}, kI64);
  d["e"] = zeros({1}, kBool);
  d["f"] = zeros({1}, kBF16);
  d["g"] = zeros({1}, kF16);
  d["h"] = zeros({1}, kI32);
  d["c2"] = zeros({1}, kF32);
  save_safetensors(path("o.safetensors"), d);
  const SafetensorsHeader h = read_safetensors_header(path("o.safetensors"));
  std::vector<std::string> names;
  std::vector<std::pair<uint64_t, uint64_t>> offsets;
  for (const auto& e : h.entries) {
    names.push_back(e.name);
    offsets.emplace_back(e.begin, e.end);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"d", "b", "c", "c2", "h", "f", "g", "a", "e"}));
  EXPECT_EQ(offsets, (std::vector<std::pair<uint64_t, uint64_t>>{
                         {0, 8}, {8, 16}, {16, 24}, {24, 28}, {28, 32}, {32, 34}, {34, 36}, {36, 39}, {39, 40}}));
  EXPECT_EQ(h.data_start % 8, 0u);
  EXPECT_EQ(h.data_size, 40u);
}

// Written by an independent writer (these bytes, by hand): names out of order, no padding (so
// the data is misaligned and mmap must copy), extra keys in an entry (ignored, as by the
// reference), metadata.
TEST_F(Safetensors, ReadsHandAssembledFile) {
  const std::string header =
      R"({"z":{"dtype":"I32","shape":[3],"data_offsets":[8,20],"extra":[1]},)"
      R"("__metadata__":{"step":"10"},)"
      R"("a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
      R"("m":{"dtype":"BOOL","shape":[2],"data_offsets":[20,22]}})";
  ASSERT_NE(header.size() % 8, 0u);
  write_bytes(path("h.safetensors"),
              safetensors_bytes(header, le_bytes<double>({6.25}) + le_bytes<int32_t>({-1, 2, 300000}) + std::string("\x01\x00", 2)));
  for (LoadMode mode : {LoadMode::Mmap, LoadMode::Copy}) {
    SafetensorsFile f = load_safetensors(path("h.safetensors"), mode);
    ASSERT_EQ(f.tensors.size(), 3u);
    EXPECT_EQ(f.tensors.at("a").to_vector<double>(), std::vector<double>({6.25}));
    EXPECT_EQ(f.tensors.at("z").to_vector<int64_t>(), std::vector<int64_t>({-1, 2, 300000}));
    EXPECT_EQ(f.tensors.at("m").to_vector<int64_t>(), std::vector<int64_t>({1, 0}));
    EXPECT_EQ(f.tensors.at("z").dtype(), kI32);
    EXPECT_EQ(f.metadata, (StringMap{{"step", "10"}}));
    for (const auto& [name, t] : f.tensors)
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % t.element_size(), 0u) << name << " is misaligned";
  }
}

// Bytes of a file PyTorch 1.13 wrote (/usr/bin/python3; the Python safetensors package is not
// installed, so the script assembled the header with json.dumps and the data with
// tensor.numpy().tobytes(), bf16 through a view as int16). The tensors were
//   mask = [True, False, True], half = f16 [1.5, -2.25, 3e-5, inf], bf16 = [1.0, -0.0, 3.140625],
//   f32 = [[1, 2], [3, 4]].t().contiguous(), i64 = [-5, 2**40], f64 = 0.1 (0-dim),
// and PyTorch printed their values (as f64) as expected below.
TEST_F(Safetensors, ReadsFileWrittenByPyTorch) {
  const std::string hex =
      "5a010000000000007b226d61736b223a7b226474797065223a22424f4f4c222c227368617065223a5b335d2c22646174615f6f66667365"
      "7473223a5b302c335d7d2c2268616c66223a7b226474797065223a22463136222c227368617065223a5b345d2c22646174615f6f666673"
      "657473223a5b332c31315d7d2c2262663136223a7b226474797065223a2242463136222c227368617065223a5b335d2c22646174615f6f"
      "666673657473223a5b31312c31375d7d2c22663332223a7b226474797065223a22463332222c227368617065223a5b322c325d2c226461"
      "74615f6f666673657473223a5b31372c33335d7d2c22693634223a7b226474797065223a22493634222c227368617065223a5b325d2c22"
      "646174615f6f666673657473223a5b33332c34395d7d2c22663634223a7b226474797065223a22463634222c227368617065223a5b5d2c"
      "22646174615f6f666673657473223a5b34392c35375d7d7d010001003e80c0f701007c803f008049400000803f00004040000000400000"
      "8040fbffffffffffffff00000000000100009a9999999999b93f";
  std::string bytes;
  for (size_t i = 0; i < hex.size(); i += 2) bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  ASSERT_EQ(bytes.size(), 411u);
  write_bytes(path("torch.safetensors"), bytes);
  for (LoadMode mode : {LoadMode::Mmap, LoadMode::Copy}) {
    const StateDict t = load_safetensors(path("torch.safetensors"), mode).tensors;
    EXPECT_EQ(t.at("mask").dtype(), kBool);
    EXPECT_EQ(t.at("mask").to_vector<double>(), std::vector<double>({1, 0, 1}));
    EXPECT_EQ(t.at("half").to_vector<double>(), std::vector<double>({1.5, -2.25, 2.9981136322021484e-05, INFINITY}));
    const std::vector<double> bf = t.at("bf16").to_vector<double>();
    EXPECT_EQ(bf, std::vector<double>({1.0, -0.0, 3.140625}));
    EXPECT_TRUE(std::signbit(bf[1]));
    EXPECT_EQ(t.at("f32").sizes(), Shape({2, 2}));
    EXPECT_EQ(t.at("f32").to_vector<double>(), std::vector<double>({1, 3, 2, 4}));
    EXPECT_EQ(t.at("i64").to_vector<int64_t>(), std::vector<int64_t>({-5, int64_t(1) << 40}));
    EXPECT_EQ(t.at("f64").dim(), 0);
    EXPECT_EQ(t.at("f64").item<double>(), 0.1);
  }
}

TEST_F(Safetensors, WritesAnyLayoutAsRowMajor) {
  // A transposed view and a tensor that requires grad are written as their row-major values.
  Tensor base = arange(6.0, kF32).detach();
  Tensor v = transpose(reshape(base, {2, 3}), 0, 1);
  ASSERT_FALSE(v.is_contiguous());
  Tensor p = ones({2}, kF32).set_requires_grad();
  save_safetensors(path("v.safetensors"), {{"v", v}, {"p", p}});
  const StateDict t = load_safetensors(path("v.safetensors")).tensors;
  EXPECT_EQ(t.at("v").sizes(), Shape({3, 2}));
  EXPECT_EQ(t.at("v").to_vector<double>(), std::vector<double>({0, 3, 1, 4, 2, 5}));
  EXPECT_FALSE(t.at("p").requires_grad());
}

bool mapped(const std::string& path) {
  return read_bytes("/proc/self/maps").find(path) != std::string::npos;
}

TEST_F(Safetensors, MmapViewsOutliveTheFileAndHoldTheMapping) {
  StateDict d{{"a", tensor_from_bytes(kF32, {4}, le_bytes<float>({1, 2, 3, 4}))},
              {"b", tensor_from_bytes(kF32, {2}, le_bytes<float>({5, 6}))}};
  const std::string file = path("m.safetensors");
  save_safetensors(file, d);
  Tensor a, b;
  {
    SafetensorsFile f = load_safetensors(file, LoadMode::Mmap);
    a = f.tensors.at("a");
    b = f.tensors.at("b");
  }
  // Views of one mapping: their distance is their distance in the file, and no storage of
  // their own was allocated.
  const SafetensorsHeader h = read_safetensors_header(file);
  EXPECT_EQ(static_cast<const char*>(b.data_ptr()) - static_cast<const char*>(a.data_ptr()),
            static_cast<std::ptrdiff_t>(h.entries[1].begin) - static_cast<std::ptrdiff_t>(h.entries[0].begin));
  EXPECT_EQ(a.storage()->nbytes(), 16u);
  EXPECT_TRUE(mapped(file));
  // The file is gone and another took its name: the views still read the old data.
  std::filesystem::remove(file);
  save_safetensors(file, {{"a", zeros({4}, kF32)}});
  EXPECT_EQ(a.to_vector<double>(), std::vector<double>({1, 2, 3, 4}));
  EXPECT_EQ(b.to_vector<double>(), std::vector<double>({5, 6}));
  // Writes stay in this process: the file on disk is unchanged.
  fill_(a, 9.0);
  EXPECT_EQ(a.to_vector<double>(), std::vector<double>({9, 9, 9, 9}));
  // The mapping goes with the last view.
  a = Tensor();
  EXPECT_TRUE(mapped(file + " (deleted)"));
  b = Tensor();
  EXPECT_FALSE(mapped(file + " (deleted)"));
}

TEST_F(Safetensors, WritesToMmapTensorsNeverReachTheFile) {
  const std::string file = path("w.safetensors");
  save_safetensors(file, {{"x", tensor_from_bytes(kI32, {3}, le_bytes<int32_t>({1, 2, 3}))}});
  const std::string before = read_bytes(file);
  {
    Tensor x = load_safetensors(file, LoadMode::Mmap).tensors.at("x");
    fill_(x, 7.0);
    EXPECT_EQ(x.to_vector<int64_t>(), std::vector<int64_t>({7, 7, 7}));
  }
  EXPECT_EQ(read_bytes(file), before);
  EXPECT_EQ(load_safetensors(file, LoadMode::Copy).tensors.at("x").to_vector<int64_t>(), std::vector<int64_t>({1, 2, 3}));
}

TEST_F(Safetensors, AtomicWriteKeepsTheOldFileOnError) {
  const std::string file = path("keep.safetensors");
  save_safetensors(file, {{"x", ones({2}, kF32)}});
  const std::string before = read_bytes(file);
  expect_error([&] { save_safetensors(file, {{"x", ones({2}, kF32)}, {"bad", Tensor()}}); }, {"tensor 'bad' is undefined"});
  EXPECT_EQ(read_bytes(file), before);
  EXPECT_EQ(listing(), std::vector<std::string>({"keep.safetensors"}));  // no temporary left behind
  expect_error([&] { save_safetensors(path("no/such/dir/x.safetensors"), {}); }, {"cannot create file", "no/such/dir"});
}

TEST_F(Safetensors, WriterRefusesBadNames) {
  expect_error([&] { serialize_safetensors({{"__metadata__", ones({1})}}); }, {"\"__metadata__\" is reserved"});
  expect_error([&] { serialize_safetensors({{std::string("bad\xff", 4), ones({1})}}); }, {"tensor name is not valid UTF-8"});
  expect_error([&] { serialize_safetensors({}, {{"k", std::string("\xc3", 1)}}); }, {"metadata value is not valid UTF-8"});
}

// ---- malformed files: one message each, naming the file and the problem ------------------

class SafetensorsBad : public testing::ScratchDir {
 protected:
  // Every reader must reject these bytes with a message containing every part and the file.
  void expect_bad(const std::string& bytes, const std::vector<std::string>& parts) {
    const std::string file = path("bad.safetensors");
    write_bytes(file, bytes);
    std::vector<std::string> with_file = parts;
    with_file.push_back("safetensors file '" + file + "'");
    expect_error([&] { load_safetensors(file, LoadMode::Mmap); }, with_file);
    expect_error([&] { load_safetensors(file, LoadMode::Copy); }, with_file);
    std::vector<std::string> with_name = parts;
    with_name.push_back("safetensors file 'mem'");
    expect_error([&] { parse_safetensors(bytes.data(), bytes.size(), "mem"); }, with_name);
  }
  void expect_bad_header(const std::string& header, const std::string& data, const std::vector<std::string>& parts) {
    expect_bad(safetensors_bytes(header, data), parts);
  }
};

TEST_F(SafetensorsBad, ShortFile) {
  expect_bad("", {"the file is 0 bytes long, shorter than the 8-byte header length"});
  expect_bad(std::string("\x02\x00\x00", 3), {"the file is 3 bytes long"});
}

TEST_F(SafetensorsBad, HeaderLength) {
  expect_bad(le_bytes<uint64_t>({20}) + "{}", {"header length 20 runs past the end of the file (10 bytes"});
  expect_bad(le_bytes<uint64_t>({uint64_t(1) << 63}) + "{}", {"header length 9223372036854775808 exceeds the 100000000-byte limit"});
  expect_bad(le_bytes<uint64_t>({~uint64_t(0)}), {"header length 18446744073709551615 exceeds"});
  expect_bad(le_bytes<uint64_t>({100'000'001}), {"exceeds the 100000000-byte limit"});
}

TEST_F(SafetensorsBad, InvalidJson) {
  expect_bad_header("{\"a\":", "", {"the header is not valid JSON", "parse error"});
  expect_bad_header("{} x", "", {"the header is not valid JSON"});
  expect_bad_header(std::string("{\"a\xff\":1}"), "", {"the header is not valid JSON", "UTF-8"});
  expect_bad_header(std::string("{}\0\0\0\0\0\0", 8), "", {"the header is not valid JSON: a NUL byte at header offset 2"});
  expect_bad_header(std::string("{}\0{\"a\":[]", 10), "", {"a NUL byte at header offset 2"});
  std::string deep(100, '[');
  deep += std::string(100, ']');
  expect_bad_header(deep, "", {"header JSON nests deeper than 64 levels"});
}

TEST_F(SafetensorsBad, NotAnObject) {
  expect_bad_header("[1,2]", "", {"the header must be a JSON object, got a JSON array"});
  expect_bad_header("\"x\"   ", "", {"got a JSON string"});
}

TEST_F(SafetensorsBad, EntryFields) {
  expect_bad_header(R"({"w":[1]})", "", {"the entry of tensor 'w' must be an object, got a JSON array"});
  expect_bad_header(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "1234", {"tensor 'w' has no \"dtype\""});
  expect_bad_header(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "1234", {"tensor 'w' has no \"shape\""});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[1]}})", "1234", {"tensor 'w' has no \"data_offsets\""});
  expect_bad_header(R"({"w":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})", "1234",
                    {"tensor 'w': \"dtype\" must be a string, got a JSON number"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "1234",
                    {"tensor 'w': \"shape\" must be an array, got a JSON string"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "1234",
                    {"tensor 'w': \"data_offsets\" must be an array [begin, end], got [0]"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":{"a":0}}})", "1234",
                    {"\"data_offsets\" must be an array [begin, end]"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", "1234",
                    {"tensor 'w': data_offsets[1] must be a non-negative integer, got a JSON string"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-1,4]}})", "1234",
                    {"tensor 'w': data_offsets[0] is -1, must be a non-negative integer"});
}

TEST_F(SafetensorsBad, Dtypes) {
  expect_bad_header(R"({"w":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})", "1234", {"tensor 'w' has unknown dtype 'F31'"});
  expect_bad_header(R"({"w":{"dtype":"I16","shape":[2],"data_offsets":[0,4]}})", "1234",
                    {"tensor 'w' has dtype I16, which Trident does not support"});
  expect_bad_header(R"({"w":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", "1234", {"dtype I8, which Trident does not support"});
  expect_bad_header(R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", "1234", {"unknown dtype 'f32'"});
}

TEST_F(SafetensorsBad, Shapes) {
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[1,-2],"data_offsets":[0,4]}})", "1234",
                    {"tensor 'w': shape[1] is -2, must be a non-negative integer"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,4]}})", "1234",
                    {"tensor 'w': shape[0] is 2.5, must be an integer"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", "1234", {"shape[0] is 1.0, must be an integer"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[null],"data_offsets":[0,4]}})", "1234",
                    {"shape[0] must be a non-negative integer, got a JSON null"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}})", "1234",
                    {"shape[0] is", "must be an integer (at most 2^64-1)"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4]}})", "1234",
                    {"shape[0] = 9223372036854775808 is above 2^63-1"});
  // 2^32 * 2^32 elements overflow 64 bits; 2^31 * 2^31 f64 elements overflow only the byte
  // count; with a zero dimension the tensor would be empty, but its strides still overflow, so
  // it is refused too; a zero next to modest dims is a plain empty tensor (0 bytes).
  expect_bad_header(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", "1234",
                    {"tensor 'w': shape [4294967296, 4294967296] of U8 overflows a 64-bit element or byte count"});
  expect_bad_header(R"({"w":{"dtype":"F64","shape":[2147483648,2147483648],"data_offsets":[0,4]}})", "1234",
                    {"overflows a 64-bit element or byte count"});
  expect_bad_header(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", "",
                    {"overflows a 64-bit element or byte count"});
  expect_bad_header(R"({"w":{"dtype":"F64","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", "",
                    {"overflows a 64-bit element or byte count"});
  expect_bad_header(R"({"w":{"dtype":"F64","shape":[4294967296,0],"data_offsets":[0,4]}})", "1234",
                    {"needs 0 bytes but data_offsets [0, 4] span 4"});
}

TEST_F(SafetensorsBad, Offsets) {
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", "12345678",
                    {"tensor 'w': data_offsets [8, 0] are reversed"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", "12345678",
                    {"tensor 'w': data_offsets [4, 12] run past the end of the 8-byte data buffer"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", "12345678",
                    {"run past the end of the 8-byte data buffer"});
  expect_bad_header(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(20, 'x'),
                    {"tensor 'w' (F32, shape [2, 3]) needs 24 bytes but data_offsets [0, 20] span 20"});
  expect_bad_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    std::string(12, 'x'), {"tensor 'b' at data_offsets [4, 12] overlaps tensor 'a' at [0, 8]"});
  expect_bad_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                    std::string(8, 'x'), {"overlaps tensor 'a' at [0, 8]"});
  expect_bad_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                    std::string(8, 'x'), {"tensor 'e' at data_offsets [4, 4] overlaps tensor 'a' at [0, 8]"});
  expect_bad_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[6,10]}})",
                    std::string(10, 'x'), {"bytes [4, 6) of the data buffer belong to no tensor (a gap before tensor 'b')"});
  expect_bad_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", std::string(6, 'x'),
                    {"bytes [0, 2) of the data buffer belong to no tensor"});
  expect_bad_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(7, 'x'),
                    {"the data buffer has 7 bytes but the tensors cover only 4 (3 bytes after the last tensor)"});
  expect_bad_header("{}", "x", {"the data buffer has 1 bytes but the tensors cover only 0"});
}

TEST_F(SafetensorsBad, DuplicateNames) {
  expect_bad_header(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                    "xy", {"duplicate tensor name 'a' in the header"});
  expect_bad_header(R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x", {"duplicate key 'dtype'"});
  expect_bad_header(R"({"__metadata__":{"k":"1","k":"2"}})", "", {"duplicate key 'k'"});
}

TEST_F(SafetensorsBad, Metadata) {
  expect_bad_header(R"({"__metadata__":{"k":1}})", "", {"\"__metadata__\" value of key 'k' must be a string, got a JSON number"});
  expect_bad_header(R"({"__metadata__":["k"]})", "", {"\"__metadata__\" must be an object of strings, got a JSON array"});
}

TEST_F(SafetensorsBad, BoolBytes) {
  expect_bad_header(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x01\x02\x00", 3),
                    {"tensor 'm' (BOOL) holds byte 2 at element 1; BOOL elements must be 0 or 1"});
}

TEST_F(SafetensorsBad, LongNamesAreShortenedInMessages) {
  const std::string name(5000, 'n');
  std::string msg;
  const std::string bytes = safetensors_bytes("{\"" + name + "\":1}", "");
  try {
    parse_safetensors(bytes.data(), bytes.size(), "mem");
  } catch (const Error& e) {
    msg = e.message();
  }
  EXPECT_NE(msg.find("(5000 bytes)"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 400u);
}

TEST_F(SafetensorsBad, FileSystemErrors) {
  expect_error([&] { load_safetensors(path("absent.safetensors")); }, {"cannot open file", "absent.safetensors"});
  expect_error([&] { load_safetensors(path("absent.safetensors"), LoadMode::Copy); }, {"cannot open file"});
  expect_error([&] { load_safetensors(dir_.string()); }, {"is not a regular file"});
  expect_error([&] { read_safetensors_header(path("absent.safetensors")); }, {"cannot open file"});
}

}  // namespace
}  // namespace trident::nn
