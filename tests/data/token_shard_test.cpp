// llm.c token shards (NOTE [Token shards]) and language-model windows (NOTE [LM windows]).
// Files are checked byte by byte against the format as llm.c's data_common.py defines it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "data/data_test_util.h"
#include "data/lm_dataset.h"
#include "data/token_shard.h"
#include "test_util.h"

namespace trident::testing {
namespace {

using data::Example;
using data::LmDataset;
using data::TokenShard;
using data::TokenShardWriter;

// A shard built by hand: header ints then raw little-endian bytes of the tokens.
std::string raw_shard(int32_t magic, int32_t version, int32_t count, const std::vector<uint16_t>& tokens) {
  std::string s(1024, '\0');
  const int32_t h[3] = {magic, version, count};
  std::memcpy(s.data(), h, sizeof(h));
  s.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return s;
}

TEST(TokenShard, WritesLlmcFormatAndReadsBack) {
  ScratchDir dir("shard");
  const std::string path = dir.file("a.bin");
  const std::vector<int32_t> tokens = {0, 1, 50256, 65535, 7, 7};
  data::write_token_shard(path, tokens);
  const std::string bytes = read_file_for_test(path);
  ASSERT_EQ(bytes.size(), 1024u + 12u);
  EXPECT_EQ(bytes, raw_shard(20240520, 1, 6, {0, 1, 50256, 65535, 7, 7}));
  const TokenShard shard(path);
  EXPECT_EQ(shard.size(), 6);
  EXPECT_EQ(std::vector<uint16_t>(shard.tokens().begin(), shard.tokens().end()), (std::vector<uint16_t>{0, 1, 50256, 65535, 7, 7}));
  EXPECT_EQ(shard.path(), path);

  // A file written by hand in llm.c's format reads the same.
  const std::string hand = dir.file("hand.bin");
  write_bytes(hand, raw_shard(20240520, 1, 3, {10, 20, 30}));
  const TokenShard h(hand);
  EXPECT_EQ(h.size(), 3);
  EXPECT_EQ(h[0], 10);
  EXPECT_EQ(h[2], 30);

  // No tokens at all is a valid shard.
  data::write_token_shard(dir.file("empty.bin"), std::vector<int32_t>{});
  EXPECT_EQ(TokenShard(dir.file("empty.bin")).size(), 0);
}

TEST(TokenShard, StreamingWriterIsAtomic) {
  ScratchDir dir("shard");
  const std::string path = dir.file("big.bin");
  std::vector<uint16_t> expect;
  {
    TokenShardWriter w(path);
    std::mt19937 rng(3);
    // 2.5 M tokens in uneven pieces crosses the writer's 1 M-token buffer.
    for (int piece = 0; piece < 25; ++piece) {
      std::vector<int32_t> chunk(static_cast<size_t>(50000 + piece * 3000));
      for (auto& t : chunk) t = static_cast<int32_t>(rng() % 65536);
      w.write(chunk);
      expect.insert(expect.end(), chunk.begin(), chunk.end());
      EXPECT_FALSE(std::filesystem::exists(path)) << "visible before close()";
    }
    EXPECT_EQ(w.count(), static_cast<int64_t>(expect.size()));
    w.close();
  }
  const TokenShard s(path);
  ASSERT_EQ(s.size(), static_cast<int64_t>(expect.size()));
  EXPECT_TRUE(std::equal(expect.begin(), expect.end(), s.data()));

  // Abandoned writers leave nothing behind and never touch an existing file of that name.
  { TokenShardWriter w(path); w.write(std::vector<int32_t>{1, 2, 3}); }
  { TokenShardWriter w(dir.file("other.bin")); }
  EXPECT_EQ(TokenShard(path).size(), static_cast<int64_t>(expect.size()));
  EXPECT_FALSE(std::filesystem::exists(dir.file("other.bin")));
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1) << "temporary files left behind";
}

TEST(TokenShard, TokensMustFitUint16) {
  ScratchDir dir("shard");
  expect_error([&] { data::write_token_shard(dir.file("x.bin"), std::vector<int32_t>{5, 65536}); }, {"x.bin", "token 65536", "index 1"});
  expect_error([&] { data::write_token_shard(dir.file("x.bin"), std::vector<int32_t>{-1}); }, {"token -1", "index 0"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.bin")));
}

TEST(TokenShard, BadFilesNameTheFileAndTheProblem) {
  ScratchDir dir("shard");
  const std::string p = dir.file("bad.bin");
  expect_error([&] { TokenShard(dir.file("absent.bin")); }, {"absent.bin", "cannot open"});
  write_bytes(p, std::string(100, '\0'));
  expect_error([&] { TokenShard{p}; }, {"bad.bin", "100 bytes", "shorter than the 1024-byte header"});
  write_bytes(p, raw_shard(20240521, 1, 2, {1, 2}));
  expect_error([&] { TokenShard{p}; }, {"bad.bin", "magic number 20240521", "expected 20240520"});
  write_bytes(p, raw_shard(20240520, 2, 2, {1, 2}));
  expect_error([&] { TokenShard{p}; }, {"bad.bin", "version 2", "expected 1"});
  write_bytes(p, raw_shard(20240520, 1, 5, {1, 2}));
  expect_error([&] { TokenShard{p}; }, {"bad.bin", "truncated", "5 tokens", "only 4 bytes"});
  write_bytes(p, raw_shard(20240520, 1, 1, {1, 2}));
  expect_error([&] { TokenShard{p}; }, {"bad.bin", "disagrees with the file size", "1 tokens", "4 bytes follow"});
  write_bytes(p, raw_shard(20240520, 1, 2, {1, 2}) + "x");  // an odd byte after the tokens
  expect_error([&] { TokenShard{p}; }, {"bad.bin", "disagrees with the file size", "5 bytes follow"});
  write_bytes(p, raw_shard(20240520, 1, -3, {}));
  expect_error([&] { TokenShard{p}; }, {"bad.bin", "negative token count -3"});
}

TEST(TokenShard, GlobFilesSortsAndComplains) {
  ScratchDir dir("shard");
  for (const char* n : {"t_000002.bin", "t_000000.bin", "t_000001.bin", "v_000000.bin"}) data::write_token_shard(dir.file(n), std::vector<int32_t>{1});
  const auto files = data::glob_files(dir.file("t_*.bin"));
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], dir.file("t_000000.bin"));
  EXPECT_EQ(files[2], dir.file("t_000002.bin"));
  expect_error([&] { data::glob_files(dir.file("nothing_*.bin")); }, {"nothing_*.bin"});
}

// ---- LM windows ----

std::string shard_of_range(const ScratchDir& dir, const std::string& name, int32_t first, int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  data::write_token_shard(dir.file(name), t);
  return dir.file(name);
}

TEST(LmDataset, NonOverlappingWindowsOfTPlusOne) {
  ScratchDir dir("lm");
  // 23 tokens, T = 5: (23 - 1) / 5 = 4 windows; tokens 21 and 22 are the unused tail.
  LmDataset ds({shard_of_range(dir, "a.bin", 0, 23)}, 5);
  EXPECT_EQ(ds.size(), 4);
  EXPECT_EQ(ds.num_tokens(), 23);
  Generator gen(0);
  for (int64_t w = 0; w < 4; ++w) {
    const Example ex = ds.get(w, gen);
    ASSERT_EQ(ex.size(), 2u);
    EXPECT_EQ(ex[0].dtype(), DType::I64);
    EXPECT_EQ(ex[0].sizes(), (Shape{5}));
    std::vector<int64_t> in(5), tg(5);
    std::iota(in.begin(), in.end(), 5 * w);
    std::iota(tg.begin(), tg.end(), 5 * w + 1);
    EXPECT_EQ(ex[0].to_vector<int64_t>(), in) << "window " << w;
    EXPECT_EQ(ex[1].to_vector<int64_t>(), tg) << "window " << w;
  }
  expect_error([&] { ds.get(4, gen); }, {"index 4", "[0, 4)"});
  expect_error([&] { ds.get(-1, gen); }, {"index -1"});
  expect_error([&] { LmDataset({dir.file("a.bin")}, 0); }, {"seq_len", "0"});
  expect_error([&] { LmDataset({dir.file("absent.bin")}, 4); }, {"absent.bin"});
}

TEST(LmDataset, WindowsNeverCrossShards) {
  ScratchDir dir("lm");
  // T = 4. Shard a: 9 tokens -> 2 windows (exactly, no tail). Shard b: 4 tokens -> none (a
  // window needs T + 1). Shard c: 5 tokens -> 1. Shard d: 12 tokens -> 2 (tokens 10, 11 unused).
  LmDataset ds({shard_of_range(dir, "a.bin", 0, 9), shard_of_range(dir, "b.bin", 100, 4), shard_of_range(dir, "c.bin", 200, 5),
                shard_of_range(dir, "d.bin", 300, 12)},
               4);
  ASSERT_EQ(ds.size(), 5);
  Generator gen(0);
  const std::vector<int64_t> first_input = {0, 4, 200, 300, 304};
  for (int64_t i = 0; i < 5; ++i) {
    const Example ex = ds.get(i, gen);
    const auto in = ex[0].to_vector<int64_t>(), tg = ex[1].to_vector<int64_t>();
    EXPECT_EQ(in, (std::vector<int64_t>{first_input[i], first_input[i] + 1, first_input[i] + 2, first_input[i] + 3})) << i;
    EXPECT_EQ(tg.back(), first_input[i] + 4) << i;
  }
  // The generator plays no part: the same index is the same window.
  Generator other(99);
  EXPECT_EQ(ds.get(3, other)[0].to_vector<int64_t>(), ds.get(3, gen)[0].to_vector<int64_t>());
  // Batches collate to [B, T].
  const Example batch = data::collate({ds.get(0, gen), ds.get(4, gen)});
  EXPECT_EQ(batch[0].sizes(), (Shape{2, 4}));
  EXPECT_EQ(batch[1].sizes(), (Shape{2, 4}));
}

}  // namespace
}  // namespace trident::testing
