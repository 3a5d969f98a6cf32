// Hybrid sharding (shard inside a group of ranks, replicate across groups) on one host; across
// two hosts: test_two_hosts.cpp.
#include "checkpoint/checkpoint.h"
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

// 4 ranks x micro-batch 2 x 2 accumulation steps; the same global batch at any world size.
const std::string kBatch = " --set train.micro_batch_size=2 --set train.global_batch_size=16";
const std::string kHybrid = " --set parallel.hybrid=true --set parallel.shard_group_size=2";

std::string step_dir(const std::string& run_dir, int step) {
  char name[32];
  std::snprintf(name, sizeof(name), "/checkpoints/step_%08d", step);
  return run_dir + name;
}

}  // namespace

TEST(Hybrid, StrategiesAgreeBitwiseAndMatchPlainShardingToSummationOrder) {
  const std::string common = " --set train.steps=12" + kBatch;
  const auto runs = expect_identical_strategies(common + kHybrid, 4, 12, "hybrid");
  ASSERT_FALSE(HasFailure());
  const std::string log = read_text(runs[3].dir + "/rank3.log");
  EXPECT_NE(log.find("hybrid sharding: 2 copies of the model, each sharded over 2 ranks; this rank is in copy 1"),
            std::string::npos)
      << log;
  // Plain sharding over all 4 ranks sums each gradient in another order (one ring of 4
  // instead of rings of 2 inside and across the copies): equal up to float rounding.
  TrainRun plain = train(common + " --set parallel.strategy=optim_grads_params", 4, "hybrid_plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_LT(max_rel_loss_diff(plain, runs[3]), 1e-4);
}

TEST(Hybrid, CheckpointHoldsOneCopyResumesExactlyAndLoadsWithoutHybrid) {
  const std::string common = " --set train.steps=10 --set parallel.strategy=optim_grads_params" + kBatch;
  TrainRun full = train(common + kHybrid + " --set train.save_every=5", 4, "hybrid_ckpt");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  ckpt::Checkpoint saved(step_dir(full.dir, 5));
  EXPECT_EQ(saved.world_size(), 2) << "one file per rank of one copy";
  EXPECT_EQ(saved.replicas(), 2);
  EXPECT_FALSE(fs::exists(step_dir(full.dir, 5) + "/rank_00002-of-00004.safetensors"));

  TrainRun resumed = train(common + kHybrid + " --resume " + step_dir(full.dir, 5), 4, "hybrid_resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto all = loss_texts(full);
  EXPECT_EQ(loss_texts(resumed), std::vector<std::string>(all.begin() + 5, all.end()));

  // The same checkpoint continues at W=2 without hybrid sharding (same global batch).
  TrainRun plain = train(common + " --resume " + step_dir(full.dir, 5), 2, "hybrid_to_plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(plain.metrics.size(), 5u);
  EXPECT_LT(max_rel_loss_diff(full, plain, 5), 1e-4);
}

