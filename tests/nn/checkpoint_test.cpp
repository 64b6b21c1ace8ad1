// Checkpoint directories: CRC32C, the manifest, corruption and truncation detected, interrupted
// writes leaving the previous checkpoint intact, and finding the latest complete checkpoint.
#include <random>

#include "nn/checkpoint.h"
#include "nn/file_io.h"
#include "nn/nn_test_util.h"

namespace trident::nn {
namespace {

namespace fs = std::filesystem;
using testing::error_message;
using testing::expect_error;
using testing::read_bytes;
using testing::write_bytes;

// ---- CRC32C -------------------------------------------------------------------------------

// Published check values: "123456789" -> 0xE3069283 (the CRC catalogue's check value for
// CRC-32C), and the iSCSI test vectors of RFC 3720, appendix B.4.
TEST(Crc32c, KnownValues) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  for (auto* f : {&crc32c, &crc32c_portable}) {
    EXPECT_EQ((*f)("123456789", 9, 0), 0xE3069283u);
    EXPECT_EQ((*f)(zeros.data(), 32, 0), 0x8A9136AAu);
    EXPECT_EQ((*f)(ones.data(), 32, 0), 0x62A8AB43u);
    EXPECT_EQ((*f)(inc.data(), 32, 0), 0x46DD794Eu);
    EXPECT_EQ((*f)(dec.data(), 32, 0), 0x113FDB5Cu);
    EXPECT_EQ((*f)(nullptr, 0, 0), 0u);
  }
}

// The fast path (SSE4.2 where present) agrees with the tables at every length and alignment,
// and a CRC can be extended piece by piece.
TEST(Crc32c, FastPathAndExtension) {
  std::mt19937 rng(5);
  std::vector<uint8_t> buf(4096 + 16);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 9; ++offset)
    for (size_t n : {0, 1, 7, 8, 9, 15, 16, 63, 64, 65, 1000, 4096}) {
      EXPECT_EQ(crc32c(buf.data() + offset, n), crc32c_portable(buf.data() + offset, n)) << offset << " " << n;
      for (size_t cut : {size_t(0), n / 3, n})
        EXPECT_EQ(crc32c(buf.data() + offset + cut, n - cut, crc32c(buf.data() + offset, cut)), crc32c(buf.data() + offset, n));
    }
}

// ---- checkpoints --------------------------------------------------------------------------

class Checkpoints : public testing::ScratchDir {
 protected:
  // A small checkpoint: model and optimizer tensors, and the trainer's JSON state.
  void write(const std::string& name, float value, int64_t step) {
    CheckpointWriter w(path(name));
    w.write_tensors("model", {{"w", full({2, 3}, value, kF32)}, {"b", full({3}, -value, kF32)}}, {{"arch", "mlp"}});
    w.write_tensors("optimizer", {{"exp_avg.w", full({2, 3}, value / 2, kF32)}, {"step", scalar_tensor(double(step), kI64)}});
    w.write_json("trainer", {{"step", step}, {"rng", {{"seed", 1234}, {"offset", 96}}}, {"loader", {{"epoch", 0}, {"index", 17}}}});
    w.commit();
  }
  std::vector<std::string> hidden_entries() const {
    std::vector<std::string> out;
    for (const auto& n : listing())
      if (n[0] == '.') out.push_back(n);
    return out;
  }
};

TEST_F(Checkpoints, WriteAndRead) {
  write("ck", 1.5f, 100);
  EXPECT_EQ(testing::ScratchDir::listing(), std::vector<std::string>({"ck"}));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(path("ck"))) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"manifest.json", "model.safetensors", "optimizer.safetensors", "trainer.json"}));

  const Checkpoint c = read_checkpoint(path("ck"));
  EXPECT_EQ(c.manifest.format_version, kCheckpointFormatVersion);
  ASSERT_EQ(c.manifest.files.size(), 3u);
  for (const CheckpointFileInfo& f : c.manifest.files) {
    // Size and CRC32C of the bytes on disk, read independently.
    const std::string bytes = read_bytes(path("ck/" + f.name));
    EXPECT_EQ(f.size, bytes.size()) << f.name;
    EXPECT_EQ(f.crc32c, crc32c_portable(bytes.data(), bytes.size())) << f.name;
  }
  EXPECT_EQ(c.tensors.at("model").tensors.at("w").to_vector<double>(), std::vector<double>(6, 1.5));
  EXPECT_EQ(c.tensors.at("model").tensors.at("b").to_vector<double>(), std::vector<double>(3, -1.5));
  EXPECT_EQ(c.tensors.at("model").metadata.at("arch"), "mlp");
  EXPECT_EQ(c.tensors.at("optimizer").tensors.at("step").item<int64_t>(), 100);
  EXPECT_EQ(c.documents.at("trainer")["step"], 100);
  EXPECT_EQ(c.documents.at("trainer")["loader"]["index"], 17);
  EXPECT_EQ(c.documents.at("trainer")["rng"]["seed"], 1234);

  // The manifest as a plain JSON document.
  const nlohmann::json m = nlohmann::json::parse(read_bytes(path("ck/manifest.json")));
  EXPECT_EQ(m["format"], "trident-checkpoint");
  EXPECT_EQ(m["format_version"], 1);
  EXPECT_TRUE(m["created"].is_string());
  EXPECT_EQ(m["created"].get<std::string>().size(), 20u);  // 2024-05-20T12:00:00Z
  EXPECT_GT(m["created_unix_ns"].get<int64_t>(), 0);

  // Mmap mode works on checkpoints too.
  EXPECT_EQ(read_checkpoint(path("ck"), LoadMode::Mmap).tensors.at("model").tensors.at("w").to_vector<double>(),
            std::vector<double>(6, 1.5));
}

TEST_F(Checkpoints, CorruptionIsCaughtByTheChecksum) {
  write("ck", 1.0f, 1);
  std::string bytes = read_bytes(path("ck/model.safetensors"));
  bytes[bytes.size() - 3] ^= 0x10;  // one bit in the tensor data: still a valid safetensors file
  write_bytes(path("ck/model.safetensors"), bytes);
  expect_error([&] { read_checkpoint(path("ck")); }, {"checkpoint '" + path("ck") + "'", "file 'model.safetensors' is corrupt: CRC32C"});
  expect_error([&] { verify_checkpoint(path("ck")); }, {"'model.safetensors' is corrupt"});
  // Sizes alone cannot see it: the listing (which reads no data) still shows the checkpoint.
  EXPECT_NO_THROW(verify_checkpoint(path("ck"), false));
}

TEST_F(Checkpoints, TruncationIsCaughtBySize) {
  write("ck", 1.0f, 1);
  std::string bytes = read_bytes(path("ck/optimizer.safetensors"));
  write_bytes(path("ck/optimizer.safetensors"), bytes.substr(0, bytes.size() - 5));
  expect_error([&] { read_checkpoint(path("ck")); },
               {"file 'optimizer.safetensors' is " + std::to_string(bytes.size() - 5) + " bytes, the manifest says " +
                std::to_string(bytes.size())});
  expect_error([&] { verify_checkpoint(path("ck"), false); }, {"(truncated or replaced)"});
  EXPECT_EQ(list_checkpoints(dir_.string()), std::vector<std::string>{});
}

TEST_F(Checkpoints, MissingFileAndManifest) {
  write("ck", 1.0f, 1);
  fs::remove(path("ck/trainer.json"));
  expect_error([&] { read_checkpoint(path("ck")); }, {"file 'trainer.json' listed in the manifest is missing"});
  fs::remove(path("ck/manifest.json"));
  expect_error([&] { read_checkpoint(path("ck")); }, {"has no manifest.json (incomplete or not a checkpoint)"});
  expect_error([&] { read_checkpoint(path("absent")); }, {"checkpoint '" + path("absent") + "' is not a directory"});
}

// An exception between the parts and commit (a crash in the trainer, a full disk) leaves the
// previous checkpoint of that name as it was, and no partial directory behind.
TEST_F(Checkpoints, InterruptedWriteKeepsThePreviousCheckpoint) {
  write("ck", 1.0f, 10);
  const std::string before = read_bytes(path("ck/model.safetensors"));
  try {
    CheckpointWriter w(path("ck"));
    w.write_tensors("model", {{"w", full({2, 3}, 9.0, kF32)}, {"b", full({3}, 9.0, kF32)}});
    EXPECT_TRUE(fs::is_directory(w.temporary_path()));
    EXPECT_EQ(fs::path(w.temporary_path()).filename().string().rfind(".ck.tmp-", 0), 0u);
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(listing(), std::vector<std::string>({"ck"}));
  EXPECT_EQ(read_bytes(path("ck/model.safetensors")), before);
  EXPECT_EQ(read_checkpoint(path("ck")).tensors.at("model").tensors.at("w").to_vector<double>(), std::vector<double>(6, 1.0));
  EXPECT_EQ(latest_checkpoint(dir_.string()), path("ck"));

  // An error inside a part (an undefined tensor) is the same.
  expect_error(
      [&] {
        CheckpointWriter w(path("ck"));
        w.write_tensors("model", {{"w", Tensor()}});
        w.commit();
      },
      {"tensor 'w' is undefined"});
  EXPECT_EQ(listing(), std::vector<std::string>({"ck"}));
  EXPECT_EQ(read_bytes(path("ck/model.safetensors")), before);
}

// Leftovers of a process that died while writing (it ran no destructor) are never taken for
// checkpoints: hidden temporary directories, directories without a manifest, and directories
// whose files do not match their manifest.
TEST_F(Checkpoints, LatestSkipsIncompleteAndTemporary) {
  EXPECT_EQ(latest_checkpoint(path("absent")), std::nullopt);
  EXPECT_EQ(latest_checkpoint(dir_.string()), std::nullopt);
  write("step_1", 1.0f, 1);
  write("step_2", 2.0f, 2);
  // A complete copy under a temporary (hidden) name, as a crash after the manifest but before
  // the rename would leave it.
  fs::copy(path("step_2"), path(".step_3.tmp-1-2-3"));
  // A crash before the manifest: files, no manifest.
  fs::create_directory(path("step_4"));
  fs::copy_file(path("step_2/model.safetensors"), path("step_4/model.safetensors"));
  // A manifest whose file was cut short (copied by hand, say).
  fs::copy(path("step_2"), path("step_5"));
  write_bytes(path("step_5/trainer.json"), "{");
  // A manifest that is not one.
  fs::create_directory(path("step_6"));
  write_bytes(path("step_6/manifest.json"), "not json");
  write_bytes(path("stray_file"), "x");
  EXPECT_EQ(list_checkpoints(dir_.string()), (std::vector<std::string>{path("step_2"), path("step_1")}));
  EXPECT_EQ(latest_checkpoint(dir_.string()), path("step_2"));
  // Newest by creation time, not by name.
  write("step_1", 3.0f, 3);
  EXPECT_EQ(latest_checkpoint(dir_.string()), path("step_1"));
  expect_error([&] { list_checkpoints(path("stray_file")); }, {"is not a directory"});
}

TEST_F(Checkpoints, ReplacingKeepsOneCompleteCheckpoint) {
  write("ck", 1.0f, 1);
  write("ck", 2.0f, 2);
  EXPECT_EQ(listing(), std::vector<std::string>({"ck"}));  // the old one is gone, nothing hidden left
  const Checkpoint c = read_checkpoint(path("ck"));
  EXPECT_EQ(c.tensors.at("model").tensors.at("w").to_vector<double>(), std::vector<double>(6, 2.0));
  EXPECT_EQ(c.documents.at("trainer")["step"], 2);
  // A checkpoint with fewer parts replaces one with more: no file of the old one survives.
  {
    CheckpointWriter w(path("ck"));
    w.write_json("only", {{"x", 1}});
    w.commit();
  }
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(path("ck"))) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"manifest.json", "only.json"}));
  EXPECT_TRUE(hidden_entries().empty());
}

// Both ways of replacing a checkpoint: the atomic exchange, and renaming the old one aside
// (for file systems without RENAME_EXCHANGE).
TEST_F(Checkpoints, PublishByExchangeAndByRenamingAside) {
  for (bool exchange : {true, false}) {
    write("ck", 1.0f, 1);
    fs::create_directory(path("new"));
    write_bytes(path("new/marker"), exchange ? "exchange" : "aside");
    internal::publish_checkpoint_directory(path("new"), path("ck"), exchange);
    EXPECT_EQ(read_bytes(path("ck/marker")), exchange ? "exchange" : "aside");
    EXPECT_FALSE(fs::exists(path("ck/manifest.json")));
    EXPECT_EQ(listing(), std::vector<std::string>({"ck"}));  // neither "new" nor the old one remains
    fs::remove_all(path("ck"));
  }
  // Into a free name: a plain rename.
  fs::create_directory(path("new"));
  internal::publish_checkpoint_directory(path("new"), path("fresh"), true);
  EXPECT_EQ(listing(), std::vector<std::string>({"fresh"}));
}

TEST_F(Checkpoints, WriterErrors) {
  expect_error([&] { CheckpointWriter w(path("no/such/ck")); }, {"the folder '" + path("no/such") + "' does not exist"});
  write_bytes(path("file"), "x");
  expect_error([&] { CheckpointWriter w(path("file")); }, {"exists and is not a directory"});
  CheckpointWriter w(path("ck"));
  for (const std::string bad : {"", ".hidden", "a/b", "../up", "sp ace"})
    expect_error([&] { w.write_json(bad, {}); }, {"bad part name '" + bad + "'"});
  expect_error([&] { w.write_json("manifest", {}); }, {"'manifest' is reserved"});
  w.write_json("a", {});
  expect_error([&] { w.write_json("a", {}); }, {"part 'a' written twice"});
  expect_error([&] { w.write_json("bad_utf8", std::string("\xff", 1)); }, {"JSON part 'bad_utf8' cannot be written"});
  w.commit();
  expect_error([&] { w.commit(); }, {"committed twice"});
  expect_error([&] { w.write_json("b", {}); }, {"write_json after commit"});
}

// The manifest comes from disk: every field is checked, and no listed name may leave the
// directory.
TEST_F(Checkpoints, BadManifests) {
  write("ck", 1.0f, 1);
  const nlohmann::json good = nlohmann::json::parse(read_bytes(path("ck/manifest.json")));
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json m = good;
    edit(m);
    write_bytes(path("ck/manifest.json"), m.dump());
  };
  write_bytes(path("ck/manifest.json"), "{");
  expect_error([&] { read_checkpoint(path("ck")); }, {"manifest.json: not valid JSON"});
  with([](nlohmann::json& m) { m["format"] = "other"; });
  expect_error([&] { read_checkpoint(path("ck")); }, {"\"format\" is not \"trident-checkpoint\""});
  with([](nlohmann::json& m) { m["format_version"] = 2; });
  expect_error([&] { read_checkpoint(path("ck")); }, {"format version 2 is newer than this build reads (1)"});
  with([](nlohmann::json& m) { m["files"][0]["name"] = "../escape.json"; });
  expect_error([&] { read_checkpoint(path("ck")); }, {"bad file name '../escape.json'"});
  with([](nlohmann::json& m) { m["files"][0]["name"] = "notes.txt"; });
  expect_error([&] { read_checkpoint(path("ck")); }, {"bad file name 'notes.txt'"});
  with([](nlohmann::json& m) { m["files"][1] = m["files"][0]; });
  expect_error([&] { read_checkpoint(path("ck")); }, {"listed twice"});
  with([](nlohmann::json& m) { m["files"][0]["size"] = -1; });
  expect_error([&] { read_checkpoint(path("ck")); }, {"size of 'model.safetensors' must be a non-negative integer, got -1"});
  with([](nlohmann::json& m) { m["files"][0]["crc32c"] = 4294967296ull; });
  expect_error([&] { read_checkpoint(path("ck")); }, {"not a 32-bit value"});
  with([](nlohmann::json& m) { m.erase("files"); });
  expect_error([&] { read_checkpoint(path("ck")); }, {"\"files\" must be an array"});
  with([](nlohmann::json& m) { m = nlohmann::json::array(); });
  expect_error([&] { read_checkpoint(path("ck")); }, {"manifest.json: must be a JSON object"});
  // A JSON part that is not JSON (with a manifest that agrees about its bytes).
  write_bytes(path("ck/trainer.json"), "{oops");
  with([&](nlohmann::json& m) {
    for (auto& f : m["files"])
      if (f["name"] == "trainer.json") {
        f["size"] = 5;
        f["crc32c"] = crc32c_portable("{oops", 5);
      }
  });
  expect_error([&] { read_checkpoint(path("ck")); }, {"'trainer.json' is not valid JSON"});
}

}  // namespace
}  // namespace trident::nn
