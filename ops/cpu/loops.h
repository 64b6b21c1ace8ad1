// Element-wise loops on the CPU: the output is a fresh contiguous tensor (or a tensor written
// in place), inputs are read through their own strides with broadcasting. Runs of unit
// stride get a plain loop the compiler vectorizes; a broadcast scalar gets its own loop.
#pragma once

#include "core/strided.h"
#include "core/tensor.h"

namespace trident::cpu {

// out[i] = op(a[i]) with a read as In and out written as Out; op works in compute_t<In>.
template <typename In, typename Out, typename Op>
void unary_loop(const Tensor& out, const Tensor& a, const Op& op) {
  using C = compute_t<In>;
  const Shape ast = broadcast_strides(a.sizes(), a.strides(), out.sizes());
  StridedLoop<2> loop(out.sizes(), {out.strides(), ast});
  Out* o = static_cast<Out*>(out.data_ptr());
  const In* x = static_cast<const In*>(a.data_ptr());
  loop.run([&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
    Out* op_ = o + off[0];
    const In* xp = x + off[1];
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) op_[i] = static_cast<Out>(op(static_cast<C>(xp[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) op_[i * st[0]] = static_cast<Out>(op(static_cast<C>(xp[i * st[1]])));
    }
  });
}

// out[i] = op(a[i], b[i]) with broadcasting; a and b read as In.
template <typename In, typename Out, typename Op>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, const Op& op) {
  using C = compute_t<In>;
  const Shape ast = broadcast_strides(a.sizes(), a.strides(), out.sizes());
  const Shape bst = broadcast_strides(b.sizes(), b.strides(), out.sizes());
  StridedLoop<3> loop(out.sizes(), {out.strides(), ast, bst});
  Out* o = static_cast<Out*>(out.data_ptr());
  const In* x = static_cast<const In*>(a.data_ptr());
  const In* y = static_cast<const In*>(b.data_ptr());
  loop.run([&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
    Out* op_ = o + off[0];
    const In* xp = x + off[1];
    const In* yp = y + off[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) op_[i] = static_cast<Out>(op(static_cast<C>(xp[i]), static_cast<C>(yp[i])));
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
      const C yv = static_cast<C>(*yp);
      for (int64_t i = 0; i < n; ++i) op_[i] = static_cast<Out>(op(static_cast<C>(xp[i]), yv));
    } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
      const C xv = static_cast<C>(*xp);
      for (int64_t i = 0; i < n; ++i) op_[i] = static_cast<Out>(op(xv, static_cast<C>(yp[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        op_[i * st[0]] = static_cast<Out>(op(static_cast<C>(xp[i * st[1]]), static_cast<C>(yp[i * st[2]])));
    }
  });
}

}  // namespace trident::cpu
