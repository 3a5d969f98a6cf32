// The engine's speed features move collectives in time or merge them; they never change a
// number. Checked where parity has teeth (DESIGN.md): W = 3, gradient accumulation,
// clipping, bf16, activation checkpointing.
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>

using namespace zeroshard::testing;

namespace {

const std::vector<std::string> kStrategies = {"no_shard", "optim", "optim_grads", "optim_grads_params"};

const std::string kHardCase =
    " --set train.steps=8 --set train.micro_batch_size=2 --set train.grad_accum=2 --set train.clip_grad_norm=0.5"
    " --set model.n_layers=4 --set run.dump_final_shards=true";

int64_t last(const TrainRun& r, const char* key, int rank = 0) {
  return r.metrics.back()["ranks"][rank][key].get<int64_t>();
}

void expect_same_bits(const TrainRun& a, const TrainRun& b, int world, const std::string& what) {
  EXPECT_EQ(loss_texts(a), loss_texts(b)) << what;
  for (int r = 0; r < world; ++r) {
    const auto x = read_text(a.dir + "/final_shard.rank" + std::to_string(r) + ".bin");
    const auto y = read_text(b.dir + "/final_shard.rank" + std::to_string(r) + ".bin");
    EXPECT_FALSE(x.empty()) << what;
    EXPECT_TRUE(x == y) << what << ": final parameters of rank " << r << " differ";
  }
}

}  // namespace

TEST(Overlap, BucketsPersistentBuffersAndDeepPrefetchKeepTheBits) {
  const std::string zero3 = kHardCase + " --set parallel.strategy=optim_grads_params --set parallel.prefetch=false";
  TrainRun plain = train(zero3, 3, "overlap_plain");
  TrainRun bucketed = train(zero3 + " --set parallel.reduce_bucket_bytes=100000000", 3, "overlap_bucket");
  TrainRun persistent = train(zero3 + " --set parallel.persistence_threshold=100000000", 3, "overlap_persist");
  TrainRun ahead1 = train(zero3 + " --set parallel.prefetch=true", 3, "overlap_prefetch2");
  TrainRun ahead2 = train(zero3 + " --set parallel.prefetch=true --set parallel.max_live_units=3", 3, "overlap_prefetch3");
  for (const TrainRun* r : {&plain, &bucketed, &persistent, &ahead1, &ahead2}) {
    ASSERT_EQ(r->exit_code, 0) << r->output;
    ASSERT_EQ(r->metrics.size(), 8u) << r->dir;
  }
  expect_same_bits(plain, bucketed, 3, "one bucket for every unit");
  expect_same_bits(plain, persistent, 3, "every buffer persistent");
  expect_same_bits(plain, ahead1, 3, "prefetch, 2 live units");
  expect_same_bits(plain, ahead2, 3, "prefetch, 3 live units");

  // Five units (root + 4 blocks): one bucket makes 2 x 5 reduce-scatters per step 2 x 1.
  EXPECT_EQ(last(plain, "comm_collectives") - last(bucketed, "comm_collectives"), 2 * 4);
  // Persistent buffers: no gathers in forward and backward, one all-gather each after the step.
  EXPECT_LT(last(persistent, "comm_collectives"), last(plain, "comm_collectives"));
  EXPECT_GT(last(persistent, "mem_params_bytes"), 2 * last(plain, "mem_params_bytes"))
      << "persistent buffers are resident whole on every rank";
  EXPECT_EQ(last(persistent, "mem_gathered_peak_bytes"), 0);
  // Prefetch holds more units, bounded by max_live_units (root + that many blocks).
  const int64_t p0 = last(plain, "mem_gathered_peak_bytes"), p1 = last(ahead1, "mem_gathered_peak_bytes"),
                p2 = last(ahead2, "mem_gathered_peak_bytes");
  EXPECT_LT(p0, p1);
  EXPECT_LT(p1, p2);
  EXPECT_LE(p2, 3 * p0);
}

// bf16 parameters and activation checkpointing (recompute verified bitwise) at W = 3 with
// accumulation and clipping: the four strategies bitwise identical, with fp32 reductions and
// with bf16 ones, which move fewer bytes and change the result only slightly.
TEST(MixedPrecision, StrategiesAgreeAtW3WithCheckpointingForBothReduceDtypes) {
  const std::string bf16 = kHardCase +
                           " --set mixed_precision.param_dtype=bf16 --set train.activation_checkpointing=true"
                           " --set debug.check_recompute=bitwise";
  std::vector<TrainRun> fp32_reduce, bf16_reduce;
  for (const auto& s : kStrategies) {
    fp32_reduce.push_back(train(bf16 + " --set parallel.strategy=" + s, 3, "w3_bf16_" + s));
    bf16_reduce.push_back(
        train(bf16 + " --set mixed_precision.reduce_dtype=bf16 --set parallel.strategy=" + s, 3, "w3_bf16rs_" + s));
    ASSERT_EQ(fp32_reduce.back().exit_code, 0) << fp32_reduce.back().output;
    ASSERT_EQ(bf16_reduce.back().exit_code, 0) << bf16_reduce.back().output;
  }
  for (size_t k = 1; k < kStrategies.size(); ++k) {
    expect_same_bits(fp32_reduce[0], fp32_reduce[k], 3, "fp32 reduction, " + kStrategies[k]);
    expect_same_bits(bf16_reduce[0], bf16_reduce[k], 3, "bf16 reduction, " + kStrategies[k]);
  }
  // no_shard: its step issues and waits every collective itself (no publishing all-gathers
  // deferred to the next forward, which count in a step only when they happen to finish by
  // its figures; see src/shard/plan.h), so its bytes are exact. Per step: two micro-batches'
  // gradient reduce-scatters in the reduce dtype, then one all-gather of the reduced fp32
  // gradients, so bf16 reductions move 2/3 of the bytes (1/2 on the reduce-scatters).
  const TrainRun &a = fp32_reduce[0], &b = bf16_reduce[0];
  EXPECT_NE(loss_texts(a), loss_texts(b)) << "bf16 reductions must actually be used";
  EXPECT_LT(max_rel_loss_diff(a, b), 0.02);
  const double ratio = static_cast<double>(last(b, "comm_bytes_sent")) / static_cast<double>(last(a, "comm_bytes_sent"));
  EXPECT_GT(ratio, 0.6);
  EXPECT_LT(ratio, 0.7);
}
