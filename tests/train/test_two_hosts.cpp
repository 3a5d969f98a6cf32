// Hybrid and plain sharding across two "hosts": network namespaces joined by a veth pair, 2 ranks
// each, started through the environment rendezvous exactly as a cluster scheduler starts them.
// Needs root (CAP_NET_ADMIN): ctest label `root`.
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
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
  // in the run folder; $RUN/end holds the time the last rank exited. Each path P of
  // `host_local` is a host's own disk: the ranks of host h see P.host<h> there (a private mount
  // namespace per rank, P.host<h> bind-mounted on P).
  static TrainRun run(const std::string& args, const std::string& tag, const std::string& during = "true",
                      const std::vector<std::string>& host_local = {}) {
    TrainRun r;
    r.dir = make_temp_dir(tag);
    std::string cmd = "RUN=" + r.dir + "; ";
    for (int rank = 0; rank < 4; ++rank) {
      const std::string out = r.dir + "/out.rank" + std::to_string(rank);
      std::string start = "ip netns exec " + host_[rank / 2] + " env RANK=" + std::to_string(rank) +
                          " WORLD_SIZE=4 LOCAL_RANK=" + std::to_string(rank % 2) +
                          " LOCAL_WORLD_SIZE=2 MASTER_ADDR=10.231.0.1 MASTER_PORT=29500 timeout -s KILL 300 " +
                          ZS_BINARY + " train " + kSmallModel + " --set run.dir=" + r.dir + " " + args;
      if (!host_local.empty()) {
        std::string mounts;
        for (const auto& p : host_local) mounts += "mount --bind " + p + ".host" + std::to_string(rank / 2) + " " + p + " && ";
        start = "unshare -m --propagation private sh -c \"" + mounts + "exec " + start + "\"";
      }
      cmd += "(" + start + " > " + out + " 2>&1; echo $? > " + r.dir + "/exit.rank" + std::to_string(rank) + ") & ";
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

// model.frozen_storage=file across two hosts with local disks: each host has its own copy of the
// base weights and of the converted copy's folder at the same paths (bind mounts in a private
// mount namespace per rank). Every rank reads its own host's file in place; the fp32 file under
// bf16 compute goes through model.frozen_converted=copy, whose units the ranks of the other
// host wrote on their disk, so each host's ranks write what they find missing on theirs. The
// losses are the same job's on one host with the base in memory, bit for bit.
TEST_F(TwoHosts, FrozenWeightsAreReadFromEachHostsOwnFiles) {
  const TrainRun base = train(" --set train.steps=1 --set run.dump_init=true", 1, "two_hosts_files_base");
  ASSERT_EQ(base.exit_code, 0) << base.output;
  const std::string dir = make_temp_dir("two_hosts_files");
  for (const std::string p : {"weights", "converted"}) {
    for (const std::string h : {".host0", ".host1"}) std::filesystem::create_directories(dir + "/" + p + h);
    std::filesystem::create_directories(dir + "/" + p);  // the mount point
  }
  for (const std::string h : {".host0", ".host1"}) {
    std::filesystem::copy_file(base.dir + "/init.safetensors", dir + "/weights" + h + "/init.safetensors");
  }
  const std::string lora = " --set lora.rank=4 --set lora.alpha=8 --set lora.targets=wq,wk,wv,wo"
                           " --set mixed_precision.param_dtype=bf16 --set train.steps=6 --set parallel.strategy=optim_grads_params" +
                           kBatch;
  const TrainRun two = run(lora + " --set model.init_from=" + dir + "/weights/init.safetensors" +
                               " --set model.frozen_storage=file --set model.frozen_converted=copy"
                               " --set model.frozen_copy_dir=" + dir + "/converted",
                           "two_hosts_files", "true", {dir + "/weights", dir + "/converted"});
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const TrainRun one = train(lora + " --set model.init_from=" + dir + "/weights.host0/init.safetensors", 4,
                             "one_host_files_memory");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(loss_texts(two), loss_texts(one));
  ASSERT_EQ(one.metrics.size(), 6u);
  // Each host's folder holds every unit's converted file, and nothing was written on the mount points.
  auto count = [](const std::string& d) {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(d)) n += e.path().extension() == ".safetensors";
    return n;
  };
  EXPECT_GT(count(dir + "/converted.host0"), 0);
  EXPECT_EQ(count(dir + "/converted.host0"), count(dir + "/converted.host1"));
  EXPECT_EQ(count(dir + "/converted"), 0);
  // More unit files were written than one host holds: each host's ranks wrote the other's units.
  const std::string log = read_text(two.dir + "/rank0.log");
  const size_t note = log.find("model.frozen_converted=copy");
  ASSERT_NE(note, std::string::npos) << log;
  const size_t open = log.find('(', log.find(" read in place from ", note));
  ASSERT_NE(open, std::string::npos) << log;
  EXPECT_GT(std::stoi(log.substr(open + 1)), count(dir + "/converted.host0")) << log;
}
