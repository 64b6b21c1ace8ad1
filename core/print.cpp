// Printing tensors the way PyTorch does: nested brackets, aligned columns, summarized when large.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "core/tensor.h"

namespace trident {
namespace autograd {
// Defined in autograd/node.cpp (NOTE [Tensor methods]: declared here, defined above core).
std::string node_name(const Node& n);
}  // namespace autograd

namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating = false;
  bool is_bool = false;
  bool scientific = false;
  bool integral_values = false;
  int width = 1;

  std::string fmt(double v) const {
    char buf[64];
    if (is_bool) return v != 0 ? "True" : "False";
    if (!floating) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    } else if (std::isnan(v)) {
      return "nan";
    } else if (std::isinf(v)) {
      return v > 0 ? "inf" : "-inf";
    } else if (scientific) {
      std::snprintf(buf, sizeof buf, "%.4e", v);
    } else if (integral_values) {
      std::snprintf(buf, sizeof buf, "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof buf, "%.4f", v);
    }
    return buf;
  }
};

void print_rec(std::ostream& os, const std::vector<double>& vals, const Shape& sizes, const Shape& strides, int64_t off,
               size_t d, const Formatter& f, bool summarize, int indent) {
  if (d == sizes.size()) {
    std::string s = f.fmt(vals[static_cast<size_t>(off)]);
    os << std::string(static_cast<size_t>(std::max<int>(0, f.width - static_cast<int>(s.size()))), ' ') << s;
    return;
  }
  os << '[';
  const int64_t n = sizes[d];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << "...";
      i = n - kEdgeItems - 1;
      if (d + 1 == sizes.size()) {
        os << ", ";
      } else {
        os << ",\n" << std::string(static_cast<size_t>(indent + 1), ' ');
      }
      continue;
    }
    print_rec(os, vals, sizes, strides, off + i * strides[d], d + 1, f, summarize, indent + 1);
    if (i + 1 < n) {
      if (d + 1 == sizes.size()) {
        os << ", ";
      } else {
        os << ',' << std::string(sizes.size() - d - 1, '\n') << std::string(static_cast<size_t>(indent + 1), ' ');
      }
    }
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  Tensor c = t.detach();
  if (!c.device().is_cpu()) c = c.to(kCPU);
  const std::vector<double> vals = c.contiguous().to_vector<double>();
  Formatter f;
  f.floating = is_floating(t.dtype());
  f.is_bool = t.dtype() == DType::Bool;
  const bool summarize = t.numel() > kSummarizeAbove;
  if (f.floating) {
    double max_abs = 0, min_abs = INFINITY;
    bool all_int = true;
    for (double v : vals) {
      if (!std::isfinite(v)) continue;
      max_abs = std::max(max_abs, std::fabs(v));
      if (v != 0) min_abs = std::min(min_abs, std::fabs(v));
      if (v != std::floor(v)) all_int = false;
    }
    f.integral_values = all_int && max_abs < 1e8;
    f.scientific = !f.integral_values && (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY) ||
                                          (max_abs / std::max(min_abs, 1e-300) > 1e3 && max_abs >= 1e3));
  }
  for (double v : vals) f.width = std::max<int>(f.width, static_cast<int>(f.fmt(v).size()));
  os << "tensor(";
  const std::string prefix = "tensor(";
  if (t.dim() == 0) {
    os << f.fmt(vals.empty() ? 0.0 : vals[0]);
  } else {
    print_rec(os, vals, c.sizes(), contiguous_strides(c.sizes()), 0, 0, f, summarize, static_cast<int>(prefix.size()));
  }
  if (t.numel() == 0 || summarize) os << ", size=" << shape_str(t.sizes());
  if (t.dtype() != DType::F32 && !(t.dtype() == DType::I64 && !f.floating)) os << ", dtype=" << t.dtype();
  if (!t.device().is_cpu()) os << ", device=" << t.device();
  if (t.grad_fn()) {
    os << ", grad_fn=<" << autograd::node_name(*t.grad_fn()) << ">";
  } else if (t.requires_grad()) {
    os << ", requires_grad=true";
  }
  return os << ')';
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

}  // namespace trident
