// Hybrid and plain sharding across two "hosts": network namespaces joined by a veth pair, 2 ranks
// each, started through the environment rendezvous exactly as a cluster scheduler starts them.
// Needs root (CAP_NET_ADMIN): ctest label `root`.
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

// 4 ranks x micro-batch 2 x 2 accumulation steps; the same global batch at any world size.
const std::string kBatch = " --set train.micro_batch_size=2 --set train.global_batch_size=16";
const std::string kHybrid = " --set parallel.hybrid=true --set parallel.shard_group_size=2";

}  // namespace

// Two network namespaces ("hosts") joined by a veth pair; needs root (CAP_NET_ADMIN).
class TwoHosts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) {
      skip_reason_ = "needs root to create network namespaces (CI runs as root)";
      return;
    }
    const std::string id = std::to_string(getpid());
    host_[0] = "zs" + id + "a";
    host_[1] = "zs" + id + "b";
    std::string out;
    const std::string setup = "set -e; ip netns add " + host_[0] + "; ip netns add " + host_[1] +
                              "; ip link add " + host_[0] + " type veth peer name " + host_[1] +
                              "; for i in 0 1; do h=$([ $i = 0 ] && echo " + host_[0] + " || echo " + host_[1] +
                              "); ip link set $h netns $h; ip -n $h addr add 10.231.0.$((i+1))/24 dev $h;"
                              " ip -n $h link set $h up; ip -n $h link set lo up; done";
    if (run_command(setup, &out) != 0) {
      skip_reason_ = "cannot create network namespaces here: " + out;
      TearDownTestSuite();
    }
  }
  static void TearDownTestSuite() {
    std::string out;
    for (const auto& h : host_) {
      if (!h.empty()) run_command("ip netns del " + h, &out);  // takes its end of the veth pair along
    }
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  // Starts ranks 0,1 on host 0 and ranks 2,3 on host 1 with RANK / WORLD_SIZE / LOCAL_RANK /
  // LOCAL_WORLD_SIZE / MASTER_ADDR / MASTER_PORT, runs `during` (a shell snippet; $RUN is the
  // run folder) while they train, and waits for all four. Per-rank output and exit codes land
  // in the run folder; $RUN/end holds the time the last rank exited.
  static TrainRun run(const std::string& args, const std::string& tag, const std::string& during = "true") {
    TrainRun r;
    r.dir = make_temp_dir(tag);
    std::string cmd = "RUN=" + r.dir + "; ";
    for (int rank = 0; rank < 4; ++rank) {
      const std::string out = r.dir + "/out.rank" + std::to_string(rank);
      cmd += "(ip netns exec " + host_[rank / 2] + " env RANK=" + std::to_string(rank) + " WORLD_SIZE=4 LOCAL_RANK=" +
             std::to_string(rank % 2) + " LOCAL_WORLD_SIZE=2 MASTER_ADDR=10.231.0.1 MASTER_PORT=29500 timeout -s KILL 300 " +
             ZS_BINARY + " train " + kSmallModel + " --set run.dir=" + r.dir + " " + args + " > " + out +
             " 2>&1; echo $? > " + r.dir + "/exit.rank" + std::to_string(rank) + ") & ";
    }
    cmd += during + "; wait; date +%s.%N > $RUN/end";
    std::string ignored;
    run_command(cmd, &ignored);
    r.exit_code = 0;
    for (int rank = 0; rank < 4; ++rank) {
      const std::string code = read_text(r.dir + "/exit.rank" + std::to_string(rank));
      if (std::stoi(code) != 0) r.exit_code = std::stoi(code);
      r.output += "--- rank " + std::to_string(rank) + " (exit " + code.substr(0, code.size() - 1) + ")\n" +
                  read_text(r.dir + "/out.rank" + std::to_string(rank));
    }
    read_metrics(r);
    return r;
  }

  static std::string skip_reason_;
  static std::string host_[2];
};
std::string TwoHosts::skip_reason_;
std::string TwoHosts::host_[2];

TEST_F(TwoHosts, PlainAndHybridShardingMatchTheSameJobOnOneHost) {
  const std::string common = " --set train.steps=10 --set parallel.strategy=optim_grads_params" + kBatch;
  // Plain sharding over 4 ranks on two hosts is the same computation as on one host: bitwise.
  TrainRun plain2 = run(common, "two_hosts_plain");
  ASSERT_EQ(plain2.exit_code, 0) << plain2.output;
  TrainRun plain1 = train(common, 4, "one_host_plain");
  ASSERT_EQ(plain1.exit_code, 0) << plain1.output;
  EXPECT_EQ(loss_texts(plain2), loss_texts(plain1));
  // Hybrid: the shard group defaults to one host's ranks (LOCAL_WORLD_SIZE = 2).
  TrainRun hybrid2 = run(common + " --set parallel.hybrid=true", "two_hosts_hybrid");
  ASSERT_EQ(hybrid2.exit_code, 0) << hybrid2.output;
  EXPECT_NE(read_text(hybrid2.dir + "/rank2.log").find("hybrid sharding: 2 copies"), std::string::npos);
  TrainRun hybrid1 = train(common + kHybrid, 4, "one_host_hybrid");
  ASSERT_EQ(hybrid1.exit_code, 0) << hybrid1.output;
  EXPECT_EQ(loss_texts(hybrid2), loss_texts(hybrid1));
  EXPECT_LT(max_rel_loss_diff(plain2, hybrid2), 1e-4);
  ASSERT_EQ(plain2.metrics.size(), 10u);
}

TEST_F(TwoHosts, CutLinkFailsEveryRankWithinTheCollectiveTimeout) {
  // Train long, cut the link once 3 steps are logged: every rank must exit, naming the
  // collective and a peer, within the 5 s collective timeout plus slack; none may hang.
  const std::string common = " --set train.steps=100000 --set parallel.comm_timeout_s=5 --set train.save_final=false" +
                             kBatch + kHybrid.substr(0, kHybrid.find(" --set parallel.shard_group_size"));
  TrainRun r = run(common, "two_hosts_cut",
                   "for i in $(seq 600); do [ $(cat $RUN/metrics.jsonl 2>/dev/null | wc -l) -ge 3 ] && break; sleep 0.2;"
                   " done; date +%s.%N > $RUN/cut; ip -n " + host_[0] + " link set " + host_[0] + " down");
  const double seconds = std::stod(read_text(r.dir + "/end")) - std::stod(read_text(r.dir + "/cut"));
  EXPECT_LT(seconds, 60.0) << "ranks took " << seconds << " s to exit after the cut\n" << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    const int code = std::stoi(read_text(r.dir + "/exit.rank" + std::to_string(rank)));
    EXPECT_NE(code, 0) << "rank " << rank << " survived a cut link\n" << r.output;
    EXPECT_NE(code, 137) << "rank " << rank << " hung until the 300 s kill\n" << r.output;
  }
  EXPECT_GE(r.metrics.size(), 3u);
  // Each rank names the step it was in and the collective that timed out.
  EXPECT_NE(r.output.find("during step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("timeout 5 s"), std::string::npos) << r.output;
}
