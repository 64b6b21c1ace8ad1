// apps/device.h (--device) and apps/mfu.h (NOTE [MFU]): the parsing and refusals that need no GPU,
// the FLOP accounting (NOTE [MFU]) and peak table against hand-computed numbers, and the progress
// line's throughput accounting (NOTE [Throughput accounting]).
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "apps/device.h"
#include "apps/mfu.h"
#include "apps/throughput.h"
#include "core/factory.h"
#include "models/bert.h"
#include "models/gpt2.h"
#include "test_util.h"

namespace trident::apps {
namespace {

TEST(AppsDevice, ParsesCpuAndRefusesOtherNamesNamingTheFlag) {
  EXPECT_EQ(resolve_device("cpu"), kCPU);
  for (const char* bad : {"tpu", "cuda:", "cuda:-1", "gpu", ""})
    testing::expect_error([&] { resolve_device(bad); }, {"--device must be cpu, cuda or cuda:N, got '" + std::string(bad) + "'"});
  testing::expect_error([] { resolve_device("tpu", "--eval-device"); }, {"--eval-device must be cpu, cuda or cuda:N"});
}

TEST(AppsDevice, CudaWithoutAGpuSaysWhy) {
  if (cuda_is_available()) GTEST_SKIP() << "a GPU is present";
  const char* why = cuda_built() ? "no CUDA device found" : "built without CUDA";
  testing::expect_error([] { resolve_device("cuda"); }, {"--device cuda: ", why, "use --device cpu"});
  testing::expect_error([] { resolve_device("cuda:2"); }, {"--device cuda:2: ", why});
}

// NOTE [Rank to GPU]: the mapping, without a GPU (device counts are given).
TEST(AppsDevice, RankToGpuWithoutAnIndexTakesTheLocalRankModTheGpus) {
  const Device cuda = Device::cuda(0);  // what resolve_device returns for "cuda"
  EXPECT_EQ(map_rank_device(kCPU, false, {3, 4, "test"}, 8), kCPU);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(map_rank_device(cuda, false, {r, 8, "test"}, 8), Device::cuda(r));
  EXPECT_EQ(map_rank_device(cuda, false, {2, 4, "test"}, 8), Device::cuda(2));  // fewer ranks than GPUs
  // The local rank, not the world rank: rank 5 of the job is local rank 1 on the second node.
  EXPECT_EQ(map_rank_device(cuda, false, {1, 4, "test"}, 4), Device::cuda(1));
  // Size unknown (srun's SLURM_LOCALID, or the world rank): modulo the GPUs.
  EXPECT_EQ(map_rank_device(cuda, false, {5, 0, "SLURM_LOCALID"}, 4), Device::cuda(1));
  // One GPU visible per rank (CUDA_VISIBLE_DEVICES per rank): cuda:0 for everyone.
  EXPECT_EQ(map_rank_device(cuda, false, {3, 4, "test"}, 1), Device::cuda(0));
  testing::expect_error([&] { map_rank_device(cuda, false, {5, 8, "MPI_COMM_TYPE_SHARED"}, 4); },
                        {"--device cuda with 8 ranks on this node", "local rank 5", "MPI_COMM_TYPE_SHARED",
                         "4 visible GPUs", "share a GPU", "at most 4 ranks per node"});
}

TEST(AppsDevice, RankToGpuAnExplicitIndexWithSeveralRanksOnTheNodeIsRefused) {
  // The suspect: `--device cuda:1 --dp 4` under mpirun put every rank on cuda:1.
  testing::expect_error([] { map_rank_device(Device::cuda(1), true, {2, 4, "OMPI_COMM_WORLD_LOCAL_RANK"}, 8); },
                        {"--device cuda:1 with 4 ranks on this node", "local rank 2", "OMPI_COMM_WORLD_LOCAL_RANK",
                         "every one of them on cuda:1", "Use --device cuda", "CUDA_VISIBLE_DEVICES"});
  // Kept: alone on the node (also across nodes: one rank per node), size unknown, or one GPU per rank.
  EXPECT_EQ(map_rank_device(Device::cuda(1), true, {0, 1, "test"}, 8), Device::cuda(1));
  EXPECT_EQ(map_rank_device(Device::cuda(1), true, {3, 0, "world rank"}, 8), Device::cuda(1));
  EXPECT_EQ(map_rank_device(Device::cuda(0), true, {3, 4, "test"}, 1), Device::cuda(0));
}

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* name : kVars) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(name);
    }
    for (const auto& [name, value] : vars) setenv(name, value, 1);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name, value->c_str(), 1);
      } else {
        unsetenv(name);
      }
    }
  }

 private:
  static constexpr const char* kVars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALRANKID",
                                          "MPI_LOCALNRANKS", "SLURM_LOCALID"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST(AppsDevice, LocalRankFromTheLaunchersEnvironment) {
  {
    ScopedEnv env({});
    const LocalRank l = local_rank_from_env(6);
    EXPECT_EQ(l.rank, 6);
    EXPECT_EQ(l.size, 0);
    EXPECT_EQ(l.source, "world rank");
  }
  {
    ScopedEnv env({{"SLURM_LOCALID", "2"}});
    const LocalRank l = local_rank_from_env(6);
    EXPECT_EQ(l.rank, 2);
    EXPECT_EQ(l.size, 0);
    EXPECT_EQ(l.source, "SLURM_LOCALID");
  }
  {
    ScopedEnv env({{"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "4"}, {"SLURM_LOCALID", "2"}});
    const LocalRank l = local_rank_from_env(6);  // MPICH's before SLURM's
    EXPECT_EQ(l.rank, 1);
    EXPECT_EQ(l.size, 4);
    EXPECT_EQ(l.source, "MPI_LOCALRANKID");
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}, {"MPI_LOCALRANKID", "1"}});
    const LocalRank l = local_rank_from_env(6);  // OpenMPI's first
    EXPECT_EQ(l.rank, 3);
    EXPECT_EQ(l.size, 8);
    EXPECT_EQ(l.source, "OMPI_COMM_WORLD_LOCAL_RANK");
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_LOCAL_RANK", "x1"}});
    testing::expect_error([] { local_rank_from_env(0); },
                          {"OMPI_COMM_WORLD_LOCAL_RANK must be a non-negative integer, got \"x1\""});
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_LOCAL_RANK", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
    testing::expect_error([] { local_rank_from_env(0); },
                          {"OMPI_COMM_WORLD_LOCAL_RANK=4 is not below OMPI_COMM_WORLD_LOCAL_SIZE=4"});
  }
  // Without MPI initialized (a plain test process), node_local_rank is the environment's.
  {
    ScopedEnv env({{"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}});
    const LocalRank l = node_local_rank(0);
    EXPECT_EQ(l.rank, 1);
    EXPECT_EQ(l.source, "MPI_LOCALRANKID");
  }
}

TEST(AppsDevice, ToDeviceKeepsHostTensors) {
  const Tensor ids = arange(6.0, DType::I64);
  const models::Batch b{{"input_ids", ids}};
  const models::Batch c = b.to(kCPU);
  EXPECT_TRUE(c.at("input_ids").is_same(ids));
}

TEST(AppsMfu, TrainingFlopsCountsEachClassWhereItRuns) {
  // 6 (P S T + Q S + R M) + 12 L T d S T with P = 100, Q = 10, R = 50, L = 2, d = 8, S = 3, T = 5,
  // M = 4: 6 (1500 + 30 + 200) + 12 x 2 x 5 x 8 x 15 = 10380 + 14400, by hand.
  const FlopModel m{.layers = 2, .width = 8, .per_position = 100, .per_sequence = 10, .per_prediction = 50};
  EXPECT_DOUBLE_EQ(training_flops(m, 3, 5, 4), 24780.0);
  EXPECT_DOUBLE_EQ(training_flops(m, 0, 5, 0), 0.0);
  testing::expect_error([&] { training_flops(m, 3, 5, 16); }, {"predictions 16", "at most sequences x positions"});
  testing::expect_error([&] { training_flops(m, -1, 5, 0); }, {"sequences -1"});
}

TEST(AppsMfu, Gpt2FlopsLeaveOutOnlyThePositionTable) {
  // GPT-2, 1 layer, width 4, vocabulary 10, context 6. Parameters by hand: wte 10 x 4 = 40 (the
  // tied output layer: at every position), wpe 6 x 4 = 24 (a lookup: not counted), the block
  // ln_1 8 + c_attn 4 x 12 + 12 = 60 + c_proj 16 + 4 = 20 + ln_2 8 + c_fc 4 x 16 + 16 = 80 +
  // mlp.c_proj 16 x 4 + 4 = 68 = 244, ln_f 8: 292 at every position, 316 in all.
  models::GPT2Config c;
  c.n_layer = 1, c.n_head = 1, c.n_embd = 4, c.vocab_size = 10, c.n_positions = 6;
  Generator g(1);
  const models::GPT2LMHeadModel model(c, &g);
  ASSERT_EQ(model.num_parameters(), 316);
  const FlopModel m = gpt2_flop_model(model);
  EXPECT_EQ(m.per_position, 292);
  EXPECT_EQ(m.not_counted, 24);
  EXPECT_EQ(m.per_sequence + m.per_prediction, 0);
  // 2 windows of 6: 6 x 292 x 12 + 12 x 1 x 6 x 4 x 12 = 21024 + 3456.
  EXPECT_DOUBLE_EQ(training_flops(m, 2, 6, 0), 24480.0);
}

TEST(AppsMfu, BertFlopsCountTheMlmHeadAtTheMaskedPositionsOnly) {
  // BERT, 1 layer, width 4, intermediate 8, vocabulary 10, 6 positions, 2 segments. Parameters by
  // hand: word embeddings 40 (the tied decoder: at the masked positions), position 24 and segment
  // 8 embeddings (lookups), the embeddings' LayerNorm 8 and the layer (q, k, v 3 x 20, attention
  // output 20, LayerNorm 8, intermediate 4 x 8 + 8 = 40, output 8 x 4 + 4 = 36, LayerNorm 8: 172)
  // at every position: 180; the pooler 20 and the NSP head 2 x 4 + 2 = 10 once per sequence: 30;
  // the MLM transform 20 + its LayerNorm 8 + the decoder bias 10 + the decoder 40: 78. 320 in all.
  models::BertConfig c;
  c.vocab_size = 10, c.hidden_size = 4, c.num_hidden_layers = 1, c.num_attention_heads = 1;
  c.intermediate_size = 8, c.max_position_embeddings = 6, c.type_vocab_size = 2;
  Generator g(1);
  const models::BertForPreTraining model(c, &g);
  ASSERT_EQ(model.num_parameters(), 320);
  const FlopModel m = bert_flop_model(model);
  EXPECT_EQ(m.per_position, 180);
  EXPECT_EQ(m.per_sequence, 30);
  EXPECT_EQ(m.per_prediction, 78);
  EXPECT_EQ(m.not_counted, 32);
  // 2 sequences of 6, 3 masked: 6 (180 x 12 + 30 x 2 + 78 x 3) + 12 x 1 x 6 x 4 x 12
  // = 14724 + 3456 (6 N + 12 L T d per position, the old count, gave 26496).
  EXPECT_DOUBLE_EQ(training_flops(m, 2, 6, 3), 18180.0);
}

TEST(AppsMfu, PeakTableByTheRuntimesDeviceNames) {
  // Names as cudaGetDeviceProperties reports them; numbers from the data sheets (mfu.cpp), by hand:
  // the sparse tensor-core numbers halved.
  const auto h200 = peak_flops("NVIDIA H200", 9, 0);
  ASSERT_TRUE(h200.has_value());
  EXPECT_EQ(h200->gpu, "H200 SXM");
  EXPECT_DOUBLE_EQ(peak_for(*h200, "bf16", false), 989.4e12);
  EXPECT_DOUBLE_EQ(peak_for(*h200, "fp16", false), 989.4e12);
  EXPECT_DOUBLE_EQ(peak_for(*h200, "fp32", true), 494.7e12);
  EXPECT_DOUBLE_EQ(peak_for(*h200, "fp32", false), 66.9e12);
  const auto h100 = peak_flops("NVIDIA H100 80GB HBM3", 9, 0);  // the SXM part
  ASSERT_TRUE(h100.has_value());
  EXPECT_EQ(h100->gpu, "H100 SXM");
  EXPECT_DOUBLE_EQ(h100->bf16, 989.4e12);
  EXPECT_EQ(h100->sms, 132);
  const auto pcie = peak_flops("NVIDIA H100 PCIe", 9, 0);  // not the SXM part's number
  ASSERT_TRUE(pcie.has_value());
  EXPECT_DOUBLE_EQ(pcie->bf16, 756.5e12);
  EXPECT_EQ(pcie->sms, 114);
  ASSERT_TRUE(peak_flops("NVIDIA H100 NVL", 9, 0).has_value());
  EXPECT_DOUBLE_EQ(peak_flops("NVIDIA H100 NVL", 9, 0)->bf16, 835.5e12);
  ASSERT_TRUE(peak_flops("NVIDIA H200 NVL", 9, 0).has_value());
  EXPECT_DOUBLE_EQ(peak_flops("NVIDIA H200 NVL", 9, 0)->tf32, 417.5e12);
  for (const char* a100 : {"NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe"}) {
    const auto p = peak_flops(a100, 8, 0);
    ASSERT_TRUE(p.has_value()) << a100;
    EXPECT_DOUBLE_EQ(p->bf16, 312e12) << a100;
    EXPECT_DOUBLE_EQ(p->tf32, 156e12) << a100;
  }
  ASSERT_TRUE(peak_flops("NVIDIA L4", 8, 9).has_value());
  EXPECT_DOUBLE_EQ(peak_flops("NVIDIA L4", 8, 9)->bf16, 121e12);
  ASSERT_TRUE(peak_flops("NVIDIA L40S", 8, 9).has_value());
  EXPECT_DOUBLE_EQ(peak_flops("NVIDIA L40S", 8, 9)->bf16, 362.05e12);
  // Whole words: an L40 is neither an L4 nor an L40S, an A10G no A100, an H800 or H20 no H100/H200.
  for (const char* other : {"NVIDIA L40", "NVIDIA A10G", "NVIDIA H800", "NVIDIA H20", "NVIDIA GeForce RTX 4090", ""})
    EXPECT_FALSE(peak_flops(other, 8, 9).has_value() || peak_flops(other, 9, 0).has_value()) << other;
  EXPECT_FALSE(peak_flops("NVIDIA H200", 10, 0).has_value());  // a name with another architecture
}

TEST(AppsMfu, ResolvePeakSaysWhichPeakAndScalesToAMigInstance) {
  const GpuDescription h200{"NVIDIA H200", 9, 0, 132, 1980000};
  const Peak full = resolve_peak(h200, "bf16", false);
  EXPECT_DOUBLE_EQ(full.flops, 989.4e12);
  for (const char* part : {"989.4 TFLOP/s", "dense bf16/fp16", "H200 SXM", "NVIDIA data sheet", "132 SMs", "1980 MHz"})
    EXPECT_NE(full.source.find(part), std::string::npos) << part << " in " << full.source;
  EXPECT_DOUBLE_EQ(resolve_peak(h200, "fp32", true).flops, 494.7e12);
  EXPECT_NE(resolve_peak(h200, "fp32", true).source.find("dense TF32"), std::string::npos);
  EXPECT_DOUBLE_EQ(resolve_peak(h200, "fp32", false).flops, 66.9e12);
  // A MIG 1g instance: 16 of the 132 SMs, 989.4 x 16 / 132 = 119.927... TFLOP/s by hand.
  const Peak mig = resolve_peak({"NVIDIA H200 MIG 1g.18gb", 9, 0, 16, 1980000}, "bf16", false);
  EXPECT_NEAR(mig.flops, 119.9273e12, 1e8);
  EXPECT_NE(mig.source.find("16 of its 132 SMs"), std::string::npos) << mig.source;
  // The override wins over the table and says where it came from.
  const Peak over = resolve_peak(h200, "bf16", false, 500, "TRIDENT_PEAK_TFLOPS");
  EXPECT_DOUBLE_EQ(over.flops, 500e12);
  EXPECT_NE(over.source.find("500.0 TFLOP/s from TRIDENT_PEAK_TFLOPS"), std::string::npos) << over.source;
  // An unknown GPU: no peak, and the MFU says so instead of a number.
  const Peak unknown = resolve_peak({"NVIDIA GeForce RTX 4090", 8, 9, 128, 2520000}, "bf16", false);
  EXPECT_FALSE(unknown.known());
  EXPECT_EQ(mfu_text(1e15, unknown), "n/a (unknown peak; set TRIDENT_PEAK_TFLOPS)");
  EXPECT_NE(unknown.source.find("NVIDIA GeForce RTX 4090"), std::string::npos);
  EXPECT_EQ(mfu_text(494.7e12, full), "50.0%");
  // Four GPUs (say --dp 2 --pp 2): the run's FLOPs over four peaks.
  const Peak four = run_peak(full, 4);
  EXPECT_DOUBLE_EQ(four.flops, 4 * full.flops);
  EXPECT_EQ(four.source, "4 x " + full.source);
  EXPECT_EQ(mfu_text(4 * 494.7e12, four), "50.0%");
  EXPECT_EQ(run_peak(full, 1).source, full.source);
  EXPECT_FALSE(run_peak(unknown, 4).known());
  const Peak known_by_override = resolve_peak({"NVIDIA GeForce RTX 4090", 8, 9, 128, 2520000}, "bf16", false, 165.2, "--peak-tflops");
  EXPECT_DOUBLE_EQ(known_by_override.flops, 165.2e12);
}

TEST(AppsMfu, ParsesThePeakOverride) {
  EXPECT_EQ(parse_peak_tflops(nullptr, "TRIDENT_PEAK_TFLOPS"), 0.0);
  EXPECT_EQ(parse_peak_tflops("", "TRIDENT_PEAK_TFLOPS"), 0.0);
  EXPECT_DOUBLE_EQ(parse_peak_tflops("989.4", "TRIDENT_PEAK_TFLOPS"), 989.4);
  for (const char* bad : {"0", "-3", "fast", "989x", "inf", "nan"})
    testing::expect_error([&] { parse_peak_tflops(bad, "TRIDENT_PEAK_TFLOPS"); },
                          {"TRIDENT_PEAK_TFLOPS must be a positive number of TFLOP/s", "got '" + std::string(bad) + "'"});
}

TEST(AppsThroughput, EvaluationAndCheckpointTimeIsTakenOutOfTheInterval) {
  ThroughputMeter m;
  // 10 s of wall clock holding 4 s of evaluation and 1 s of checkpoint: 6000 tokens and 3e12
  // FLOPs over the 5 s of training are 1200 tokens/s and 6e11 FLOP/s (not 600 and 3e11).
  m.add(4000, 2e12);
  m.exclude(4.0);
  m.add(2000, 1e12);
  m.exclude(1.0);
  const ThroughputMeter::Rates r = m.take(10.0);
  EXPECT_DOUBLE_EQ(r.train_seconds, 5.0);
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 1200.0);
  EXPECT_DOUBLE_EQ(r.flops_per_s, 6e11);
  // The next interval starts from nothing: no pause, 500 tokens in 2 s.
  m.add(500, 0);
  const ThroughputMeter::Rates next = m.take(2.0);
  EXPECT_DOUBLE_EQ(next.tokens_per_s, 250.0);
  EXPECT_DOUBLE_EQ(next.flops_per_s, 0.0);
  // An interval that was all pause (clock rounding can make the pause a hair longer): no rate, no
  // division by zero or a negative time.
  m.add(100, 1e9);
  m.exclude(3.0000001);
  const ThroughputMeter::Rates none = m.take(3.0);
  EXPECT_EQ(none.train_seconds, 0.0);
  EXPECT_EQ(none.tokens_per_s, 0.0);
  testing::expect_error([&] { m.exclude(-1.0); }, {"ThroughputMeter::exclude: -1 s is negative"});
}

TEST(AppsThroughput, EtaIsWallClockPerStepTimesTheStepsLeft) {
  // 30 s for 10 steps, evaluations included (they recur in the steps left): 90 s for 30 more.
  EXPECT_DOUBLE_EQ(eta_seconds(30.0, 10, 30), 90.0);
  EXPECT_DOUBLE_EQ(eta_seconds(30.0, 10, 0), 0.0);
  EXPECT_DOUBLE_EQ(eta_seconds(0.0, 0, 100), 0.0);
}

}  // namespace
}  // namespace trident::apps
