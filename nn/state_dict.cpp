#include "nn/state_dict.h"

#include <sstream>

#include "core/copy.h"

namespace trident::nn {

namespace {
std::string describe(const Shape& s, DType d) { return detail::str(s, " ", d); }
}  // namespace

std::string describe_load_problems(const LoadResult& r) {
  std::ostringstream os;
  os << "state dict does not match: " << r.missing.size() << " missing, " << r.unexpected.size() << " unexpected, "
     << r.mismatched.size() << " mismatched";
  if (!r.missing.empty()) {
    os << "\n  missing (in the target, not in the source):";
    for (const auto& n : r.missing) os << "\n    " << n;
  }
  if (!r.unexpected.empty()) {
    os << "\n  unexpected (in the source, not in the target):";
    for (const auto& n : r.unexpected) os << "\n    " << n;
  }
  if (!r.mismatched.empty()) {
    os << "\n  mismatched (target vs source):";
    for (const auto& m : r.mismatched)
      os << "\n    " << m.name << ": expected " << describe(m.expected_shape, m.expected_dtype) << ", got "
         << describe(m.got_shape, m.got_dtype);
  }
  return os.str();
}

LoadResult load_into(const StateDict& target, const StateDict& source, bool strict) {
  LoadResult r;
  // Both maps are sorted by name: one merge pass classifies every name.
  auto t = target.begin();
  auto s = source.begin();
  while (t != target.end() || s != source.end()) {
    if (s == source.end() || (t != target.end() && t->first < s->first)) {
      r.missing.push_back(t->first);
      ++t;
    } else if (t == target.end() || s->first < t->first) {
      r.unexpected.push_back(s->first);
      ++s;
    } else {
      const Tensor& dst = t->second;
      const Tensor& src = s->second;
      TRIDENT_CHECK(dst.defined(), "load_into: target tensor '", t->first, "' is undefined");
      TRIDENT_CHECK(src.defined(), "load_into: source tensor '", s->first, "' is undefined");
      if (dst.sizes() != src.sizes() || dst.dtype() != src.dtype()) {
        r.mismatched.push_back({t->first, dst.sizes(), dst.dtype(), src.sizes(), src.dtype()});
      } else {
        r.loaded.push_back(t->first);
      }
      ++t;
      ++s;
    }
  }
  // Strict mode checks everything before copying anything, so a failed load leaves the target
  // exactly as it was.
  TRIDENT_CHECK(!strict || r.ok(), "load_into: ", describe_load_problems(r));
  for (const std::string& name : r.loaded) copy_(target.at(name), source.at(name));
  return r;
}

}  // namespace trident::nn
