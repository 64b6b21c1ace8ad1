// apps/device.h (--device) and apps/mfu.h (NOTE [MFU]): the parsing and refusals that need no GPU,
// and the FLOP accounting and peak table against hand-computed numbers.
#include <gtest/gtest.h>

#include "apps/device.h"
#include "apps/mfu.h"
#include "core/factory.h"
#include "test_util.h"

namespace trident::apps {
namespace {

TEST(AppsDevice, ParsesCpuAndRefusesOtherNamesNamingTheFlag) {
  EXPECT_EQ(resolve_device("cpu"), kCPU);
  EXPECT_EQ(resolve_device("cpu", /*parallel=*/true), kCPU);  // parallel CPU runs are fine
  for (const char* bad : {"tpu", "cuda:", "cuda:-1", "gpu", ""})
    testing::expect_error([&] { resolve_device(bad); }, {"--device must be cpu, cuda or cuda:N, got '" + std::string(bad) + "'"});
  testing::expect_error([] { resolve_device("tpu", false, "--eval-device"); }, {"--eval-device must be cpu, cuda or cuda:N"});
}

TEST(AppsDevice, CudaWithoutAGpuSaysWhy) {
  if (cuda_is_available()) GTEST_SKIP() << "a GPU is present";
  const char* why = cuda_built() ? "no CUDA device found" : "built without CUDA";
  testing::expect_error([] { resolve_device("cuda"); }, {"--device cuda: ", why, "use --device cpu"});
  testing::expect_error([] { resolve_device("cuda:2", true); }, {"--device cuda:2: ", why});
}

TEST(AppsDevice, ToDeviceKeepsHostTensors) {
  const Tensor ids = arange(6.0, DType::I64);
  const models::Batch b{{"input_ids", ids}};
  const models::Batch c = to_device(b, kCPU);
  EXPECT_TRUE(c.at("input_ids").is_same(ids));
}

TEST(AppsMfu, FlopsPerTokenIsSixNPlusTwelveLTd) {
  // GPT-2 124M at context 1024: 6 x 124439808 + 12 x 12 x 1024 x 768, by hand.
  EXPECT_DOUBLE_EQ(transformer_flops_per_token(124439808, 12, 1024, 768), 746638848.0 + 113246208.0);
}

TEST(AppsMfu, PeakTableByNameAndComputeCapability) {
  const auto h200 = peak_flops("NVIDIA H200", 9, 0);
  ASSERT_TRUE(h200.has_value());
  EXPECT_DOUBLE_EQ(peak_for(*h200, "bf16", false), 989.4e12);
  EXPECT_DOUBLE_EQ(peak_for(*h200, "fp16", false), 989.4e12);
  EXPECT_DOUBLE_EQ(peak_for(*h200, "fp32", true), 494.7e12);
  EXPECT_DOUBLE_EQ(peak_for(*h200, "fp32", false), 66.9e12);
  const auto pcie = peak_flops("NVIDIA H100 PCIe", 9, 0);  // not the SXM part's number
  ASSERT_TRUE(pcie.has_value());
  EXPECT_DOUBLE_EQ(pcie->bf16, 756.5e12);
  const auto a100 = peak_flops("NVIDIA A100-SXM4-80GB", 8, 0);
  ASSERT_TRUE(a100.has_value());
  EXPECT_DOUBLE_EQ(a100->bf16, 312e12);
  EXPECT_FALSE(peak_flops("NVIDIA GeForce RTX 4090", 8, 9).has_value());
  EXPECT_FALSE(peak_flops("NVIDIA H200", 10, 0).has_value());  // a name with another architecture
}

}  // namespace
}  // namespace trident::apps
