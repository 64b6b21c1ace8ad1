// The CUDA dtype-converting copy kernel (core/cuda/copy.cu, NOTE [Dynamic-dtype conversion]) on
// the SIMT emulator (NOTE [Kernels on the CPU emulator] in tests/simt/simt.h) against the CPU's
// copy_, bit for bit, for all 64 pairs of dtypes into a transposed destination (the offset
// calculator), with values that round, wrap (u8 of negatives and of 300), overflow f16 and carry
// NaN and infinities into floating and bool destinations. (A NaN or infinity into an integer is
// undefined in C++ and differs between the CPU and a GPU: not compared.)
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "core/cuda/copy.cu"

#include <gtest/gtest.h>

#include <string>

#include "simt/simt_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::simt_testing;
namespace cu = trident::cuda;

namespace {

TEST(SimtCopy, EveryDtypePairConvertsAsTheCpu) {
  const std::vector<double> finite = {0.0, -0.0, 1.0, 1.5, -1.5, 2.5, -3.7, 100.25, 255.9, 256.3, 300.0, -200.2,
                                      65504.0, 70000.0, 1e-8, -1e9};
  const std::vector<double> special = {NAN, INFINITY, -INFINITY};
  const DType all[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool};
  for (DType st : all)
    for (DType dt : all) {
      SCOPED_TRACE(std::string(dtype_name(st)) + " -> " + std::string(dtype_name(dt)));
      std::vector<double> v = finite;
      if (is_floating(dt) || dt == DType::Bool || !is_floating(st))
        v.insert(v.end(), special.begin(), special.end());
      while (v.size() % 4 != 0) v.push_back(7.0);
      const int64_t rows = static_cast<int64_t>(v.size()) / 4;
      // The source in its dtype as the CPU converts the values; integer sources see the values
      // the CPU makes of them.
      const Tensor src = from_vector<double>(v, {rows, 4}).to(st);
      const Tensor ref_base = zeros({4, rows}, dt);
      const Tensor ref = transpose(ref_base, 0, 1);  // [rows, 4], not contiguous
      copy_(ref, src);
      for (int o = 0; o < 2; ++o) {
        const Tensor base = full({4, rows}, 1, dt);
        const Tensor dst = transpose(base, 0, 1);
        const auto oc = cu::make_offset_calc<2>(dst.sizes(), {dst.strides(), src.strides()});
        const int64_t n = dst.numel();
        simt::launch({dim3(2), dim3(cu::kThreads), 0, o == 0 ? simt::Order::Forward : simt::Order::Reverse}, [&] {
          cu::convert_kernel(n, oc, dt, static_cast<char*>(base.data_ptr()), st, static_cast<const char*>(src.data_ptr()));
        });
        EXPECT_TRUE(same_bits(base, ref_base));
      }
    }
}

}  // namespace
