// The engine's parts on their own, in-process and without ranks: the strategy's plan, the
// prefetch scheduler, bucket planning and layout, and the gradient reducer over a scripted
// communicator whose collectives complete when the test says so.
#include "shard/bucket.h"
#include "shard/grad_reduction.h"
#include "shard/prefetch.h"
#include "shard/strategy_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

using namespace zeroshard;
using namespace zeroshard::shard;

// --- StrategyPlan -----------------------------------------------------------------------------

TEST(StrategyPlan, EachStrategyShardsOneMoreStateThanTheLast) {
  struct Row {
    Strategy s;
    bool params, grads, optim, gather_grads, full_master;
  };
  // docs/architecture.md's table: what stays resident per rank under each strategy.
  const Row rows[] = {
      {Strategy::NoShard, false, false, false, true, true},
      {Strategy::Optim, false, false, true, true, false},
      {Strategy::OptimGrads, false, true, true, false, false},
      {Strategy::OptimGradsParams, true, true, true, false, false},
  };
  for (const Row& r : rows) {
    const StrategyPlan p = StrategyPlan::make(ShardOptions(r.s), 4);
    SCOPED_TRACE(strategy_name(r.s));
    EXPECT_EQ(p.strategy, r.s);
    EXPECT_EQ(p.shard_params, r.params);
    EXPECT_EQ(p.shard_grads, r.grads);
    EXPECT_EQ(p.shard_optim, r.optim);
    EXPECT_EQ(p.gather_reduced_grads, r.gather_grads);
    EXPECT_EQ(p.full_master, r.full_master);
    EXPECT_FALSE(p.hybrid());
    EXPECT_EQ(p.shard_ranks, 4);
    EXPECT_EQ(p.replicas, 1);
  }
}

TEST(StrategyPlan, PersistenceThresholdKeepsSmallBuffersReplicatedUnderZero3Only) {
  ShardOptions o(Strategy::OptimGradsParams);
  o.persistence_threshold = 10;
  const StrategyPlan p = StrategyPlan::make(o, 2);
  EXPECT_FALSE(p.shards_buffer(1));
  EXPECT_FALSE(p.shards_buffer(10)) << "a buffer of exactly the threshold stays replicated";
  EXPECT_TRUE(p.shards_buffer(11));
  o.persistence_threshold = 0;
  EXPECT_TRUE(StrategyPlan::make(o, 2).shards_buffer(1));
  for (Strategy s : {Strategy::NoShard, Strategy::Optim, Strategy::OptimGrads}) {
    EXPECT_FALSE(StrategyPlan::make(ShardOptions(s), 2).shards_buffer(1000)) << strategy_name(s);
  }
}

TEST(StrategyPlan, HybridGroupsMustHoldWholeCopies) {
  ShardOptions o(Strategy::OptimGrads);
  o.shard_group_size = 4;
  StrategyPlan p = StrategyPlan::make(o, 8);
  EXPECT_TRUE(p.hybrid());
  EXPECT_EQ(p.shard_ranks, 4);
  EXPECT_EQ(p.replicas, 2);
  o.shard_group_size = 8;  // one group of every rank: plain sharding
  p = StrategyPlan::make(o, 8);
  EXPECT_FALSE(p.hybrid());
  EXPECT_EQ(p.shard_ranks, 8);
  o.shard_group_size = 3;
  try {
    StrategyPlan::make(o, 8);
    FAIL() << "a group size that does not divide the world was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("shard_group_size 3 does not divide the world size 8"), std::string::npos)
        << e.what();
  }
  o.shard_group_size = 0;
  o.persistence_threshold = -1;
  EXPECT_THROW(StrategyPlan::make(o, 8), std::invalid_argument);
}

// --- PrefetchScheduler ------------------------------------------------------------------------

namespace {

const auto kAny = [](int) { return true; };

PrefetchScheduler recorded(const std::vector<int>& order, int max_live, bool enabled = true) {
  PrefetchScheduler s(enabled, max_live);
  s.begin_forward();
  for (int u : order) s.record_call(u);
  s.end_forward();
  return s;
}

}  // namespace

TEST(PrefetchScheduler, ForwardLooksAheadInTheLastRecordedOrderUpToTheLiveBound) {
  EXPECT_EQ(recorded({1, 2, 3}, 2).choose(0, +1, 0, kAny), (std::vector<int>{1, 2}));
  EXPECT_EQ(recorded({1, 2, 3}, 3).choose(0, +1, 0, kAny), (std::vector<int>{1, 2, 3}));
  // Unit 1 (position 0) runs and is gathered: one more may come.
  EXPECT_EQ(recorded({1, 2, 3}, 2).choose(1, +1, 1, kAny), (std::vector<int>{2}));
  EXPECT_TRUE(recorded({1, 2, 3}, 2).choose(1, +1, 2, kAny).empty()) << "the bound is reached";
  EXPECT_TRUE(recorded({1, 2, 3}, 2).choose(3, +1, 0, kAny).empty()) << "past the end";
  EXPECT_TRUE(recorded({1, 2, 3}, 1).choose(1, +1, 1, kAny).empty()) << "max_live_units 1: no look-ahead";
}

TEST(PrefetchScheduler, SkipsGatheredUnitsRepeatedCallsAndLooksAtMostTheBoundAhead) {
  // A unit called several times (a VAE stage per chunk) is chosen once.
  EXPECT_EQ(recorded({1, 2, 1, 2}, 3).choose(0, +1, 0, kAny), (std::vector<int>{1, 2}));
  // Already gathered (or not sharded): skipped, but the position still counts as looked at.
  const auto not5 = [](int u) { return u != 5; };
  EXPECT_EQ(recorded({1, 5, 2}, 2).choose(0, +1, 0, not5), (std::vector<int>{1}));
  EXPECT_EQ(recorded({1, 5, 2}, 3).choose(0, +1, 0, not5), (std::vector<int>{1, 2}));
}

TEST(PrefetchScheduler, BackwardFindsEachCallBelowTheLastOneFound) {
  PrefetchScheduler s = recorded({1, 2, 1, 2}, 2);
  s.begin_backward();
  EXPECT_EQ(s.locate_backward_call(2), 3);
  EXPECT_EQ(s.choose(2, -1, 1, kAny), (std::vector<int>{1}));
  EXPECT_EQ(s.locate_backward_call(1), 2);
  EXPECT_EQ(s.locate_backward_call(2), 1);
  EXPECT_EQ(s.locate_backward_call(1), 0);
  EXPECT_EQ(s.locate_backward_call(1), -1) << "no call of unit 1 below position 0";
  EXPECT_EQ(s.locate_backward_call(7), -1) << "a unit the recorded forward did not run";
  EXPECT_TRUE(s.choose(-1, -1, 0, kAny).empty());
  s.begin_backward();  // the next micro-batch starts from the end again
  EXPECT_EQ(s.locate_backward_call(1), 2);
}

TEST(PrefetchScheduler, ANewForwardKeepsOnlyTheUnitsPrefetchedForItsStart) {
  const PrefetchScheduler s = recorded({3, 1, 2}, 2);
  EXPECT_TRUE(s.keep_at_forward_start(3));
  EXPECT_TRUE(s.keep_at_forward_start(1));
  EXPECT_FALSE(s.keep_at_forward_start(2)) << "beyond the first max_live_units calls";
  EXPECT_FALSE(recorded({3, 1, 2}, 2, /*enabled=*/false).keep_at_forward_start(3));
  EXPECT_FALSE(PrefetchScheduler(true, 2).keep_at_forward_start(3)) << "nothing recorded yet";
}

TEST(PrefetchScheduler, DisabledChoosesNothingButRecordsAndLocates) {
  PrefetchScheduler s = recorded({1, 2}, 2, /*enabled=*/false);
  EXPECT_EQ(s.order(), (std::vector<int>{1, 2}));
  EXPECT_TRUE(s.choose(0, +1, 0, kAny).empty());
  s.begin_backward();
  EXPECT_EQ(s.locate_backward_call(2), 1);
  EXPECT_THROW(PrefetchScheduler(true, 0), std::invalid_argument);
}

// The engine's use of the scheduler, simulated: gather before use (a hit if prefetched),
// release after, prefetch as the engine does. Over repeated steps no more than max_live units
// are ever gathered, and from the second step on every forward use is a hit when the bound
// allows one unit of look-ahead.
TEST(PrefetchScheduler, SimulatedStepsStayWithinTheBoundAndHitEveryForwardGather) {
  const std::vector<int> calls = {1, 2, 3, 4, 5};
  for (int max_live : {1, 2, 3}) {
    SCOPED_TRACE("max_live_units " + std::to_string(max_live));
    PrefetchScheduler s(true, max_live);
    std::set<int> gathered;
    int hits = 0, misses = 0, peak = 0;
    auto start = [&](const std::vector<int>& units) {
      for (int u : units) gathered.insert(u);
      peak = std::max(peak, static_cast<int>(gathered.size()));
    };
    auto use = [&](int u) {
      (gathered.count(u) ? hits : misses)++;
      start({u});
    };
    auto can_start = [&](int u) { return gathered.count(u) == 0; };
    auto live = [&] { return static_cast<int>(gathered.size()); };
    for (int step = 0; step < 3; ++step) {
      // forward (the root's pre-forward first)
      for (int u : std::set<int>(gathered)) {
        if (!s.keep_at_forward_start(u)) gathered.erase(u);
      }
      s.begin_forward();
      start(s.choose(0, +1, live(), can_start));
      const int forward_misses = misses;
      hits = 0;
      for (int u : calls) {
        const long pos = s.record_call(u);
        use(u);
        start(s.choose(pos + 1, +1, live(), can_start));
        gathered.erase(u);  // post-forward
      }
      s.end_forward();
      if (step > 0 && max_live >= 2) {
        EXPECT_EQ(misses, forward_misses) << "step " << step << ": a forward gather was not prefetched";
        EXPECT_EQ(hits, static_cast<int>(calls.size()));
      }
      // backward
      s.begin_backward();
      for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
        use(*it);
        const long pos = s.locate_backward_call(*it);
        ASSERT_GE(pos, 0);
        start(s.choose(pos - 1, -1, live(), can_start));
        gathered.erase(*it);  // post-backward
      }
      // after the optimizer step
      start(s.choose(0, +1, live(), can_start));
    }
    EXPECT_LE(peak, max_live);
  }
}

// --- Buckets ----------------------------------------------------------------------------------

TEST(BucketPlanner, SmallGradientsShareABucketUntilItHoldsTheBucketSize) {
  BucketPlanner p(100);
  auto d = p.add(30);
  EXPECT_FALSE(d.issue_before);
  EXPECT_FALSE(d.issue_after);
  d = p.add(30);
  EXPECT_FALSE(d.issue_after);
  EXPECT_EQ(p.open_bytes(), 60);
  d = p.add(50);  // 110 >= 100: issued with this one in it
  EXPECT_FALSE(d.issue_before);
  EXPECT_TRUE(d.issue_after);
  EXPECT_EQ(p.open_bytes(), 0);
  d = p.add(10);
  EXPECT_FALSE(d.issue_after);
  d = p.add(100);  // not small: the open bucket goes first, then this one alone
  EXPECT_TRUE(d.issue_before);
  EXPECT_TRUE(d.issue_after);
  p.add(20);
  p.close();
  EXPECT_EQ(p.open_bytes(), 0);
}

TEST(BucketPlanner, ZeroBucketBytesReducesEveryGradientAlone) {
  BucketPlanner p(0);
  for (int64_t bytes : {1, 4, 1000}) {
    const auto d = p.add(bytes);
    EXPECT_TRUE(d.issue_before);
    EXPECT_TRUE(d.issue_after);
  }
}

TEST(BucketLayout, RegionROfThePackedBucketHoldsChunkROfEveryPart) {
  const int W = 3;
  const std::vector<int64_t> shard_sizes = {2, 1, 3};
  BucketLayout layout;
  std::vector<at::Tensor> parts;
  for (size_t k = 0; k < shard_sizes.size(); ++k) {
    EXPECT_EQ(layout.add(shard_sizes[k]), k == 0 ? 0 : layout.offsets[k - 1] + shard_sizes[k - 1]);
    parts.push_back(at::arange(W * shard_sizes[k], at::kFloat) + 100.0 * static_cast<double>(k));
  }
  EXPECT_EQ(layout.shard_elems, 6);
  const std::vector<at::Tensor> originals = {parts[0].clone(), parts[1].clone(), parts[2].clone()};
  const at::Tensor packed = pack_rank_by_rank(layout, parts, W, at::kFloat);
  ASSERT_EQ(packed.numel(), W * layout.shard_elems);
  for (const auto& p : parts) EXPECT_FALSE(p.defined()) << "a packed part's memory is released";
  for (int r = 0; r < W; ++r) {
    const at::Tensor region = packed.view({W, layout.shard_elems})[r];
    for (size_t k = 0; k < originals.size(); ++k) {
      EXPECT_TRUE(at::equal(region.narrow(0, layout.offsets[k], shard_sizes[k]),
                            originals[k].view({W, shard_sizes[k]})[r]))
          << "rank " << r << " part " << k;
    }
  }
  std::vector<at::Tensor> too_few = {originals[0].clone()};
  EXPECT_THROW(pack_rank_by_rank(layout, too_few, W, at::kFloat), std::invalid_argument);
}

// Each rank's slice of a reduce-scatter of the packed bucket, summed in the ring's order,
// is bitwise its shard of each part reduced alone.
TEST(BucketLayout, ReducingTheBucketHandsEachRankItsShardOfEachPart) {
  for (int W : {2, 3, 4}) {
    const std::vector<int64_t> shard_sizes = {5, 1, 4};
    at::manual_seed(W);
    std::vector<std::vector<at::Tensor>> grads(W);  // [rank][part]
    std::vector<at::Tensor> packed(W);
    BucketLayout layout;
    for (int64_t s : shard_sizes) layout.add(s);
    for (int r = 0; r < W; ++r) {
      std::vector<at::Tensor> parts;
      for (int64_t s : shard_sizes) {
        grads[r].push_back(at::randn({W * s}));
        parts.push_back(grads[r].back().clone());
      }
      packed[r] = pack_rank_by_rank(layout, parts, W, at::kFloat);
    }
    // The ring's order: chunk c starts at rank c + 1 and ends, complete, at rank c.
    auto reduce_scatter = [&](const std::vector<at::Tensor>& inputs, int rank, int64_t n) {
      at::Tensor sum = inputs[(rank + 1) % W].view({W, n})[rank].clone();
      for (int k = 2; k <= W; ++k) sum = sum + inputs[(rank + k) % W].view({W, n})[rank];
      return sum;
    };
    for (int r = 0; r < W; ++r) {
      const at::Tensor mine = reduce_scatter(packed, r, layout.shard_elems);
      for (size_t k = 0; k < shard_sizes.size(); ++k) {
        std::vector<at::Tensor> alone;
        for (int q = 0; q < W; ++q) alone.push_back(grads[q][k]);
        EXPECT_TRUE(at::equal(mine.narrow(0, layout.offsets[k], shard_sizes[k]),
                              reduce_scatter(alone, r, shard_sizes[k])))
            << "W " << W << " rank " << r << " part " << k;
      }
    }
  }
}
