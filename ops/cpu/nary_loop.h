// An element-wise loop over any number of inputs of different dtypes (a bool condition and
// two float operands, a float and a bool mask, ...), with broadcasting: the generalization of
// unary_loop / binary_loop in ops/cpu/loops.h, on the same StridedLoop.
#pragma once

#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/strided.h"
#include "core/tensor.h"

namespace trident::cpu {

namespace nary_detail {

// Bool is read through its bytes: GCC does not vectorize loads of `bool` (a 1-bit type in its
// IR), but does vectorize a byte load compared with 0.
template <typename T>
inline compute_t<T> load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, bool>) {
    return reinterpret_cast<const uint8_t*>(p)[i] != 0;
  } else {
    return static_cast<compute_t<T>>(p[i]);
  }
}

template <typename Out, typename... Ins, typename Op, size_t... K>
inline void run(Out* o, const std::tuple<const Ins*...>& in, int64_t n,
                const std::array<int64_t, sizeof...(Ins) + 1>& st, const Op& op, std::index_sequence<K...>) {
  if (st[0] == 1 && ((st[K + 1] == 1) && ...)) {
    // Unit strides everywhere: a plain loop the compiler vectorizes.
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(op(load(std::get<K>(in), i)...));
  } else {
    for (int64_t i = 0; i < n; ++i) o[i * st[0]] = static_cast<Out>(op(load(std::get<K>(in), i * st[K + 1])...));
  }
}

}  // namespace nary_detail

// out[i] = op(in_0[i], ..., in_{N-1}[i]): input k is read as Ins_k and passed to op as
// compute_t<Ins_k> (bool stays bool, f16/bf16 become f32); op's result is stored as Out. Every
// input must broadcast to out's shape; out may have any strides.
template <typename Out, typename... Ins, typename Op>
void nary_loop(const Tensor& out, const std::array<Tensor, sizeof...(Ins)>& ins, const Op& op) {
  constexpr size_t N = sizeof...(Ins);
  std::array<Shape, N + 1> strides;
  strides[0] = out.strides();
  for (size_t k = 0; k < N; ++k) strides[k + 1] = broadcast_strides(ins[k].sizes(), ins[k].strides(), out.sizes());
  const StridedLoop<static_cast<int>(N + 1)> loop(out.sizes(), strides);
  Out* o = static_cast<Out*>(out.data_ptr());
  const auto ptrs = [&]<size_t... K>(std::index_sequence<K...>) {
    return std::tuple<const Ins*...>(static_cast<const Ins*>(ins[K].data_ptr())...);
  }(std::index_sequence_for<Ins...>{});
  loop.run([&](const std::array<int64_t, N + 1>& off, int64_t n, const std::array<int64_t, N + 1>& st) {
    const auto at = [&]<size_t... K>(std::index_sequence<K...>) {
      return std::tuple<const Ins*...>((std::get<K>(ptrs) + off[K + 1])...);
    }(std::index_sequence_for<Ins...>{});
    nary_detail::run<Out, Ins...>(o + off[0], at, n, st, op, std::index_sequence_for<Ins...>{});
  });
}

}  // namespace trident::cpu
