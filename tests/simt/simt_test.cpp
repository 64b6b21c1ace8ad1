// The SIMT emulator itself (tests/simt/simt.h): thread and block coordinates, shuffles against
// the CUDA Programming Guide's definitions, mma.sync m16n8k16 (through the fragment helpers of
// ops/cuda/attention_mma.cuh) against a plain matrix product, and the errors it must give
// instead of hanging or passing: divergent collectives, an exited lane in a mask, writes past
// the dynamic shared memory, __trap. A kernel that races on shared memory gives different
// results in the two thread orders; with the barrier it does not.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "ops/cuda/attention_mma.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::string error_of(const simt::Launch& cfg, const std::function<void()>& body) {
  try {
    simt::launch(cfg, body);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Simt, EveryThreadOfEveryBlockRunsOnceWithItsCoordinates) {
  const dim3 grid(3, 2), block(8, 4, 2);
  std::vector<int> seen(3 * 2 * 64, 0);
  simt::launch({grid, block}, [&] {
    EXPECT_EQ(blockDim.x, 8u);
    EXPECT_EQ(gridDim.y, 2u);
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned b = blockIdx.x + gridDim.x * blockIdx.y;
    ++seen[b * 64 + t];
  });
  for (int i = 0; i < static_cast<int>(seen.size()); ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << i;
}

TEST(Simt, ShufflesFollowTheProgrammingGuide) {
  // Two warps; every lane shuffles its own id by each kind, full width and width 8.
  std::vector<int> xor16(64), down3(64), up5w8(64), idx7w8(64), xor9w8(64), idx40(64);
  simt::launch({dim3(1), dim3(64)}, [&] {
    const int id = static_cast<int>(threadIdx.x);
    xor16[id] = __shfl_xor_sync(0xffffffffu, id, 16);
    down3[id] = __shfl_down_sync(0xffffffffu, id, 3);
    up5w8[id] = __shfl_up_sync(0xffffffffu, id, 5, 8);
    idx7w8[id] = __shfl_sync(0xffffffffu, id, 7, 8);
    xor9w8[id] = __shfl_xor_sync(0xffffffffu, id, 9, 8);
    idx40[id] = __shfl_sync(0xffffffffu, id, 40);  // srcLane modulo width: lane 8
  });
  for (int id = 0; id < 64; ++id) {
    const int w = id / 32 * 32, l = id % 32;
    EXPECT_EQ(xor16[id], w + (l ^ 16));
    EXPECT_EQ(down3[id], l + 3 < 32 ? id + 3 : id);      // past the warp: its own value
    EXPECT_EQ(up5w8[id], l % 8 >= 5 ? id - 5 : id);      // before its segment of 8: its own value
    EXPECT_EQ(idx7w8[id], w + l / 8 * 8 + 7);            // lane 7 of its segment
    const int x = l ^ 9;                                  // 9 = 8 + 1: the next segment or the previous
    EXPECT_EQ(xor9w8[id], x / 8 > l / 8 ? id : w + x);   // later segments give the lane's own value
    EXPECT_EQ(idx40[id], w + 8);
  }
}

TEST(Simt, BallotAnyAllAndSubWarpMasks) {
  std::vector<unsigned> bal(32);
  std::vector<int> any(32), all(32), half(32);
  simt::launch({dim3(1), dim3(32)}, [&] {
    const int l = static_cast<int>(threadIdx.x);
    bal[l] = __ballot_sync(0xffffffffu, l % 3 == 0);
    any[l] = __any_sync(0xffffffffu, l == 31);
    all[l] = __all_sync(0xffffffffu, l < 31);
    // The lower half shuffles among itself while the upper half does something else.
    if (l < 16) half[l] = __shfl_xor_sync(0x0000ffffu, l, 1);
    else half[l] = __shfl_down_sync(0xffff0000u, l, 1, 16);
  });
  unsigned expect = 0;
  for (int l = 0; l < 32; l += 3) expect |= 1u << l;
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(bal[l], expect);
    EXPECT_EQ(any[l], 1);
    EXPECT_EQ(all[l], 0);
    EXPECT_EQ(half[l], l < 16 ? (l ^ 1) : (l < 31 ? l + 1 : l));
  }
}

// One warp computes D = A B + C for random A (16 x 16), B (16 x 8) and C with the attention
// kernels' fragment helpers: A from a row-major matrix, B from its transpose stored by rows.
template <typename M>
void check_mma(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<uint16_t> A(16 * 16), Bt(8 * 16);
  std::vector<float> Af(16 * 16), Bf(16 * 8), C(16 * 8), D(16 * 8);
  const auto round16 = [](float x, uint16_t& bits) {
    if constexpr (std::is_same_v<M, __nv_bfloat16>) {
      const __nv_bfloat16 h = __float2bfloat16_rn(x);
      std::memcpy(&bits, &h, 2);
      return __bfloat162float(h);
    } else {
      const __half h = __float2half_rn(x);
      std::memcpy(&bits, &h, 2);
      return __half2float(h);
    }
  };
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) Af[i * 16 + k] = round16(u(rng), A[i * 16 + k]);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) Bf[k * 8 + n] = round16(u(rng), Bt[n * 16 + k]);
  for (float& c : C) c = u(rng);
  simt::launch({dim3(1), dim3(32)}, [&] {
    const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
    uint32_t a[4];
    trident::cuda::attn::mma::load_a(a, A.data(), 16, g, t);
    float d[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
    trident::cuda::attn::mma::mma_bt<M>(d, a, Bt.data(), 16, g, t);
    D[g * 8 + 2 * t] = d[0];
    D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2];
    D[(g + 8) * 8 + 2 * t + 1] = d[3];
  });
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n) {
      double s = C[i * 8 + n];
      for (int k = 0; k < 16; ++k) s += static_cast<double>(Af[i * 16 + k]) * Bf[k * 8 + n];
      EXPECT_NEAR(D[i * 8 + n], s, 1e-5 * (1 + std::abs(s))) << "row " << i << " col " << n;
    }
  // acc_to_a: the accumulators of two 16 x 8 products are the A fragment of the 16 x 16 block.
  std::vector<float> back(16 * 16);
  simt::launch({dim3(1), dim3(32)}, [&] {
    const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
    float lo[4], hi[4];
    for (int e = 0; e < 4; ++e) {
      const int row = g + (e < 2 ? 0 : 8), col = 2 * t + (e & 1);
      lo[e] = Af[row * 16 + col];
      hi[e] = Af[row * 16 + 8 + col];
    }
    uint32_t a[4];
    trident::cuda::attn::mma::acc_to_a<M>(a, lo, hi);
    // a times the identity (as B^T rows) is A again.
    std::vector<uint16_t> eye(8 * 16, 0);
    for (int half = 0; half < 2; ++half) {
      uint16_t one;
      round16(1.f, one);
      std::fill(eye.begin(), eye.end(), uint16_t{0});
      for (int n = 0; n < 8; ++n) eye[static_cast<size_t>(n * 16 + 8 * half + n)] = one;
      float d[4] = {0, 0, 0, 0};
      trident::cuda::attn::mma::mma_bt<M>(d, a, eye.data(), 16, g, t);
      back[g * 16 + 8 * half + 2 * t] = d[0];
      back[g * 16 + 8 * half + 2 * t + 1] = d[1];
      back[(g + 8) * 16 + 8 * half + 2 * t] = d[2];
      back[(g + 8) * 16 + 8 * half + 2 * t + 1] = d[3];
    }
  });
  for (int i = 0; i < 256; ++i) EXPECT_EQ(back[static_cast<size_t>(i)], Af[static_cast<size_t>(i)]) << i;
}

TEST(Simt, MmaM16n8k16MatchesAMatrixProduct) {
  check_mma<__half>(1);
  check_mma<__nv_bfloat16>(2);
}

TEST(Simt, DivergentBarriersAndCollectivesAreErrorsNamingTheThreads) {
  const std::string e = error_of({dim3(1), dim3(64)}, [&] {
    if (threadIdx.x < 32) __syncthreads();
  });
  EXPECT_NE(e.find("[warp 1 lane 0] exited without reaching it"), std::string::npos) << e;
  // Warp 1 split between the barrier and a shuffle of the whole warp.
  const std::string e2 = error_of({dim3(1), dim3(64)}, [&] {
    if (threadIdx.x < 40) __syncthreads();
    else (void)__shfl_xor_sync(0xffffffffu, 1, 1);
  });
  EXPECT_NE(e2.find("[warp 1 lane 8] waits at __shfl_xor_sync (mask 0xffffffff), but"), std::string::npos) << e2;
  EXPECT_NE(e2.find("[warp 1 lane 0], named by its mask, waits at __syncthreads"), std::string::npos) << e2;
}

TEST(Simt, ACollectiveWhoseMaskNamesAnExitedOrAbsentLaneIsAnError) {
  const std::string e = error_of({dim3(1), dim3(32)}, [&] {
    if (threadIdx.x == 5) return;
    (void)__shfl_xor_sync(0xffffffffu, 1.f, 1);
  });
  EXPECT_NE(e.find("lane 5], named by its mask, exited"), std::string::npos) << e;
  const std::string e2 = error_of({dim3(1), dim3(16)}, [&] { (void)__shfl_xor_sync(0xffffffffu, 1.f, 1); });
  EXPECT_NE(e2.find("does not have"), std::string::npos) << e2;
  const std::string e3 = error_of({dim3(1), dim3(32)}, [&] {
    if (threadIdx.x % 2) (void)__shfl_xor_sync(0xffffffffu, 1.f, 1);
    else (void)__ballot_sync(0xffffffffu, 1);
  });
  EXPECT_NE(e3.find("divergent warp"), std::string::npos) << e3;
}

TEST(Simt, WritesPastTheDynamicSharedMemoryAndTrapsAreErrors) {
  const std::string e = error_of({dim3(2), dim3(32), 128}, [&] {
    TRIDENT_DYNAMIC_SHARED(float, s);
    s[threadIdx.x + (blockIdx.x == 1 ? 1 : 0)] = 1.f;  // block 1 writes float 32: bytes 128..131
  });
  EXPECT_NE(e.find("block (1,0,0) wrote byte 128"), std::string::npos) << e;
  const std::string e2 = error_of({dim3(1), dim3(32)}, [&] {
    if (threadIdx.x == 3) __trap();
  });
  EXPECT_NE(e2.find("__trap"), std::string::npos) << e2;
  const std::string e3 = error_of({dim3(1), dim3(32)}, [&] {
    if (threadIdx.x == 7) throw std::runtime_error("thrown by thread 7");
  });
  EXPECT_EQ(e3, "thrown by thread 7");
}

TEST(Simt, DynamicSharedMemoryStartsAsNaN) {
  float seen = 0.f;
  simt::launch({dim3(1), dim3(1), 64}, [&] {
    TRIDENT_DYNAMIC_SHARED(float, s);
    seen = s[15];
  });
  EXPECT_TRUE(std::isnan(seen));
}

TEST(Simt, StaticSharedMemoryStartsAsNaNInEveryBlock) {
  // Block 0 writes its shared variable; block 1 finds garbage there (NaN), not block 0's value.
  std::vector<float> seen(2, 0.f);
  simt::launch({dim3(2), dim3(32)}, [&] {
    __shared__ float s[2];
    if (threadIdx.x == 0) {
      seen[blockIdx.x] = s[1];
      s[1] = 5.f;
    }
  });
  EXPECT_TRUE(std::isnan(seen[0]));
  EXPECT_TRUE(std::isnan(seen[1]));
}

// Warp 1 reads what warp 0 wrote to shared memory, with or without a barrier in between.
std::vector<float> exchange(bool barrier, simt::Order order) {
  std::vector<float> out(64);
  simt::launch({dim3(1), dim3(64), 64 * sizeof(float), order}, [&] {
    TRIDENT_DYNAMIC_SHARED(float, s);
    const int i = static_cast<int>(threadIdx.x);
    s[i] = static_cast<float>(i);
    if (barrier) __syncthreads();
    out[static_cast<size_t>(i)] = s[(i + 32) % 64];
  });
  return out;
}

TEST(Simt, ARaceGivesDifferentResultsInTheTwoOrders) {
  const std::vector<float> fb = exchange(true, simt::Order::Forward), rb = exchange(true, simt::Order::Reverse);
  EXPECT_EQ(fb, rb);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(fb[static_cast<size_t>(i)], static_cast<float>((i + 32) % 64));
  // Without the barrier the threads that run first read what the others have not written yet
  // (the NaN the shared memory starts as): the first half in one order, the second in the other.
  const std::vector<float> f = exchange(false, simt::Order::Forward), r = exchange(false, simt::Order::Reverse);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(std::isnan(f[static_cast<size_t>(i)]), i < 32) << i;
    EXPECT_EQ(std::isnan(r[static_cast<size_t>(i)]), i >= 32) << i;
  }
}

}  // namespace
