// Collectives against closed-form expectations, in real processes over Gloo/TCP.
#include "support/spawn.h"

#include <gtest/gtest.h>

#include <fstream>

using namespace zeroshard::testing;

namespace {
// The worker's report of a failed collective: the message, then the seconds it took.
void read_error(const std::string& path, std::string* msg, double* seconds) {
  std::ifstream in(path);
  std::getline(in, *msg);
  in >> *seconds;
}
}  // namespace

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, MatchClosedFormAtUnevenSizes) {
  const int W = GetParam();
  const std::string dir = make_temp_dir("coll");
  auto results = run_ranks(ZS_WORKER, {"collectives", dir}, W, 180);
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << " of " << W;
    std::ifstream ok(dir + "/rank" + std::to_string(r) + ".ok");
    EXPECT_TRUE(ok.good()) << "rank " << r << " did not finish";
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4));

TEST(CommFailures, StalledPeerTimesOutNamingOperationRankAndPeer) {
  const std::string dir = make_temp_dir("stall");
  auto results = run_ranks(ZS_WORKER, {"stall", dir}, 2, 60);
  ASSERT_EQ(results[0].exit_code, 0);
  std::string msg;
  double seconds = 0;
  read_error(dir + "/error.txt", &msg, &seconds);
  EXPECT_NE(msg.find("all_gather"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 of 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_GE(seconds, 1.0) << "failed before the 1.5 s timeout: " << msg;
  EXPECT_LT(seconds, 10.0) << "the 1.5 s timeout was not honoured";
}

TEST(CommFailures, DeadPeerFailsFastInsteadOfHanging) {
  const std::string dir = make_temp_dir("die");
  auto results = run_ranks(ZS_WORKER, {"die", dir}, 3, 90);
  EXPECT_EQ(results[1].exit_code, 7);
  ASSERT_EQ(results[0].exit_code, 0) << "rank 0 must catch a CommError";
  std::string msg;
  double seconds = 0;
  read_error(dir + "/error.rank0.txt", &msg, &seconds);
  EXPECT_NE(msg.find("all_reduce"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 of 3"), std::string::npos) << msg;
  EXPECT_LT(seconds, 30.0) << "a dead peer must be noticed well before the 60 s timeout: " << msg;
}
