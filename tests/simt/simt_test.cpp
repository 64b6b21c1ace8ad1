// The SIMT emulator itself (tests/simt/simt.h): thread and block coordinates, shuffles against
// the CUDA Programming Guide's definitions, ldmatrix and mma.sync m16n8k16 (through the fragment
// helpers of ops/cuda/attention_mma.cuh) against the PTX ISA's layouts and a plain matrix
// product, cp.async's landing and zero fill, and the errors it must give
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

namespace mma = trident::cuda::attn::mma;

template <typename M>
uint16_t bits16(float x, float* rounded) {
  uint16_t bits;
  if constexpr (std::is_same_v<M, __nv_bfloat16>) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x);
    std::memcpy(&bits, &h, 2);
    *rounded = __bfloat162float(h);
  } else {
    const __half h = __float2half_rn(x);
    std::memcpy(&bits, &h, 2);
    *rounded = __half2float(h);
  }
  return bits;
}

// The PTX ISA's fragment layouts written out (attention_mma.cuh's header comment), as 32-bit
// words of a row-major matrix with row stride ld: what the ldmatrix helpers must return.
uint32_t word(const std::vector<uint16_t>& m, int ld, int row, int col) {
  return static_cast<uint32_t>(m[static_cast<size_t>(row * ld + col)]) |
         static_cast<uint32_t>(m[static_cast<size_t>(row * ld + col + 1)]) << 16;
}

// One warp computes D = A B + C for random A (16 x 16), B (16 x 8 and a second 16 x 8 beside
// it) and C with the attention kernels' fragment helpers, the matrices in dynamic shared memory
// (ldmatrix reads nothing else): A row-major, B both as it is (rows k, read transposed by
// ldmatrix_b) and transposed (rows n, ldmatrix_bt). The fragments equal the ISA's layouts word
// for word and the products equal a plain matrix product.
template <typename M>
void check_mma(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  constexpr int kLd = 24;  // a padded row stride, as in the kernels (a multiple of 8)
  std::vector<uint16_t> A(16 * kLd), B(16 * kLd), Bt(16 * kLd);  // B: [k][n], n < 16; Bt: [n][k]
  std::vector<float> Af(16 * 16), Bf(16 * 16), C(16 * 16), D(16 * 16);
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) A[static_cast<size_t>(i * kLd + k)] = bits16<M>(u(rng), &Af[static_cast<size_t>(i * 16 + k)]);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n) {
      B[static_cast<size_t>(k * kLd + n)] = bits16<M>(u(rng), &Bf[static_cast<size_t>(k * 16 + n)]);
      Bt[static_cast<size_t>(n * kLd + k)] = B[static_cast<size_t>(k * kLd + n)];
    }
  for (float& c : C) c = u(rng);
  constexpr size_t kBytes = 3 * 16 * kLd * sizeof(uint16_t);
  int mismatches = 0;
  simt::launch({dim3(1), dim3(32), kBytes}, [&] {
    const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
    TRIDENT_DYNAMIC_SHARED(uint16_t, sh);
    uint16_t* sA = sh;
    uint16_t* sB = sA + 16 * kLd;
    uint16_t* sBt = sB + 16 * kLd;
    for (int i = lane; i < 16 * kLd; i += 32) {
      sA[i] = A[static_cast<size_t>(i)];
      sB[i] = B[static_cast<size_t>(i)];
      sBt[i] = Bt[static_cast<size_t>(i)];
    }
    __syncwarp();
    uint32_t a[4], b[4], bt[4];
    mma::ldmatrix_a(a, sA, kLd, lane);
    mma::ldmatrix_b(b, sB, kLd, lane);
    mma::ldmatrix_bt(bt, sBt, kLd, lane);
    const uint32_t want_a[4] = {word(A, kLd, g, 2 * t), word(A, kLd, g + 8, 2 * t), word(A, kLd, g, 2 * t + 8),
                                word(A, kLd, g + 8, 2 * t + 8)};
    // b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g] of each 16 x 8 half: Bt's rows hold them as words.
    const uint32_t want_b[4] = {word(Bt, kLd, g, 2 * t), word(Bt, kLd, g, 2 * t + 8), word(Bt, kLd, g + 8, 2 * t),
                                word(Bt, kLd, g + 8, 2 * t + 8)};
    for (int r = 0; r < 4; ++r) mismatches += (a[r] != want_a[r]) + (b[r] != want_b[r]) + (bt[r] != want_b[r]);
    for (int half = 0; half < 2; ++half) {
      const int c0 = 8 * half;
      float d[4] = {C[static_cast<size_t>(g * 16 + c0 + 2 * t)], C[static_cast<size_t>(g * 16 + c0 + 2 * t + 1)],
                    C[static_cast<size_t>((g + 8) * 16 + c0 + 2 * t)], C[static_cast<size_t>((g + 8) * 16 + c0 + 2 * t + 1)]};
      mma::mma_16816<M>(d, a, b[2 * half], b[2 * half + 1]);
      D[static_cast<size_t>(g * 16 + c0 + 2 * t)] = d[0];
      D[static_cast<size_t>(g * 16 + c0 + 2 * t + 1)] = d[1];
      D[static_cast<size_t>((g + 8) * 16 + c0 + 2 * t)] = d[2];
      D[static_cast<size_t>((g + 8) * 16 + c0 + 2 * t + 1)] = d[3];
    }
  });
  EXPECT_EQ(mismatches, 0) << "fragment words that differ from the PTX ISA's layouts";
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 16; ++n) {
      double s = C[static_cast<size_t>(i * 16 + n)];
      for (int k = 0; k < 16; ++k) s += static_cast<double>(Af[static_cast<size_t>(i * 16 + k)]) * Bf[static_cast<size_t>(k * 16 + n)];
      EXPECT_NEAR(D[static_cast<size_t>(i * 16 + n)], s, 1e-5 * (1 + std::abs(s))) << "row " << i << " col " << n;
    }
  // acc_to_a: the accumulators of two 16 x 8 products are the A fragment of the 16 x 16 block.
  int differ = 0;
  simt::launch({dim3(1), dim3(32)}, [&] {
    const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
    float lo[4], hi[4];
    for (int e = 0; e < 4; ++e) {
      const int row = g + (e < 2 ? 0 : 8), col = 2 * t + (e & 1);
      lo[e] = Af[static_cast<size_t>(row * 16 + col)];
      hi[e] = Af[static_cast<size_t>(row * 16 + 8 + col)];
    }
    uint32_t a[4];
    mma::acc_to_a<M>(a, lo, hi);
    const uint32_t want[4] = {word(A, kLd, g, 2 * t), word(A, kLd, g + 8, 2 * t), word(A, kLd, g, 2 * t + 8),
                              word(A, kLd, g + 8, 2 * t + 8)};
    for (int r = 0; r < 4; ++r) differ += a[r] != want[r];
  });
  EXPECT_EQ(differ, 0);
}

// ldmatrix itself, by the ISA's words: lane 8 i + r addresses row r of matrix i, lane 4 r + c
// receives elements 2c, 2c + 1 of row r (.trans: of column r); rows anywhere (here in reverse
// order, 16-byte aligned); x1 and x2 ignore the other lanes' addresses.
TEST(Simt, LdmatrixFollowsThePtxIsa) {
  std::vector<uint16_t> m(4 * 8 * 8);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint16_t>(1000 + i);
  for (const int count : {1, 2, 4})
    for (const bool trans : {false, true}) {
      int bad = 0;
      simt::launch({dim3(1), dim3(32), m.size() * 2}, [&] {
        const int lane = static_cast<int>(threadIdx.x);
        TRIDENT_DYNAMIC_SHARED(uint16_t, sh);
        for (int i = lane; i < static_cast<int>(m.size()); i += 32) sh[i] = m[static_cast<size_t>(i)];
        __syncwarp();
        // Matrix i, row r stored at row 31 - (8 i + r) of the buffer; lanes past 8 count give
        // an address outside shared memory, which must not be read.
        const int i = lane / 8, r = lane % 8;
        const uint16_t* row = lane < 8 * count ? sh + (31 - (8 * i + r)) * 8 : nullptr;
        uint32_t regs[4] = {0, 0, 0, 0};
        simt::ldmatrix(count, trans, regs, row);
        for (int mi = 0; mi < count; ++mi) {
          const int rr = lane / 4, c = lane % 4;
          const auto at = [&](int row_, int col) { return m[static_cast<size_t>((31 - (8 * mi + row_)) * 8 + col)]; };
          const uint32_t lo = trans ? at(2 * c, rr) : at(rr, 2 * c), hi = trans ? at(2 * c + 1, rr) : at(rr, 2 * c + 1);
          bad += regs[mi] != (lo | hi << 16);
        }
      });
      EXPECT_EQ(bad, 0) << "x" << count << (trans ? " trans" : "");
    }
  // Misaligned or outside shared memory: errors naming the lane.
  const std::string e1 = error_of({dim3(1), dim3(32), 512}, [] {
    TRIDENT_DYNAMIC_SHARED(uint16_t, sh);
    uint32_t r[4];
    simt::ldmatrix(4, false, r, sh + 8 * threadIdx.x + (threadIdx.x == 5 ? 4 : 0));
  });
  EXPECT_NE(e1.find("lane 5"), std::string::npos) << e1;
  EXPECT_NE(e1.find("16-byte boundary"), std::string::npos) << e1;
  static uint16_t global_rows[32 * 8] __attribute__((aligned(16)));
  const std::string e2 = error_of({dim3(1), dim3(32), 512}, [] {
    uint32_t r[4];
    simt::ldmatrix(4, false, r, global_rows + 8 * threadIdx.x);
  });
  EXPECT_NE(e2.find("shared memory"), std::string::npos) << e2;
}

// cp.async: 16 bytes, src_bytes of them read and the rest zeros; in Order::Forward they land at
// once, in Order::Reverse at the wait that covers their group (wait_group N leaves the newest N).
TEST(Simt, CpAsyncLandsAtIssueOrAtTheWaitByOrder) {
  alignas(16) static const uint8_t src[48] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
                                              17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
                                              33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48};
  for (const simt::Order order : {simt::Order::Forward, simt::Order::Reverse}) {
    const bool late = order == simt::Order::Reverse;
    std::vector<int> seen;  // first byte of each buffer at each step: 255 is the poison, not landed
    simt::launch({dim3(1), dim3(1), 48, order}, [&] {
      TRIDENT_DYNAMIC_SHARED(uint8_t, sh);
      simt::cp_async16(sh, src, 16);
      simt::cp_async_commit();
      simt::cp_async16(sh + 16, src + 16, 5);  // 5 bytes read, 11 zeros
      simt::cp_async_commit();
      simt::cp_async16(sh + 32, src + 32, 0);  // nothing read: zeros
      seen = {sh[0], sh[16], sh[32]};
      simt::cp_async_wait(1);  // the first group; the second (and the uncommitted copy) may wait
      seen.insert(seen.end(), {sh[0], sh[16], sh[32]});
      simt::cp_async_commit();
      simt::cp_async_wait(0);
      seen.insert(seen.end(), {sh[0], sh[16], sh[21], sh[32], sh[47]});
    });
    const std::vector<int> want = late ? std::vector<int>{255, 255, 255, 1, 255, 255, 1, 17, 0, 0, 0}
                                       : std::vector<int>{1, 17, 0, 1, 17, 0, 1, 17, 0, 0, 0};
    EXPECT_EQ(seen, want) << (late ? "Reverse" : "Forward");
  }
  const std::string e = error_of({dim3(1), dim3(1), 32}, [] {
    TRIDENT_DYNAMIC_SHARED(uint8_t, sh);
    simt::cp_async16(sh + 8, src, 16);
  });
  EXPECT_NE(e.find("16-byte boundary"), std::string::npos) << e;
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
