// Fused-attention test cases shared by the CUDA suite (tests/cuda/attention_test.cpp) and the
// CPU emulator's (tests/simt/attention_simt_test.cpp): the case description, its random inputs
// in a dtype, and the CPU reference in f64 on the same (rounded) values.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/cpu/attention.h"
#include "trident.h"

namespace trident::testing {

enum class MaskKind { None, Additive, AdditiveBroadcast, Padding };

struct AttentionCase {
  std::string name;
  int64_t BH, Tq, Tk, D, Dv;
  bool causal = false;
  MaskKind mask = MaskKind::None;
  double dropout = 0.0;
  int pad = 0;              // q, k, v, dout as column slices of rows `pad` elements wider (row stride > D)
  bool want_dmask = false;  // additive masks only
  bool shared_kv = false;   // k and v one [1, Tk, d] expanded to every head (batch stride 0)
};

// A case's inputs: the operands' storage in the test dtype (q, k, v, dout; rows `pad` wider;
// k and v of one head when shared), the mask's storage before broadcasting to [BH, Tq, Tk]
// (the kernels' contract: stride 0 along heads or rows), and the parameters.
struct AttentionInputs {
  Tensor q, k, v, dout, mask;
  cpu::AttentionParams params;
};

inline AttentionInputs draw_attention_inputs(const AttentionCase& c, DType dt, uint64_t seed) {
  Generator g(seed);
  const auto draw = [&](int64_t bh, int64_t t, int64_t d) { return randn({bh, t, d + c.pad}, kF64, &g).to(dt); };
  const int64_t kv_heads = c.shared_kv ? 1 : c.BH;
  AttentionInputs in;
  in.q = draw(c.BH, c.Tq, c.D);
  in.k = draw(kv_heads, c.Tk, c.D);
  in.v = draw(kv_heads, c.Tk, c.Dv);
  switch (c.mask) {
    case MaskKind::None: break;
    case MaskKind::Additive: in.mask = randn({c.BH, c.Tq, c.Tk}, kF64, &g).to(dt); break;
    case MaskKind::AdditiveBroadcast: {  // one [Tq, Tk] for every head, about 7% of it -inf
      const Tensor m = randn({1, c.Tq, c.Tk}, kF64, &g);
      in.mask = where(lt(m, -1.5), full({1, c.Tq, c.Tk}, -INFINITY, kF64), m).to(dt);
      break;
    }
    case MaskKind::Padding: {  // head b sees keys [0, Tk - 37 b), at least one; head 0 none (zero rows)
      std::vector<uint8_t> keep(static_cast<size_t>(c.BH * c.Tk), 0);
      for (int64_t b = 1; b < c.BH; ++b)
        for (int64_t j = 0; j < std::max<int64_t>(c.Tk - 37 * b, 1); ++j) keep[static_cast<size_t>(b * c.Tk + j)] = 1;
      in.mask = from_vector<uint8_t>(keep, {c.BH, 1, c.Tk}).to(DType::Bool);
      break;
    }
  }
  in.dout = draw(c.BH, c.Tq, c.Dv);
  in.params.scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  in.params.causal = c.causal;
  in.params.dropout_p = c.dropout;
  in.params.rng = {seed * 7919 + 3, 12345};
  return in;
}

// An operand's [BH, T, d] view of its storage (on whatever device it now is): the first d
// columns of padded rows, one head expanded to all when shared.
inline Tensor attention_view(const AttentionCase& c, const Tensor& storage, int64_t d) {
  const Tensor x = c.pad ? narrow(storage, 2, 0, d) : storage;
  return x.size(0) == c.BH ? x : expand(x, {c.BH, x.size(1), x.size(2)});
}
inline Tensor attention_mask_view(const AttentionCase& c, const Tensor& storage) {
  return storage.defined() ? expand(storage, {c.BH, c.Tq, c.Tk}) : Tensor();
}

// The CPU kernels in f64 on the same values: out, lse and the gradients of dout.
struct AttentionReference {
  Tensor out, lse;
  cpu::AttentionGrads grads;
};
inline AttentionReference attention_reference(const AttentionCase& c, const AttentionInputs& in) {
  const auto f64 = [](const Tensor& t) { return !t.defined() || t.dtype() == DType::Bool ? t : t.to(kF64); };
  const Tensor q = f64(attention_view(c, in.q, c.D)), k = f64(attention_view(c, in.k, c.D)),
               v = f64(attention_view(c, in.v, c.Dv));
  const Tensor mask = attention_mask_view(c, f64(in.mask));
  AttentionReference r;
  r.out = cpu::attention_forward(q, k, v, mask, in.params, r.lse);
  r.grads = cpu::attention_backward(f64(attention_view(c, in.dout, c.Dv)), q, k, v, mask, r.out, r.lse, in.params,
                                    c.want_dmask);
  return r;
}

}  // namespace trident::testing
