#include "ops/autocast.h"

namespace trident::autocast {
namespace {
thread_local bool g_enabled = false;
thread_local DType g_dtype = DType::BF16;

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

bool is_enabled() { return g_enabled; }
DType dtype() { return g_dtype; }

Guard::Guard(DType dt, bool enabled) : prev_enabled_(g_enabled), prev_dtype_(g_dtype) {
  if (enabled)
    TRIDENT_CHECK(dt == DType::BF16 || dt == DType::F16, "autocast: the compute dtype must be bf16 or f16, got ", dt);
  g_enabled = enabled;
  if (enabled) g_dtype = dt;
}
Guard::~Guard() {
  g_enabled = prev_enabled_;
  g_dtype = prev_dtype_;
}

Suspend::Suspend() : prev_(g_enabled) { g_enabled = false; }
Suspend::~Suspend() { g_enabled = prev_; }

Tensor lower(const Tensor& t) { return t.defined() && t.dtype() == DType::F32 ? t.to(g_dtype) : t; }
Tensor widen(const Tensor& t) { return t.defined() && is_reduced_float(t.dtype()) ? t.to(DType::F32) : t; }

std::pair<Tensor, Tensor> promote(const Tensor& a, const Tensor& b) {
  if (!g_enabled || !a.defined() || !b.defined() || a.dtype() == b.dtype() || !is_floating(a.dtype()) ||
      !is_floating(b.dtype()))
    return {a, b};
  const DType w = wider(a.dtype(), b.dtype());
  return {a.to(w), b.to(w)};
}

std::vector<Tensor> promote(const std::vector<Tensor>& ts) {
  if (!g_enabled || ts.empty()) return ts;
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
