// Shared by the emulator's kernel tests (tests/simt/*_simt_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda/loops.cuh"
#include "core/factory.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "test_util.h"
#include "tests/simt/simt.h"

namespace trident::simt_testing {

using ::trident::testing::relative_error;

// tests/test_util.h's f64_reference_tolerance (the CUDA attention suite's).
inline double tolerance(DType dt, bool backward) { return ::trident::testing::f64_reference_tolerance(dt, backward); }

// Bit-for-bit equality (as doubles; NaN equal to NaN); undefined equals undefined.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

// An output before a kernel writes it: NaN everywhere, as the CUDA suites poison allocations.
inline Tensor nans(const Shape& s, DType dt) { return full(s, NAN, dt); }

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(const_cast<void*>(t.data_ptr())) : nullptr;
}

// Runs `launches(outputs, order)` on fresh outputs from `make()` in both thread orders; the two
// runs must give the same bits. Returns the forward-order outputs.
template <typename Make, typename Launches>
std::vector<Tensor> in_both_orders(Make make, Launches launches) {
  std::vector<Tensor> r[2];
  for (int o = 0; o < 2; ++o) {
    r[o] = make();
    launches(r[o], o == 0 ? ::simt::Order::Forward : ::simt::Order::Reverse);
  }
  for (size_t i = 0; i < r[0].size(); ++i)
    EXPECT_TRUE(same_bits(r[0][i], r[1][i])) << "output " << i << " depends on the thread order";
  return r[0];
}

// out = f(ins...) through cuda::elementwise (the vectorized or the strided loop, as on a GPU),
// its threads in `order`.
template <typename Out, typename... In, typename F>
void run_elementwise(const Tensor& out, const std::array<Tensor, sizeof...(In)>& ins, F f, ::simt::Order order) {
  const ::simt::ScopedOrder scoped(order);
  ::trident::cuda::elementwise<Out, In...>(out, ins, f);
}

}  // namespace trident::simt_testing
