// NOTE [AMX bf16 GEMM]: products of bf16 matrices on Intel's Advanced Matrix Extensions (Sapphire
// Rapids and later Xeons): TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16 x 16
// f32 accumulators, eight times the multiply-adds per instruction of an AVX-512 FMA. Without it,
// a bf16 product on the CPU converts both operands to f32 and runs the f32 GEMM (exact products,
// then the result rounded to bf16), which is slower than f32 itself; with it, autocast's bf16
// matmul and linear (NOTE [Autocast]) run several times faster than f32. The arithmetic is the
// same up to rounding: every product of two bf16 values is exact in f32 and the sums accumulate
// in f32 (in a different order), then the result, plus linear's bias in f32, is rounded to bf16
// once, to nearest even (NOTE [Half conversions]). Unlike the f32 path, the instruction treats
// subnormal inputs (below 2^-126) as zero and flushes subnormal sums to zero, as every AMX user
// (oneDNN, PyTorch) does.
//
// Layout: C is computed by 32 x 32 blocks, four accumulator tiles, each over k in steps of 256
// (the 32 rows of A and two 16-column panels of B over one step stay in L1), a row block of A
// meeting four column blocks in turn, whose sums wait in a 16 KiB buffer between the steps (for
// an f32 C without bias, whole blocks sum in C itself, from C's values when accumulating: no
// copy out of the buffer; GPT-2's tiled loss, NOTE [Linear cross-entropy], spent 13% there); k
// beyond 2048 is cut into outer blocks, the sums kept in f32 between them. A row-major A is read
// in place; otherwise (transposed, or a tail) its rows are copied per 32-row block into
// k-contiguous rows, zero-padded (a transposed A by 16 x 16 register transposes of interleaved
// row pairs). B is copied per block of columns (sized to stay in L2) into the pairwise-
// interleaved layout the instruction reads (for column j, k and k + 1 adjacent). Threads share
// each column block and take (row block, four column blocks) items; every element's sum runs
// in the same order whatever the thread count.
//
// A B used by several products can be packed once (PackedBf16B below) when one call would pack it
// as a single block; the products then skip the packing.
//
// The tiles need the kernel's permission (Linux arch_prctl(ARCH_REQ_XCOMP_PERM)), asked for once;
// without AMX-BF16 in the CPU, the permission, or x86-64 Linux with GCC or Clang, the old path
// runs (both operands converted to f32). TRIDENT_CPU_BF16_GEMM chooses for the whole process:
// auto (AMX where allowed, else the conversion), amx, avx512bf16 (below) or off (the conversion);
// set_bf16_gemm_kernel_for_testing chooses in tests.
//
// NOTE [AVX512-BF16 GEMM]: CPUs with AVX-512's BF16 dot products (Zen 4 and 5, Cooper Lake and
// later Xeons) can run the same blocks and packing with VDPBF16PS: a 32 x 32 block as four groups
// of 8 rows x 32 columns in 16 vector accumulators, each row's pair of A broadcast against B's
// 64-byte pair rows, two products per lane per instruction where an FMA does one. On the AMX
// Xeon with TRIDENT_CPU_BF16_GEMM=avx512bf16 GPT-2's bf16 step took as long as with the f32
// conversion (703-705 against 643-702 ms, alternating; there one VDPBF16PS issues per cycle,
// where two f32 FMAs do, so no gain is possible). Zen 4 and 5 issue it at twice the FMA rate and may gain, but
// it has not been measured there, so auto does not choose it yet.
#pragma once

#include <cstdint>
#include <memory>

namespace trident::cpu {

// The kernel bf16 matmul and linear run on (NOTE [AMX bf16 GEMM], NOTE [AVX512-BF16 GEMM]); None:
// both operands converted to f32 and the f32 GEMM.
enum class Bf16Gemm : uint8_t { None, Avx512Bf16, Amx };

// Whether the CPU and the kernel let this process run AMX-BF16 (asks for the permission once).
bool amx_bf16_available();
// Whether the CPU has AVX-512 with its BF16 dot products.
bool avx512_bf16_available();
// The kernel bf16 products use (TRIDENT_CPU_BF16_GEMM; auto: AMX where available, else None).
Bf16Gemm bf16_gemm_kernel();
// Makes `kernel` the one used (None where it is not available); returns the previous one. Not
// thread-safe: call it between operations, as the tests do.
Bf16Gemm set_bf16_gemm_kernel_for_testing(Bf16Gemm kernel);

// C[m, n] = A[m, k] B[k, n] (+ bias[n], f32, may be null) on `kernel` (Amx or Avx512Bf16, which
// must be available), A and B bf16 bits read transposed as flagged (A [k, m] with lda when
// trans_a, B [n, k] with ldb when trans_b), C written as bf16 bits (rounded once) with leading
// dimension ldc; m, n, k >= 1.
void gemm_bf16(Bf16Gemm kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
               const uint16_t* b, int64_t ldb, const float* bias, uint16_t* c, int64_t ldc);
// The same, C in f32 (not rounded; added to C's values when accumulating): for sums that go on
// in f32 (col2im, attention's key and value gradients over query blocks) and for the tests, which
// bound the sums' error against f64.
void gemm_bf16(Bf16Gemm kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
               const uint16_t* b, int64_t ldb, const float* bias, float* c, int64_t ldc, bool accumulate = false);

// B packed once for several products that share it: the layout gemm_bf16 packs B into per call
// (NOTE [AMX bf16 GEMM]), kept. For a B that one call packs as a single block (k <= 2048 and the
// packed B within 1 MiB: bf16_b_packs_whole); GPT-2's tiled loss (NOTE [Linear cross-entropy])
// packs each tile of the table once for all its row chunks, and the hidden states once for all
// tiles.
class PackedBf16B {
 public:
  // op(B) [k, n]: B [k, n] read with ldb, or when trans_b B [n, k]; packed on the calling thread.
  // The buffer is kept and reused by the next pack.
  void pack(bool trans_b, int64_t n, int64_t k, const uint16_t* b, int64_t ldb);
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  const uint16_t* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(uint16_t* p) const;
  };
  std::unique_ptr<uint16_t[], Free> data_;
  int64_t n_ = 0, k_ = 0;
  [[maybe_unused]] int64_t capacity_ = 0;  // elements data_ holds (unused in a build without the kernels)
};
// Whether op(B) [k, n] packs as one block (PackedBf16B takes it).
bool bf16_b_packs_whole(int64_t n, int64_t k);
// C[m, n] = op(A) B with B packed (as gemm_bf16; m >= 1), single-threaded when called inside a
// parallel region, as the products of gemm_bf16 are.
void gemm_bf16_packed(Bf16Gemm kernel, bool trans_a, int64_t m, const uint16_t* a, int64_t lda, const PackedBf16B& b,
                      uint16_t* c, int64_t ldc);
void gemm_bf16_packed(Bf16Gemm kernel, bool trans_a, int64_t m, const uint16_t* a, int64_t lda, const PackedBf16B& b, float* c,
                      int64_t ldc, bool accumulate = false);

}  // namespace trident::cpu
