// The Local backend (a world of one, no MPI launcher): what a plain process gets from
// Communicator::world(), and data parallelism on it.
#include <gtest/gtest.h>

#include "parallel/comm/local_communicator.h"
#include "parallel/staged_collectives.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel;
using namespace trident::parallel::comm;
using trident::testing::expect_error;

TEST(LocalComm, APlainProcessIsAWorldOfOneWithoutMpi) {
  auto w = Communicator::world();
  EXPECT_EQ(w->backend(), Backend::Local);
  EXPECT_EQ(w->size(), 1);
  EXPECT_EQ(w->rank(), 0);
  EXPECT_EQ(w->world_ranks(), (std::vector<int>{0}));
  EXPECT_FALSE(mpi_initialized());
}

TEST(LocalComm, CollectivesOnOneRank) {
  auto c = make_local_communicator({"solo", std::nullopt});
  Tensor t = from_vector<float>({1, 2, 3});
  c->all_reduce(t, ReduceOp::Average).wait();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor out = zeros({3});
  c->all_gather(out, from_vector<float>({4, 5, 6})).wait();
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{4, 5, 6}));
  Tensor rs = zeros({2}, kI64);
  c->reduce_scatter(rs, from_vector<int64_t>({7, 8})).wait();
  EXPECT_EQ(rs.to_vector<int64_t>(), (std::vector<int64_t>{7, 8}));
  c->broadcast(t, 0).wait();
  c->barrier().wait();
  EXPECT_EQ(c->stats()[CommOp::AllReduce].bytes, 12);
  EXPECT_EQ(c->stats()[CommOp::AllGather].bytes, 12);
  EXPECT_EQ(c->stats()[CommOp::ReduceScatter].bytes, 16);
  EXPECT_EQ(c->stats().total_calls(), 5);
  expect_error([&] { c->send(t, 0); }, {"this rank itself", "group 'solo'"});
  auto s = c->split(3, 0, "child");
  EXPECT_EQ(s->name(), "child");
  EXPECT_EQ(s->size(), 1);
}

TEST(LocalComm, HostStagingTestModeOnOneRank) {
  // NOTE [Host staging] on the Local backend, with the testing hook: CPU tensors go through host
  // buffers as CUDA tensors go through pinned ones.
  const bool previous = host_staging_test_mode();
  set_host_staging_test_mode(true);
  auto c = make_local_communicator({"staged", std::nullopt});
  trident::testing::staging::run_all_layouts(*c, kCPU, {kF32, kBF16, kI64});
  trident::testing::staging::run_in_place(*c, kCPU, kF32);
  trident::testing::staging::run_written_on_completion(*c, kCPU);
  set_host_staging_test_mode(previous);
  // Without the hook the same checks hold on the direct path.
  auto d = make_local_communicator({"direct", std::nullopt});
  trident::testing::staging::run_all_layouts(*d, kCPU, {kF32});
  trident::testing::staging::run_in_place(*d, kCPU, kF32);
}

TEST(LocalComm, ADestroyedCommunicatorFreesItsStateAndItsLastOperations) {
  // The operations in flight (the last one stays listed until the next launch reaps it) hold the
  // communicator's state and the state held them: a cycle that leaked the state, the buffers and a
  // backend's handle (an NCCL communicator) for good. Freed now when the communicator goes.
  std::weak_ptr<CommState> state;
  std::weak_ptr<Work::Impl> impl;
  Tensor t = from_vector<float>({1, 2, 3});
  {
    auto c = make_local_communicator({"short-lived", std::nullopt});
    Work w = c->all_reduce(t);
    w.wait();
    state = w.impl()->comm;
    impl = w.impl();
  }
  EXPECT_TRUE(state.expired());
  EXPECT_TRUE(impl.expired());
  // A Work the user keeps stays usable after its communicator is gone, and then lets go too.
  {
    auto c = make_local_communicator({"outlived", std::nullopt});
    Work kept = c->broadcast(t, 0);
    state = kept.impl()->comm;
    c.reset();
    EXPECT_FALSE(state.expired());
    kept.wait();
    EXPECT_TRUE(kept.completed());
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  }
  EXPECT_TRUE(state.expired());
}

TEST(LocalComm, TimeoutFromTheEnvironmentIsValidated) {
  setenv("TRIDENT_COMM_TIMEOUT", "2.5", 1);
  EXPECT_EQ(default_timeout().count(), 2.5);
  setenv("TRIDENT_COMM_TIMEOUT", "soon", 1);
  expect_error([] { default_timeout(); }, {"TRIDENT_COMM_TIMEOUT", "soon"});
  unsetenv("TRIDENT_COMM_TIMEOUT");
  EXPECT_EQ(default_timeout().count(), 300.0);
}

TEST(LocalDataParallel, AWorldOfOneTrainsExactlyAsSerial) {
  // Averaging over one rank is the identity, so dp = 1 must match serial training bit for bit.
  auto make = [] {
    Generator g(3);
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
        std::make_shared<nn::Linear>(4, 8, true, kF32, &g), std::make_shared<nn::Tanh>(),
        std::make_shared<nn::Linear>(8, 2, true, kF32, &g)});
  };
  auto serial = make(), dp = make();
  DataParallel ddp(*dp, make_local_communicator({"dp", std::nullopt}));
  nn::optim::SGD o1(serial->parameters(), {.lr = 0.1}), o2(dp->parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    Generator g(50 + static_cast<uint64_t>(step));
    Tensor x = randn({5, 4}, kF32, &g), y = randn({5, 2}, kF32, &g);
    mse_loss(serial->forward(x), y).backward();
    mse_loss(dp->forward(x), y).backward();
    o1.step();
    o2.step();
    o1.zero_grad();
    o2.zero_grad();
  }
  const auto a = serial->parameters(), b = dp->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].to_vector<float>(), b[i].to_vector<float>()) << i;
  EXPECT_EQ(ddp.group().stats()[CommOp::AllReduce].calls, 3) << "one bucket per step";
}

TEST(Launch, APlainProcessIsDpOne) {
  Mesh mesh = launch_mesh({});
  EXPECT_EQ(mesh.size(Axis::DP), 1);
  EXPECT_EQ(dp_batch_rows(12, mesh.group(Axis::DP)), (std::pair<int64_t, int64_t>{0, 12}));
  expect_error([] { launch_mesh({.dp = 2, .pp = 1, .tp = 1}); },
               {"runs alone", "--dp 2 x --pp 1 x --tp 1 is 2", "mpirun -np 2"});
  expect_error([] { launch_mesh({.dp = 0, .pp = 1, .tp = 1}); }, {"--dp 0", "positive"});
}
