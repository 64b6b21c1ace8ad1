// The collectives against expected values computed here, run by ctest under mpirun -np 2 and
// -np 4 (every rank runs every test). Values are small integers, exact in every dtype tested
// (bf16 holds integers up to 256 exactly), so results are compared for equality.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>

#include "test_util.h"

using namespace trident;
using namespace trident::parallel;
using namespace trident::parallel::comm;
using trident::testing::expect_error;

namespace {

std::shared_ptr<Communicator> world() { return Communicator::world(); }

const std::vector<DType> kDTypes = {kF32, kF64, kBF16, kI64};
const std::vector<int64_t> kSizes = {0, 1, 7, 1001};  // empty, one, odd, not a multiple of the ranks

// Element i of global rank r's input: small distinct integers.
double value(int r, int64_t i) { return static_cast<double>((r + 1) * (i % 7 + 1)); }

Tensor filled(int64_t n, DType d, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = f(i);
  return from_vector<double>(v, {n}, d);
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// The world ranks of the members of a communicator's group, from NOTE [Mesh layout] written out
// here (not taken from the code under test) for mesh groups, or the whole world.
struct Group {
  std::shared_ptr<Communicator> comm;
  std::vector<int> members;  // world ranks, by group rank
  std::string what;
};

void run_collectives(const Group& g) {
  Communicator& c = *g.comm;
  const int n = c.size();
  const int me = g.members[static_cast<size_t>(c.rank())];
  ASSERT_EQ(static_cast<int>(g.members.size()), n) << g.what;
  for (DType d : kDTypes) {
    for (int64_t size : kSizes) {
      SCOPED_TRACE(detail::str(g.what, " dtype ", d, " size ", size));
      // all_reduce: sum, max, average
      {
        Tensor t = filled(size, d, [&](int64_t i) { return value(me, i); });
        c.all_reduce(t, ReduceOp::Sum).wait();
        Tensor m = filled(size, d, [&](int64_t i) { return value(me, i); });
        c.all_reduce(m, ReduceOp::Max).wait();
        for (int64_t i = 0; i < size; ++i) {
          double sum = 0, mx = -1;
          for (int r : g.members) sum += value(r, i), mx = std::max(mx, value(r, i));
          ASSERT_EQ(values(t)[static_cast<size_t>(i)], sum) << "sum at " << i;
          ASSERT_EQ(values(m)[static_cast<size_t>(i)], mx) << "max at " << i;
        }
        if (is_floating(d)) {
          // Multiples of n, so the average is an exact integer.
          Tensor a = filled(size, d, [&](int64_t i) { return n * value(me, i); });
          c.all_reduce(a, ReduceOp::Average).wait();
          for (int64_t i = 0; i < size; ++i) {
            double sum = 0;
            for (int r : g.members) sum += value(r, i);
            ASSERT_EQ(values(a)[static_cast<size_t>(i)], sum) << "average at " << i;
          }
        }
      }
      // broadcast from the last rank
      {
        Tensor t = filled(size, d, [&](int64_t i) { return value(me, i); });
        c.broadcast(t, n - 1).wait();
        for (int64_t i = 0; i < size; ++i) ASSERT_EQ(values(t)[static_cast<size_t>(i)], value(g.members.back(), i));
      }
      // all_gather, even: rank after rank
      {
        Tensor in = filled(size, d, [&](int64_t i) { return value(me, i); });
        Tensor out = full({n * size}, -1.0, d);
        c.all_gather(out, in).wait();
        const std::vector<double> o = values(out);
        for (int r = 0; r < n; ++r)
          for (int64_t i = 0; i < size; ++i)
            ASSERT_EQ(o[static_cast<size_t>(r * size + i)], value(g.members[static_cast<size_t>(r)], i));
      }
      // reduce_scatter, even: slot k of the sum
      {
        Tensor in = filled(n * size, d, [&](int64_t i) { return value(me, i); });
        Tensor out = full({size}, -1.0, d);
        c.reduce_scatter(out, in, ReduceOp::Sum).wait();
        const std::vector<double> o = values(out);
        for (int64_t i = 0; i < size; ++i) {
          double sum = 0;
          for (int r : g.members) sum += value(r, c.rank() * size + i);
          ASSERT_EQ(o[static_cast<size_t>(i)], sum) << "at " << i;
        }
      }
      // uneven all_gather and reduce_scatter: rank k has size + k elements, rank 1 none
      {
        std::vector<int64_t> counts;
        for (int k = 0; k < n; ++k) counts.push_back(k == 1 ? 0 : size + k);
        const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
        int64_t displ = 0;
        for (int k = 0; k < c.rank(); ++k) displ += counts[static_cast<size_t>(k)];
        const int64_t mine = counts[static_cast<size_t>(c.rank())];

        Tensor in = filled(mine, d, [&](int64_t i) { return value(me, i); });
        Tensor out = full({total}, -1.0, d);
        c.all_gather(out, in, counts).wait();
        const std::vector<double> o = values(out);
        int64_t off = 0;
        for (int k = 0; k < n; ++k) {
          for (int64_t i = 0; i < counts[static_cast<size_t>(k)]; ++i)
            ASSERT_EQ(o[static_cast<size_t>(off + i)], value(g.members[static_cast<size_t>(k)], i)) << "gather slot " << k;
          off += counts[static_cast<size_t>(k)];
        }

        Tensor rin = filled(total, d, [&](int64_t i) { return value(me, i); });
        Tensor rout = full({mine}, -1.0, d);
        c.reduce_scatter(rout, rin, counts, ReduceOp::Sum).wait();
        const std::vector<double> ro = values(rout);
        for (int64_t i = 0; i < mine; ++i) {
          double sum = 0;
          for (int r : g.members) sum += value(r, displ + i);
          ASSERT_EQ(ro[static_cast<size_t>(i)], sum) << "scatter at " << i;
        }
      }
      // send / receive around the ring, both in one batch
      if (n > 1) {
        const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
        Tensor out = filled(size, d, [&](int64_t i) { return value(me, i); });
        Tensor in = full({size}, -1.0, d);
        c.batch_send_recv({recv_op(in, prev), send_op(out, next)}).wait();
        for (int64_t i = 0; i < size; ++i)
          ASSERT_EQ(values(in)[static_cast<size_t>(i)], value(g.members[static_cast<size_t>(prev)], i));
      }
    }
  }
  c.barrier().wait();
}

}  // namespace

TEST(CommMpi, WorldIsTheMpiWorld) {
  auto w = world();
  EXPECT_EQ(w->backend(), Backend::MPI);
  EXPECT_GE(w->size(), 2);
  EXPECT_EQ(w->world_rank(), w->rank());
  EXPECT_EQ(w->name(), "world");
  EXPECT_EQ(Communicator::world().get(), w.get()) << "one world per process";
}

TEST(CommMpi, HostStagingTestModeFollowsTheEnvironment) {
  // ctest runs this program twice, the second time with TRIDENT_COMM_STAGE_HOST=1: every test
  // then goes through NOTE [Host staging].
  const char* v = std::getenv("TRIDENT_COMM_STAGE_HOST");
  EXPECT_EQ(host_staging_test_mode(), v != nullptr && std::string(v) == "1");
}

TEST(CommMpi, CollectivesOnTheWorld) {
  std::vector<int> all(static_cast<size_t>(world()->size()));
  std::iota(all.begin(), all.end(), 0);
  run_collectives({world(), all, "world"});
}

TEST(CommMpi, CollectivesOnEachMeshAxis) {
  // Every axis of a mesh with two ranks on it: with 4 ranks dp=2 x pp=2 x tp=1 and dp=1 x pp=2 x
  // tp=2 and dp=2 x pp=1 x tp=2 (the 2x2 meshes), with 2 ranks each axis alone.
  const int n = world()->size();
  std::vector<MeshShape> shapes;
  if (n == 4) {
    shapes = {{2, 2, 1}, {1, 2, 2}, {2, 1, 2}};
  } else {
    shapes = {{n, 1, 1}, {1, n, 1}, {1, 1, n}};
  }
  for (const MeshShape& s : shapes) {
    Mesh mesh(world(), s);
    // NOTE [Mesh layout], written out: rank = (dp * PP + pp) * TP + tp.
    const int r = world()->rank();
    const int dp = r / (s.pp * s.tp), pp = (r / s.tp) % s.pp, tp = r % s.tp;
    EXPECT_EQ(mesh.coord(), (MeshCoord{dp, pp, tp})) << mesh.str();
    for (Axis a : {Axis::DP, Axis::PP, Axis::TP}) {
      std::vector<int> members;
      const int len = a == Axis::DP ? s.dp : a == Axis::PP ? s.pp : s.tp;
      for (int i = 0; i < len; ++i) {
        const int d2 = a == Axis::DP ? i : dp, p2 = a == Axis::PP ? i : pp, t2 = a == Axis::TP ? i : tp;
        members.push_back((d2 * s.pp + p2) * s.tp + t2);
      }
      Communicator& g = mesh.group(a);
      ASSERT_EQ(g.size(), len);
      EXPECT_EQ(g.rank(), mesh.index(a));
      EXPECT_EQ(g.world_ranks(), members) << g.name();
      EXPECT_EQ(g.name().substr(0, 3), std::string(axis_name(a)) + "[");
      if (len > 1) run_collectives({mesh.group_ptr(a), members, mesh.str() + " axis " + std::string(axis_name(a))});
    }
  }
}

TEST(CommMpi, HalfPrecisionSumsRoundOnce) {
  // NOTE [Half reductions]: rank 0 holds 1, the others 3 * 2^-9 each. The f32 sum 1 + (n-1) *
  // 3 * 2^-9 rounded once to bf16 (7 fraction bits: steps of 2^-7 near 1) is what must come back;
  // with 4 ranks, rounding after each addition would keep returning 1.
  auto c = world();
  const int n = c->size();
  const double small = 3.0 / 512.0;
  const double exact = 1.0 + (n - 1) * small;
  for (DType d : {kBF16, kF16}) {
    Tensor t = full({5}, c->rank() == 0 ? 1.0 : small, d);
    c->all_reduce(t, ReduceOp::Sum).wait();
    const double expected = full({1}, exact, kF32).to(d).item<double>();  // f32 -> half: round to nearest even
    for (double v : values(t)) EXPECT_EQ(v, expected) << d << " with " << n << " ranks";
  }
  if (n == 4) {
    EXPECT_EQ(full({1}, exact, kF32).to(kBF16).item<double>(), 1.0 + 1.0 / 64.0);
  }
}

TEST(CommMpi, NonContiguousAndInPlaceBuffers) {
  auto c = world();
  const int n = c->size(), r = c->rank();
  // A transposed view is staged through a contiguous copy and written back.
  Tensor base = filled(6, kF32, [&](int64_t i) { return value(r, i); });
  Tensor t = transpose(reshape(base, {2, 3}), 0, 1);
  ASSERT_FALSE(t.is_contiguous());
  c->all_reduce(t, ReduceOp::Sum).wait();
  for (int64_t i = 0; i < 6; ++i) {
    double sum = 0;
    for (int k = 0; k < n; ++k) sum += value(k, i);
    EXPECT_EQ(values(base)[static_cast<size_t>(i)], sum);
  }
  // all_gather whose input is this rank's slot of the output (ZeRO's parameter gather).
  Tensor out = full({3 * n}, -1.0, kF64);
  Tensor slot = narrow(out, 0, 3 * r, 3);
  copy_(slot, filled(3, kF64, [&](int64_t i) { return value(r, i); }));
  c->all_gather(out, slot).wait();
  for (int k = 0; k < n; ++k)
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(values(out)[static_cast<size_t>(3 * k + i)], value(k, i));
  // reduce_scatter whose output is this rank's slot of the input (ZeRO's gradient shard).
  Tensor grads = filled(2 * n, kF32, [&](int64_t i) { return value(r, i); });
  Tensor mine = narrow(grads, 0, 2 * r, 2);
  c->reduce_scatter(mine, grads, ReduceOp::Sum).wait();
  for (int64_t i = 0; i < 2; ++i) {
    double sum = 0;
    for (int k = 0; k < n; ++k) sum += value(k, 2 * r + i);
    EXPECT_EQ(values(mine)[static_cast<size_t>(i)], sum);
  }
}

TEST(CommMpi, ManyOperationsInFlightCompleteInAnyWaitOrder) {
  auto c = world();
  std::vector<Tensor> ts;
  std::vector<Work> works;
  for (int k = 0; k < 8; ++k) {
    ts.push_back(full({100 + k}, static_cast<double>(k + c->rank()), kF64));
    works.push_back(c->all_reduce(ts.back(), ReduceOp::Sum));
  }
  // Wait newest first; a dropped handle still completes (synchronize).
  for (int k = 7; k >= 1; --k) works[static_cast<size_t>(k)].wait();
  works[0] = Work();
  c->synchronize();
  const int n = c->size();
  for (int k = 0; k < 8; ++k) {
    const double expected = n * k + n * (n - 1) / 2.0;
    for (double v : values(ts[static_cast<size_t>(k)])) ASSERT_EQ(v, expected) << "operation " << k;
  }
}

TEST(CommMpi, TestPollsUntilComplete) {
  auto c = world();
  Tensor t = full({10000}, 1.0, kF32);
  Work w = c->all_reduce(t, ReduceOp::Sum);
  while (!w.test()) {
  }
  EXPECT_TRUE(w.completed());
  EXPECT_EQ(values(t).back(), static_cast<double>(c->size()));
  EXPECT_NE(w.description().find("all_reduce of 40000 bytes (f32 [10000], sum) on group 'world'"), std::string::npos)
      << w.description();
}

TEST(CommMpi, CountersPerGroup) {
  auto w = world();
  const int n = w->size();
  auto c = w->split(0, w->rank(), "counted");
  EXPECT_EQ(c->stats().total_calls(), 0);
  Tensor a = zeros({10}, kF32), b = zeros({3}, kBF16), g = zeros({4 * n}, kF64), s = zeros({4}, kF64);
  c->all_reduce(a).wait();
  c->all_reduce(b).wait();
  c->all_gather(g, s).wait();
  c->reduce_scatter(s, g).wait();
  c->broadcast(a, 0).wait();
  c->barrier().wait();
  const CommStats& st = c->stats();
  EXPECT_EQ(st[CommOp::AllReduce].calls, 2);
  EXPECT_EQ(st[CommOp::AllReduce].bytes, 10 * 4 + 3 * 2) << "the bf16 payload, not the f32 on the wire";
  EXPECT_EQ(st[CommOp::AllGather].bytes, 4 * n * 8) << "the gathered output";
  EXPECT_EQ(st[CommOp::ReduceScatter].bytes, 4 * n * 8) << "the unreduced input";
  EXPECT_EQ(st[CommOp::Broadcast].bytes, 40);
  EXPECT_EQ(st[CommOp::Barrier].calls, 1);
  EXPECT_EQ(st.total_calls(), 6);
  EXPECT_EQ(st.total_bytes(), 46 + 2 * 4 * n * 8 + 40);
  c->reset_stats();
  EXPECT_EQ(c->stats().total_bytes(), 0);
}

TEST(CommMpi, SplitGroupsByColorAndKey) {
  auto w = world();
  const int n = w->size(), r = w->rank();
  // Even and odd ranks, ordered backwards by key.
  auto c = w->split(r % 2, n - r, "parity");
  std::vector<int> expected;
  for (int k = n - 1; k >= 0; --k)
    if (k % 2 == r % 2) expected.push_back(k);
  EXPECT_EQ(c->world_ranks(), expected);
  EXPECT_EQ(c->world_rank(), r);
  Tensor t = full({1}, static_cast<double>(r), kI64);
  c->all_reduce(t).wait();
  int64_t sum = 0;
  for (int k : expected) sum += k;
  EXPECT_EQ(t.item<int64_t>(), sum);
}

TEST(CommMpi, BadArgumentsFailOnTheCallingRankBeforeCommunicating) {
  auto c = world();
  const int n = c->size();
  expect_error([&] { c->all_reduce(zeros({2}, kI64), ReduceOp::Average); }, {"all_reduce", "average", "i64"});
  expect_error([&] { c->all_reduce(zeros({2}, kBool)); }, {"bool tensors cannot be reduced"});
  expect_error([&] { c->all_gather(zeros({3}), zeros({2})); }, {"all_gather", "group 'world'", "elements"});
  expect_error([&] { c->all_gather(zeros({2 * n}, kF64), zeros({2})); }, {"input is f32 but output is f64"});
  std::vector<int64_t> bad(static_cast<size_t>(n), 1);
  expect_error([&] { c->all_gather(zeros({n}), zeros({2}), bad); }, {"counts[", "input has 2 elements"});
  expect_error([&] { c->broadcast(zeros({1}), n); }, {"root", "not a rank of the group"});
  expect_error([&] { c->send(zeros({1}), c->rank()); }, {"this rank itself"});
  expect_error([&] { c->recv(zeros({1}), -1); }, {"not a rank of the group"});
  expect_error([&] { c->all_reduce(Tensor()); }, {"undefined tensor"});
  expect_error([&] { c->set_timeout(Seconds(0)); }, {"positive"});
  EXPECT_EQ(c->stats().total_calls() >= 0, true);
  // The world is still usable: nothing was launched.
  c->barrier().wait();
}

TEST(CommMpi, ReceivingFromALargerSendIsAnErrorNotGarbage) {
  auto w = world();
  auto c = w->split(w->rank() < 2 ? 0 : 1, w->rank(), "pair");
  if (w->rank() >= 2) return;
  if (c->rank() == 0) {
    c->send(full({3}, 1.0), 1).wait();
    c->send(full({2}, 2.0), 1).wait();
  } else {
    Tensor small = zeros({4});
    expect_error([&] { c->recv(small, 0).wait(); }, {"received 3 elements from rank 0", "has 4"});
    Tensor ok = zeros({2});
    c->recv(ok, 0).wait();
    EXPECT_EQ(values(ok), (std::vector<double>{2, 2}));
  }
}
