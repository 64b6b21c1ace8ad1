#include "ops/autocast.h"

#include "autograd/grad_mode.h"
#include "ops/unary.h"

namespace trident::autocast {
namespace {
using autograd::AutocastMode;  // the state (NOTE [Autocast state])

int rank(DType t) {
  switch (t) {
    case DType::F64: return 3;
    case DType::F32: return 2;
    default: return 1;  // f16, bf16
  }
}
DType wider(DType a, DType b) {
  if (a == b) return a;
  if (rank(a) == rank(b)) return DType::F32;  // f16 with bf16: neither holds the other
  return rank(a) > rank(b) ? a : b;
}
}  // namespace

bool is_enabled() { return AutocastMode::get().enabled; }
DType dtype() { return AutocastMode::get().dtype; }

Guard::Guard(DType dt, bool enabled) : prev_enabled_(is_enabled()), prev_dtype_(dtype()) {
  if (enabled)
    TRIDENT_CHECK(dt == DType::BF16 || dt == DType::F16, "autocast: the compute dtype must be bf16 or f16, got ", dt);
  AutocastMode::set({enabled, enabled ? dt : prev_dtype_});
}
Guard::~Guard() { AutocastMode::set({prev_enabled_, prev_dtype_}); }

Suspend::Suspend() : prev_(is_enabled()) { AutocastMode::set({false, dtype()}); }
Suspend::~Suspend() { AutocastMode::set({prev_, dtype()}); }

Tensor lower(const Tensor& t) { return t.defined() && t.dtype() == DType::F32 ? t.to(dtype()) : t; }
Tensor lower_relu(const Tensor& t) { return is_enabled() && t.defined() && t.dtype() == DType::F32 ? relu(t, dtype()) : relu(t); }
Tensor widen(const Tensor& t) { return t.defined() && is_reduced_float(t.dtype()) ? t.to(DType::F32) : t; }

std::pair<Tensor, Tensor> promote(const Tensor& a, const Tensor& b) {
  if (!is_enabled() || !a.defined() || !b.defined() || a.dtype() == b.dtype() || !is_floating(a.dtype()) ||
      !is_floating(b.dtype()))
    return {a, b};
  const DType w = wider(a.dtype(), b.dtype());
  return {a.to(w), b.to(w)};
}

std::vector<Tensor> promote(const std::vector<Tensor>& ts) {
  if (!is_enabled() || ts.empty()) return ts;
  bool mixed = false, all_float = true;
  DType w = ts.front().dtype();
  for (const Tensor& t : ts) {
    if (!t.defined()) return ts;
    all_float = all_float && is_floating(t.dtype());
    mixed = mixed || t.dtype() != ts.front().dtype();
    w = wider(w, t.dtype());
  }
  if (!mixed || !all_float) return ts;
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(t.to(w));
  return out;
}

}  // namespace trident::autocast
