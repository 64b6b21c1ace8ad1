// Every communicator operation on tensors of every layout, against values computed here: shared
// by the tests of NOTE [Host staging] (parallel/comm/communicator.h): comm_stage_mpi_test.cpp and
// local_comm_test.cpp run them on CPU tensors with the testing hook on (staged through separate
// host buffers) and off, cuda/comm_test.cpp on CUDA tensors (staged through pinned memory).
// Element i of group rank r's input is value(r, i), a small integer, exact in every dtype used
// (bf16 holds integers up to 256), so results are compared for equality.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "test_util.h"

namespace trident::testing::staging {

using parallel::comm::Communicator;
using parallel::comm::ReduceOp;

inline double value(int r, int64_t i) { return static_cast<double>((r + 1) * (i % 7 + 1)); }
// What the elements of a strided tensor's storage outside the view hold: never written.
inline constexpr double kSentinel = -5;

enum class Layout { Contiguous, Transposed, Strided };
inline const std::vector<Layout> kLayouts = {Layout::Contiguous, Layout::Transposed, Layout::Strided};
inline const char* layout_name(Layout l) {
  return l == Layout::Contiguous ? "contiguous" : l == Layout::Transposed ? "transposed" : "strided";
}

struct Laid {
  Tensor t;     // what the communicator gets
  Tensor base;  // the whole of its storage
  Layout layout;
};

// A [rows, cols] tensor on `device` whose element (i, j) is f(i * cols + j): contiguous; the
// transpose of a contiguous [cols, rows] (non-contiguous when rows, cols > 1); or every other
// element of a buffer twice as large, the others holding kSentinel.
inline Laid make(Layout layout, int64_t rows, int64_t cols, DType d, Device device,
                 const std::function<double(int64_t)>& f) {
  const int64_t n = rows * cols;
  std::vector<double> v(static_cast<size_t>(layout == Layout::Strided ? 2 * n : n));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t k = i * cols + j;
      switch (layout) {
        case Layout::Contiguous: v[static_cast<size_t>(k)] = f(k); break;
        case Layout::Transposed: v[static_cast<size_t>(j * rows + i)] = f(k); break;
        case Layout::Strided:
          v[static_cast<size_t>(2 * k)] = kSentinel;
          v[static_cast<size_t>(2 * k + 1)] = f(k);
          break;
      }
    }
  }
  Tensor base = from_vector<double>(v, {static_cast<int64_t>(v.size())}, d);
  if (device.is_cuda()) base = base.to(device);
  Tensor t;
  switch (layout) {
    case Layout::Contiguous: t = base.as_strided({rows, cols}, {cols, 1}, 0); break;
    case Layout::Transposed: t = base.as_strided({rows, cols}, {1, rows}, 0); break;
    case Layout::Strided: t = base.as_strided({rows, cols}, {2 * cols, 2}, 1); break;
  }
  if (layout != Layout::Contiguous && rows > 1 && cols > 1) {
    EXPECT_FALSE(t.is_contiguous());
  }
  return {t, base, layout};
}

inline Laid filled(Layout layout, int64_t rows, int64_t cols, DType d, Device device, double x) {
  return make(layout, rows, cols, d, device, [x](int64_t) { return x; });
}

// x holds `expected` (row-major), and the storage around a strided view is untouched.
inline void expect_values(const Laid& x, const std::vector<double>& expected, const std::string& what) {
  EXPECT_EQ(x.t.to_vector<double>(), expected) << what << " (" << layout_name(x.layout) << ")";
  if (x.layout == Layout::Strided) {
    const std::vector<double> b = x.base.to_vector<double>();
    for (size_t k = 0; k < b.size(); k += 2) ASSERT_EQ(b[k], kSentinel) << what << ": element " << k << " outside the view";
  }
}

// Every operation on tensors of every layout (sent, gathered and reduced tensors, and received
// ones, of one layout per round) and dtype.
inline void run_all_layouts(Communicator& c, Device device, const std::vector<DType>& dtypes) {
  const int n = c.size(), r = c.rank();
  const int64_t rows = 3, cols = 5;  // 15 elements: a multiple of nothing relevant
  const int64_t m = rows * cols;
  for (DType d : dtypes) {
    for (Layout L : kLayouts) {
      SCOPED_TRACE(detail::str(c.name(), " rank ", r, " of ", n, ", ", d, ", ", layout_name(L), " on ", device));
      auto mine = [&](int64_t i) { return value(r, i); };
      // all_reduce: sum, max, average
      {
        Laid s = make(L, rows, cols, d, device, mine), x = make(L, rows, cols, d, device, mine);
        c.all_reduce(s.t, ReduceOp::Sum).wait();
        c.all_reduce(x.t, ReduceOp::Max).wait();
        std::vector<double> sum(static_cast<size_t>(m), 0.0), mx(static_cast<size_t>(m), -1.0);
        for (int64_t i = 0; i < m; ++i) {
          for (int k = 0; k < n; ++k) {
            sum[static_cast<size_t>(i)] += value(k, i);
            mx[static_cast<size_t>(i)] = std::max(mx[static_cast<size_t>(i)], value(k, i));
          }
        }
        expect_values(s, sum, "all_reduce sum");
        expect_values(x, mx, "all_reduce max");
        if (is_floating(d)) {
          Laid a = make(L, rows, cols, d, device, [&](int64_t i) { return n * value(r, i); });
          c.all_reduce(a.t, ReduceOp::Average).wait();
          expect_values(a, sum, "all_reduce average");
        }
      }
      // broadcast from the last rank
      {
        Laid b = make(L, rows, cols, d, device, mine);
        c.broadcast(b.t, n - 1).wait();
        std::vector<double> e(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) e[static_cast<size_t>(i)] = value(n - 1, i);
        expect_values(b, e, "broadcast");
      }
      // all_gather and reduce_scatter, even: [n * rows, cols] <-> [rows, cols]
      {
        Laid in = make(L, rows, cols, d, device, mine), out = filled(L, n * rows, cols, d, device, -1);
        c.all_gather(out.t, in.t).wait();
        std::vector<double> e(static_cast<size_t>(n * m)), own(static_cast<size_t>(m));
        for (int k = 0; k < n; ++k)
          for (int64_t i = 0; i < m; ++i) e[static_cast<size_t>(k * m + i)] = value(k, i);
        for (int64_t i = 0; i < m; ++i) own[static_cast<size_t>(i)] = value(r, i);
        expect_values(out, e, "all_gather");
        expect_values(in, own, "all_gather's input, unchanged");

        Laid rin = make(L, n * rows, cols, d, device, mine), rout = filled(L, rows, cols, d, device, -1);
        c.reduce_scatter(rout.t, rin.t, ReduceOp::Sum).wait();
        std::vector<double> rs(static_cast<size_t>(m), 0.0);
        for (int64_t i = 0; i < m; ++i)
          for (int k = 0; k < n; ++k) rs[static_cast<size_t>(i)] += value(k, r * m + i);
        expect_values(rout, rs, "reduce_scatter");
      }
      // uneven: rank k has rows_k = k + 1 rows of 2 (rank 1 none when there are several)
      {
        std::vector<int64_t> rows_of, counts;
        for (int k = 0; k < n; ++k) {
          rows_of.push_back(k == 1 ? 0 : k + 1);
          counts.push_back(2 * rows_of.back());
        }
        const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
        int64_t displ = 0;
        for (int k = 0; k < r; ++k) displ += counts[static_cast<size_t>(k)];
        const int64_t own = counts[static_cast<size_t>(r)];

        Laid in = make(L, rows_of[static_cast<size_t>(r)], 2, d, device, mine);
        Laid out = filled(L, total / 2, 2, d, device, -1);
        c.all_gather(out.t, in.t, counts).wait();
        std::vector<double> e;
        for (int k = 0; k < n; ++k)
          for (int64_t i = 0; i < counts[static_cast<size_t>(k)]; ++i) e.push_back(value(k, i));
        expect_values(out, e, "uneven all_gather");

        Laid rin = make(L, total / 2, 2, d, device, mine), rout = filled(L, rows_of[static_cast<size_t>(r)], 2, d, device, -1);
        c.reduce_scatter(rout.t, rin.t, counts, ReduceOp::Sum).wait();
        std::vector<double> rs(static_cast<size_t>(own), 0.0);
        for (int64_t i = 0; i < own; ++i)
          for (int k = 0; k < n; ++k) rs[static_cast<size_t>(i)] += value(k, displ + i);
        expect_values(rout, rs, "uneven reduce_scatter");
      }
      // send / receive around the ring, in one batch and one at a time
      if (n > 1) {
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        Laid out = make(L, rows, cols, d, device, mine), in = filled(L, rows, cols, d, device, -1);
        c.batch_send_recv({parallel::comm::recv_op(in.t, prev), parallel::comm::send_op(out.t, next)}).wait();
        std::vector<double> e(static_cast<size_t>(m)), own(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) {
          e[static_cast<size_t>(i)] = value(prev, i);
          own[static_cast<size_t>(i)] = value(r, i);
        }
        expect_values(in, e, "batch receive");
        expect_values(out, own, "batch send's tensor, unchanged");

        Laid in2 = filled(L, rows, cols, d, device, -1);
        // Separately: the send is launched, the receive waited for, then the send.
        parallel::comm::Work sent = c.send(out.t, next);
        c.recv(in2.t, prev).wait();
        sent.wait();
        expect_values(in2, e, "recv");
      }
    }
  }
  c.barrier().wait();
}

// The in-place forms, on a contiguous buffer: an all_gather whose input is this rank's slot of
// the output (even and uneven), one whose input lies in another rank's slot (overlapping, not in
// place), and a reduce_scatter whose output is this rank's slot of the input.
inline void run_in_place(Communicator& c, Device device, DType d) {
  const int n = c.size(), r = c.rank();
  SCOPED_TRACE(detail::str(c.name(), " rank ", r, " of ", n, ", ", d, " on ", device, ", in place"));
  const int64_t per = 4;
  {
    Laid out = filled(Layout::Contiguous, n, per, d, device, -1);
    Tensor slot = out.t.as_strided({per}, {1}, out.t.storage_offset() + r * per);
    Laid src = make(Layout::Contiguous, 1, per, d, device, [&](int64_t i) { return value(r, i); });
    copy_(slot, src.t.as_strided({per}, {1}, src.t.storage_offset()));
    c.all_gather(out.t, slot).wait();
    std::vector<double> e;
    for (int k = 0; k < n; ++k)
      for (int64_t i = 0; i < per; ++i) e.push_back(value(k, i));
    expect_values(out, e, "all_gather into its own slot");
  }
  {
    // Uneven: rank k has k + 1 elements.
    std::vector<int64_t> counts;
    for (int k = 0; k < n; ++k) counts.push_back(k + 1);
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    const int64_t displ = static_cast<int64_t>(r) * (r + 1) / 2;
    Laid out = filled(Layout::Contiguous, total, 1, d, device, -1);
    Tensor slot = out.t.as_strided({r + 1}, {1}, out.t.storage_offset() + displ);
    Laid src = make(Layout::Contiguous, r + 1, 1, d, device, [&](int64_t i) { return value(r, i); });
    copy_(slot, src.t.as_strided({r + 1}, {1}, src.t.storage_offset()));
    c.all_gather(out.t, slot, counts).wait();
    std::vector<double> e;
    for (int k = 0; k < n; ++k)
      for (int64_t i = 0; i <= k; ++i) e.push_back(value(k, i));
    expect_values(out, e, "uneven all_gather into its own slot");
  }
  if (n > 1) {
    // The input is the next rank's slot of the output: it overlaps the output, not in place.
    Laid out = filled(Layout::Contiguous, n, per, d, device, -1);
    Tensor other = out.t.as_strided({per}, {1}, out.t.storage_offset() + ((r + 1) % n) * per);
    Laid src = make(Layout::Contiguous, 1, per, d, device, [&](int64_t i) { return value(r, i); });
    copy_(other, src.t.as_strided({per}, {1}, src.t.storage_offset()));
    c.all_gather(out.t, other).wait();
    std::vector<double> e;
    for (int k = 0; k < n; ++k)
      for (int64_t i = 0; i < per; ++i) e.push_back(value(k, i));
    expect_values(out, e, "all_gather from another rank's slot");
  }
  {
    Laid grads = make(Layout::Contiguous, n, per, d, device, [&](int64_t i) { return value(r, i); });
    Tensor shard = grads.t.as_strided({per}, {1}, grads.t.storage_offset() + r * per);
    c.reduce_scatter(shard, grads.t, ReduceOp::Sum).wait();
    std::vector<double> e;
    for (int k = 0; k < n; ++k) {
      for (int64_t i = 0; i < per; ++i) {
        double v = value(r, k * per + i);  // other slots of the input are only read
        if (k == r) {
          v = 0;
          for (int q = 0; q < n; ++q) v += value(q, k * per + i);
        }
        e.push_back(v);
      }
    }
    expect_values(grads, e, "reduce_scatter into its own slot");
  }
  c.barrier().wait();
}

// A staged output is the user's only when the operation completes: before wait() it still holds
// what it held (the backend writes the host buffer), after it the gathered values.
inline void run_written_on_completion(Communicator& c, Device device) {
  const int n = c.size(), r = c.rank();
  Laid in = make(Layout::Contiguous, 2, 3, kF32, device, [&](int64_t i) { return value(r, i); });
  Laid out = filled(Layout::Contiguous, 2 * n, 3, kF32, device, -1);
  const uint32_t version = out.t.version();
  parallel::comm::Work w = c.all_gather(out.t, in.t);
  EXPECT_EQ(out.t.to_vector<double>(), std::vector<double>(static_cast<size_t>(6 * n), -1.0))
      << "written before completion: the backend got the user's tensor, not a host buffer";
  EXPECT_EQ(out.t.version(), version);
  w.wait();
  std::vector<double> e;
  for (int k = 0; k < n; ++k)
    for (int64_t i = 0; i < 6; ++i) e.push_back(value(k, i));
  expect_values(out, e, "all_gather after wait");
  EXPECT_GT(out.t.version(), version) << "the copy back is an in-place write";
}

}  // namespace trident::testing::staging
