#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "core/copy.h"
#include "core/factory.h"

namespace trident::autograd {
namespace {

// Element offsets (in elements, from data_ptr) of a tensor's elements in row-major order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offs(static_cast<size_t>(t.numel()));
  const Shape& sz = t.sizes();
  const Shape& st = t.strides();
  std::vector<int64_t> idx(sz.size(), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < sz.size(); ++d) o += idx[d] * st[d];
    offs[static_cast<size_t>(i)] = o;
    for (size_t d = sz.size(); d-- > 0;) {
      if (++idx[d] < sz[d]) break;
      idx[d] = 0;
    }
  }
  return offs;
}

Shape unravel(const Shape& sizes, int64_t flat) {
  Shape idx(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    idx[d] = sizes[d] ? flat % sizes[d] : 0;
    flat = sizes[d] ? flat / sizes[d] : 0;
  }
  return idx;
}

std::string index_str(const Shape& sizes, int64_t flat) { return detail::str(unravel(sizes, flat)); }

std::vector<double> values_f64(const Tensor& t) { return t.detach().to(DType::F64).to_vector<double>(); }

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const TensorList& inputs, const GradcheckOptions& opts) {
  GradcheckResult res;
  std::vector<size_t> diff;  // inputs that require grad
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    TRIDENT_CHECK(x.device().is_cpu(), "gradcheck: input ", i, " is on ", x.device(), "; gradcheck runs on the CPU");
    TRIDENT_CHECK(x.dtype() == DType::F64, "gradcheck: input ", i, " is ", x.dtype(),
                  "; use f64 inputs (finite differences in lower precision are too noisy)");
    const Shape& sz = x.sizes();
    for (size_t d = 0; d < sz.size(); ++d)
      TRIDENT_CHECK(!(x.strides()[d] == 0 && sz[d] > 1), "gradcheck: input ", i, " (shape ", sz, ", strides ", x.strides(),
                    ") has overlapping memory; pass a contiguous copy");
    diff.push_back(i);
  }
  TRIDENT_CHECK(!diff.empty(), "gradcheck: no input requires grad");
  TRIDENT_CHECK(opts.input_names.empty() || opts.input_names.size() == inputs.size(), "gradcheck: ",
                opts.input_names.size(), " input names for ", inputs.size(), " inputs");

  TensorList outputs = fn(inputs);
  std::vector<size_t> outs;  // differentiable outputs
  for (size_t o = 0; o < outputs.size(); ++o)
    if (outputs[o].defined() && outputs[o].requires_grad()) outs.push_back(o);
  TRIDENT_CHECK(!outs.empty(), "gradcheck: no output requires grad (did the function detach its inputs?)");

  TensorList diff_inputs;
  for (size_t i : diff) diff_inputs.push_back(inputs[i]);

  // analytic[a][k][j]: d output a element j / d input k (flat over all differentiable inputs).
  std::vector<std::vector<std::vector<double>>> analytic(outs.size());
  TensorList out_list;
  for (size_t o : outs) out_list.push_back(outputs[o]);
  for (size_t a = 0; a < outs.size(); ++a) {
    const Tensor& y = outputs[outs[a]];
    analytic[a].assign(diff.size(), std::vector<double>());
    for (size_t k = 0; k < diff.size(); ++k)
      analytic[a][k].assign(static_cast<size_t>(inputs[diff[k]].numel() * y.numel()), 0.0);
    for (int64_t j = 0; j < y.numel(); ++j) {
      TensorList gos;
      for (size_t b = 0; b < outs.size(); ++b) {
        Tensor g = zeros_like(outputs[outs[b]]);
        if (b == a) {
          Tensor flat = g.as_strided({g.numel()}, {1}, 0);
          NoGradGuard ng;
          fill_(flat.as_strided({1}, {1}, j), 1.0);
        }
        gos.push_back(g);
      }
      TensorList gs = grad(out_list, diff_inputs, gos, /*retain_graph=*/true, /*allow_unused=*/true);
      for (size_t k = 0; k < diff.size(); ++k) {
        if (!gs[k].defined()) continue;
        TRIDENT_CHECK(gs[k].sizes() == inputs[diff[k]].sizes(), "gradcheck: gradient of input ", diff[k], " has shape ",
                      gs[k].sizes(), ", expected ", inputs[diff[k]].sizes());
        const std::vector<double> v = values_f64(gs[k]);
        for (size_t e = 0; e < v.size(); ++e) analytic[a][k][e * static_cast<size_t>(y.numel()) + static_cast<size_t>(j)] = v[e];
      }
    }
  }

  // f(x), for the one-sided differences that recognize kinks (NOTE [Non-differentiable points]).
  std::vector<std::vector<double>> f0(outs.size());
  if (opts.allow_kinks)
    for (size_t a = 0; a < outs.size(); ++a) f0[a] = values_f64(outputs[outs[a]]);

  // Central differences, perturbing each input element in place (through raw pointers, so the
  // version counters of the inputs do not move).
  double worst_excess = -INFINITY;
  for (size_t k = 0; k < diff.size(); ++k) {
    const Tensor& x = inputs[diff[k]];
    double* base = static_cast<double*>(x.data_ptr());
    const std::vector<int64_t> offs = element_offsets(x);
    for (int64_t e = 0; e < x.numel(); ++e) {
      double* p = base + offs[static_cast<size_t>(e)];
      const double orig = *p;
      if (opts.skip) {
        const GradcheckPoint point{diff[k], e, unravel(x.sizes(), e), orig, inputs};
        if (opts.skip(point)) {
          for (size_t a = 0; a < outs.size(); ++a) res.skipped += outputs[outs[a]].numel();
          continue;
        }
      }
      TensorList plus, minus;
      {
        NoGradGuard ng;
        *p = orig + opts.eps;
        plus = fn(inputs);
        *p = orig - opts.eps;
        minus = fn(inputs);
        *p = orig;
      }
      for (size_t a = 0; a < outs.size(); ++a) {
        const std::vector<double> fp = values_f64(plus[outs[a]]);
        const std::vector<double> fm = values_f64(minus[outs[a]]);
        const int64_t ny = static_cast<int64_t>(fp.size());
        for (int64_t j = 0; j < ny; ++j) {
          const size_t sj = static_cast<size_t>(j);
          const double num = (fp[sj] - fm[sj]) / (2 * opts.eps);
          const double ana = analytic[a][k][static_cast<size_t>(e * ny + j)];
          const double err = std::fabs(ana - num);
          const double bound = opts.atol + opts.rtol * std::fabs(num);
          double excess = std::isnan(err) ? INFINITY : err - bound;
          if (excess > 0 && opts.allow_kinks) {
            // A kink: the slopes on either side differ beyond the tolerance, and the analytic
            // value is one of them or between them.
            const double right = (fp[sj] - f0[a][sj]) / opts.eps, left = (f0[a][sj] - fm[sj]) / opts.eps;
            const double tol = opts.atol + opts.rtol * std::max(std::fabs(left), std::fabs(right));
            const bool kink = std::fabs(right - left) > tol;
            if (kink && ana >= std::min(left, right) - tol && ana <= std::max(left, right) + tol) {
              ++res.kinks;
              continue;
            }
          }
          ++res.compared;
          if (excess > 0) ++res.mismatches;
          if (excess > worst_excess) {
            worst_excess = excess;
            res.input = static_cast<int64_t>(diff[k]);
            res.input_index = e;
            res.output = static_cast<int64_t>(outs[a]);
            res.output_index = j;
            res.input_value = orig;
            res.analytic = ana;
            res.numeric = num;
            res.abs_error = err;
            res.rel_error = err / std::max(std::fabs(num), 1e-300);
          }
        }
      }
    }
  }
  res.ok = res.mismatches == 0;
  if (!res.ok) {
    std::ostringstream os;
    os.precision(10);
    os << "gradcheck failed: " << res.mismatches << " of " << res.compared << " Jacobian entries differ; worst: d output "
       << res.output << index_str(outputs[static_cast<size_t>(res.output)].sizes(), res.output_index) << " / d input "
       << res.input << index_str(inputs[static_cast<size_t>(res.input)].sizes(), res.input_index) << " (";
    if (!opts.input_names.empty()) os << opts.input_names[static_cast<size_t>(res.input)] << ", ";
    os << "value " << res.input_value << "): analytic "
       << res.analytic << ", numeric " << res.numeric << ", |diff| " << res.abs_error << " (relative " << res.rel_error
       << ") > atol " << opts.atol << " + rtol " << opts.rtol << " * |numeric|";
    if (res.skipped) os << "; " << res.skipped << " entries skipped";
    if (res.kinks) os << "; " << res.kinks << " accepted at kinks";
    res.report = os.str();
  }
  return res;
}

GradcheckResult gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                          const GradcheckOptions& opts) {
  return gradcheck(GradcheckFn([&fn](const TensorList& xs) { return TensorList{fn(xs)}; }), inputs, opts);
}

GradcheckResult gradgradcheck(const GradcheckFn& fn, const TensorList& inputs, const GradcheckOptions& opts, uint64_t seed) {
  std::vector<size_t> diff;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) diff.push_back(i);
  TRIDENT_CHECK(!diff.empty(), "gradgradcheck: no input requires grad");
  // The outputs' shapes, and a random gradient v for each differentiable one.
  TensorList outputs = fn(inputs);
  std::vector<size_t> outs;
  for (size_t o = 0; o < outputs.size(); ++o)
    if (outputs[o].defined() && outputs[o].requires_grad()) outs.push_back(o);
  TRIDENT_CHECK(!outs.empty(), "gradgradcheck: no output requires grad (did the function detach its inputs?)");
  Generator gen(seed);
  TensorList all = inputs;
  for (size_t o : outs) {
    Tensor v = randn(outputs[o].sizes(), TensorOptions(kF64), &gen);
    v.set_requires_grad(true);
    all.push_back(v);
  }
  const size_t n = inputs.size();
  std::string missing;  // a first-order gradient without a graph
  GradcheckFn first_order = [&](const TensorList& xs_in) {
    const bool recording = GradMode::is_enabled();  // gradcheck's analytic pass; off for its differences
    EnableGradGuard on;
    TensorList xs(xs_in.begin(), xs_in.begin() + static_cast<std::ptrdiff_t>(n));
    TensorList diff_xs;
    for (size_t i : diff) {
      if (!xs[i].requires_grad()) xs[i] = xs[i].detach().set_requires_grad(true);  // a fresh leaf to differentiate
      diff_xs.push_back(xs[i]);
    }
    TensorList ys = fn(xs), roots, vs;
    for (size_t k = 0; k < outs.size(); ++k) {
      roots.push_back(ys.at(outs[k]));
      vs.push_back(recording ? xs_in[n + k] : xs_in[n + k].detach());
    }
    TensorList gs = grad(roots, diff_xs, vs, /*retain_graph=*/true, /*allow_unused=*/true, /*create_graph=*/recording);
    for (size_t k = 0; k < gs.size(); ++k) {
      if (!gs[k].defined()) {
        gs[k] = zeros_like(diff_xs[k]);
      } else if (recording && !gs[k].requires_grad() && missing.empty()) {
        missing = detail::str("gradgradcheck failed: the gradient of input ", diff[k],
                              " does not carry a graph: a backward on its path was not recorded");
      }
      if (!recording) gs[k] = gs[k].detach().clone();  // not an alias of v, which gradcheck perturbs in place
    }
    return gs;
  };
  GradcheckOptions o = opts;
  if (!o.input_names.empty())
    for (size_t k = 0; k < outs.size(); ++k) o.input_names.push_back(detail::str("v", outs[k]));
  GradcheckResult res = gradcheck(first_order, all, o);
  if (!missing.empty()) {
    res.ok = false;
    res.report = res.report.empty() ? missing : missing + "; " + res.report;
  }
  return res;
}

GradcheckResult gradgradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                              const GradcheckOptions& opts, uint64_t seed) {
  return gradgradcheck(GradcheckFn([&fn](const TensorList& xs) { return TensorList{fn(xs)}; }), inputs, opts, seed);
}

GradcheckSkipFn skip_near(std::vector<double> points, double radius) {
  TRIDENT_CHECK(radius >= 0, "skip_near: radius must be >= 0, got ", radius);
  return [points = std::move(points), radius](const GradcheckPoint& p) {
    for (double q : points)
      if (std::fabs(p.value - q) <= radius) return true;
    return false;
  };
}

GradcheckSkipFn skip_where(TensorList masks) {
  std::vector<std::vector<bool>> flags;
  for (size_t i = 0; i < masks.size(); ++i) {
    const Tensor& m = masks[i];
    if (!m.defined()) {
      flags.emplace_back();
      continue;
    }
    TRIDENT_CHECK(m.dtype() == DType::Bool, "skip_where: mask ", i, " has dtype ", m.dtype(), "; expected bool");
    std::vector<bool> f;
    for (uint8_t v : m.to_vector<uint8_t>()) f.push_back(v != 0);
    flags.push_back(std::move(f));
    masks[i] = m.detach();  // kept for the shape check
  }
  return [flags = std::move(flags), masks = std::move(masks)](const GradcheckPoint& p) {
    if (p.input >= flags.size() || flags[p.input].empty()) return false;
    TRIDENT_CHECK(masks[p.input].sizes() == p.inputs[p.input].sizes(), "skip_where: mask ", p.input, " has shape ",
                  masks[p.input].sizes(), " but input ", p.input, " has shape ", p.inputs[p.input].sizes());
    return static_cast<bool>(flags[p.input][static_cast<size_t>(p.index)]);
  };
}

}  // namespace trident::autograd
