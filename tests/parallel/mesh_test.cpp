// The mesh arithmetic (NOTE [Mesh layout]) and its errors, without communicators; the groups it
// creates are tested under mpirun (comm_mpi_test.cpp).
#include <gtest/gtest.h>

#include "parallel/comm/local_communicator.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel;
using trident::testing::expect_error;

TEST(MeshLayout, TpIsInnermostThenPpThenDp) {
  MeshLayout l(8, {.dp = 2, .pp = 2, .tp = 2});
  // Written out by hand: rank = (dp * 2 + pp) * 2 + tp.
  EXPECT_EQ(l.coord(0), (MeshCoord{0, 0, 0}));
  EXPECT_EQ(l.coord(1), (MeshCoord{0, 0, 1}));
  EXPECT_EQ(l.coord(2), (MeshCoord{0, 1, 0}));
  EXPECT_EQ(l.coord(5), (MeshCoord{1, 0, 1}));
  EXPECT_EQ(l.coord(7), (MeshCoord{1, 1, 1}));
  for (int r = 0; r < 8; ++r) EXPECT_EQ(l.rank(l.coord(r)), r);
  EXPECT_EQ(l.group_ranks(Axis::TP, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(l.group_ranks(Axis::PP, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(l.group_ranks(Axis::DP, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(l.str(), "dp=2 x pp=2 x tp=2");
}

TEST(MeshLayout, InfersOneSize) {
  MeshLayout l(12, {.dp = -1, .pp = 3, .tp = 2});
  EXPECT_EQ(l.dp(), 2);
  MeshLayout t(12, {.dp = 2, .pp = 1, .tp = -1});
  EXPECT_EQ(t.tp(), 6);
  MeshLayout d(5, {});
  EXPECT_EQ(d.dp(), 5);
  EXPECT_EQ(d.pp(), 1);
  EXPECT_EQ(d.tp(), 1);
}

TEST(MeshLayout, SizesThatDoNotFitTheWorldAreClearErrors) {
  expect_error([] { MeshLayout(8, {.dp = 3, .pp = 1, .tp = 2}); }, {"dp=3 x pp=1 x tp=2", "has 6 ranks", "world has 8"});
  expect_error([] { MeshLayout(8, {.dp = -1, .pp = 3, .tp = 1}); },
               {"multiply to 3", "does not divide the world of 8", "dp cannot be inferred"});
  expect_error([] { MeshLayout(4, {.dp = -1, .pp = -1, .tp = 1}); }, {"only one size can be inferred"});
  expect_error([] { MeshLayout(4, {.dp = 0, .pp = 4, .tp = 1}); }, {"dp must be positive"});
  expect_error([] { MeshLayout(4, {.dp = 4, .pp = 1, .tp = -2}); }, {"tp must be positive", "-2"});
  MeshLayout l(4, {.dp = 2, .pp = 1, .tp = 2});
  expect_error([&] { l.coord(4); }, {"rank 4", "outside the world of 4"});
  expect_error([&] { l.rank({0, 1, 0}); }, {"(dp=0, pp=1, tp=0)", "outside"});
}

TEST(Mesh, OnAWorldOfOneEveryGroupIsLocal) {
  Mesh mesh(comm::make_local_communicator({"world", std::nullopt}), {});
  EXPECT_EQ(mesh.size(Axis::DP), 1);
  for (Axis a : {Axis::DP, Axis::PP, Axis::TP}) {
    EXPECT_EQ(mesh.group(a).size(), 1);
    EXPECT_EQ(mesh.index(a), 0);
  }
  EXPECT_EQ(mesh.group(Axis::TP).name(), "tp[dp=0,pp=0]");
  expect_error([] { Mesh(comm::make_local_communicator({"world", std::nullopt}), {.dp = 2, .pp = 1, .tp = 1}); },
               {"has 2 ranks", "world has 1"});
}
