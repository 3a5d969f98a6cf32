// The GradReducer in-process, over a scripted communicator: rank `rank` of W whose
// collectives take effect when waited (or at once, in the "instant" mode) and are logged in
// issue order. Its reduce-scatter returns this rank's chunk (as if the other ranks sent
// zeros), its all-gather copies the input into every chunk: enough to check which elements
// land where, how reductions accumulate, how many are in flight, and that the sequence of
// collectives never depends on when they complete.
#include "shard/grad_reduction.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace zeroshard;
using namespace zeroshard::shard;

namespace {

class ScriptedWork : public CommWork {
 public:
  explicit ScriptedWork(std::function<void()> effect) : effect_(std::move(effect)) {}
  void wait() override {
    if (!done_) {
      effect_();
      done_ = true;
      ++waits;
    }
  }
  bool completed() const override { return done_; }
  int waits = 0;

 private:
  std::function<void()> effect_;
  bool done_ = false;
};

class ScriptedComm : public Communicator {
 public:
  // log: shared by the communicators of one test (the shard and the replica group), so the
  // order across groups is checked too; `name` prefixes this one's entries.
  ScriptedComm(int rank, int world, bool instant, std::vector<std::string>* log, std::string name = "")
      : log_(log), name_(std::move(name)), rank_(rank), world_(world), instant_(instant) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend_name() const override { return "scripted"; }

  WorkHandle all_gather_async(const at::Tensor& in, const at::Tensor& out) override {
    note("all_gather " + std::to_string(in.numel()));
    return issue([in, out, w = world_] {
      for (int r = 0; r < w; ++r) out.narrow(0, r * in.numel(), in.numel()).copy_(in);
    });
  }
  WorkHandle reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) override {
    note("reduce_scatter " + std::to_string(in.numel()));
    return issue([in, out, r = rank_] { out.copy_(in.narrow(0, r * out.numel(), out.numel())); });
  }
  WorkHandle all_reduce_async(const at::Tensor& t) override {
    note("all_reduce " + std::to_string(t.numel()));
    return issue([] {});
  }
  WorkHandle broadcast_async(const at::Tensor&, int) override { throw std::logic_error("not scripted"); }
  WorkHandle barrier_async() override { throw std::logic_error("not scripted"); }
  std::shared_ptr<Communicator> split(int) override { throw std::logic_error("not scripted"); }

  std::vector<std::shared_ptr<ScriptedWork>> works;

 private:
  void note(const std::string& what) { log_->push_back(name_ + what); }
  WorkHandle issue(std::function<void()> effect) {
    auto w = std::make_shared<ScriptedWork>(std::move(effect));
    if (instant_) w->wait();
    works.push_back(w);
    return w;
  }
  std::vector<std::string>* log_;
  std::string name_;
  int rank_, world_;
  bool instant_;
};

struct Reduced {
  std::vector<std::string> log;
  std::vector<at::Tensor> shards, fulls;
};

// Two micro-batches over buffers of these sizes; micro-batch m gives buffer i the local
// gradient arange * (m + 1) + 1000 * i.
Reduced reduce_two_micro_batches(Strategy strategy, const std::vector<int64_t>& numels, int64_t bucket_bytes,
                             bool instant, bool hybrid = false) {
  const int W = 3, rank = 1;
  Reduced run;
  ScriptedComm comm(rank, W, instant, &run.log);
  ScriptedComm replicas(0, 2, instant, &run.log, "replica ");
  CommClock clock;
  const StrategyPlan plan = StrategyPlan::make(ShardOptions(strategy), W);
  GradReducer reducer(plan, comm, hybrid ? &replicas : nullptr, at::kFloat, bucket_bytes, clock);
  for (int64_t n : numels) reducer.add_buffer(ShardLayout(n, W));
  for (int m = 0; m < 2; ++m) {
    reducer.begin_micro_batch(/*last=*/m == 1);
    for (size_t i = 0; i < numels.size(); ++i) {
      at::Tensor local = reducer.new_local_gradient(i);
      local.copy_(at::arange(local.numel(), at::kFloat) * (m + 1) + 1000.0 * static_cast<double>(i));
      reducer.reduce(i, local);
    }
    reducer.finish_micro_batch();
  }
  reducer.wait_gradient_gathers(/*complete=*/true);
  for (size_t i = 0; i < numels.size(); ++i) {
    run.shards.push_back(reducer.shard(i).clone());
    if (reducer.full(i).defined()) run.fulls.push_back(reducer.full(i).clone());
  }
  EXPECT_EQ(reducer.transient_bytes(), 0) << "every reduction finished";
  return run;
}

const std::vector<int64_t> kNumels = {7, 2, 3, 40, 1, 5};  // padded to 9, 3, 3, 42, 3, 6 at W = 3

}  // namespace

TEST(GradReducer, AccumulatesThisRanksShardOfEveryBufferBucketedOrNot) {
  for (int64_t bucket : {0, 16, 64, 1 << 20}) {
    for (Strategy s : {Strategy::NoShard, Strategy::Optim, Strategy::OptimGrads, Strategy::OptimGradsParams}) {
      SCOPED_TRACE(strategy_name(s) + " bucket " + std::to_string(bucket));
      const Reduced run = reduce_two_micro_batches(s, kNumels, bucket, /*instant=*/false);
      ASSERT_EQ(run.shards.size(), kNumels.size());
      for (size_t i = 0; i < kNumels.size(); ++i) {
        const ShardLayout L(kNumels[i], 3);
        // Rank 1's chunk of (arange * 1 + c) + (arange * 2 + c), c = 1000 i.
        const at::Tensor chunk = at::arange(L.shard_begin(1), L.shard_end(1), at::kFloat);
        const at::Tensor expected = chunk * 3 + 2000.0 * static_cast<double>(i);
        EXPECT_TRUE(at::equal(run.shards[i], expected)) << "buffer " << i << ": " << run.shards[i];
      }
      const bool keeps_full = s == Strategy::NoShard || s == Strategy::Optim;
      ASSERT_EQ(run.fulls.size(), keeps_full ? kNumels.size() : 0u);
      for (size_t i = 0; i < run.fulls.size(); ++i) {
        EXPECT_TRUE(at::equal(run.fulls[i].view({3, -1})[0], run.shards[i])) << "the gathered full gradient";
      }
    }
  }
}

TEST(GradReducer, BucketsJoinSmallGradientsIntoOneReduceScatter) {
  const Reduced alone = reduce_two_micro_batches(Strategy::OptimGrads, kNumels, 0, false);
  const Reduced bucketed = reduce_two_micro_batches(Strategy::OptimGrads, kNumels, 64, false);
  // Alone: one reduce-scatter per buffer and micro-batch, of its padded size.
  EXPECT_EQ(alone.log, (std::vector<std::string>{"reduce_scatter 9", "reduce_scatter 3", "reduce_scatter 3",
                                                 "reduce_scatter 42", "reduce_scatter 3", "reduce_scatter 6",
                                                 "reduce_scatter 9", "reduce_scatter 3", "reduce_scatter 3",
                                                 "reduce_scatter 42", "reduce_scatter 3", "reduce_scatter 6"}));
  // 64 bytes: 36 + 12 + 12 bytes share one bucket (60 < 64) until 168 bytes come alone;
  // 12 + 24 stay open until the micro-batch ends.
  EXPECT_EQ(bucketed.log, (std::vector<std::string>{"reduce_scatter 15", "reduce_scatter 42", "reduce_scatter 9",
                                                    "reduce_scatter 15", "reduce_scatter 42", "reduce_scatter 9"}));
  for (size_t i = 0; i < kNumels.size(); ++i) EXPECT_TRUE(at::equal(alone.shards[i], bucketed.shards[i])) << i;
}

TEST(GradReducer, CollectivesDoNotDependOnWhenTheyComplete) {
  for (Strategy s : {Strategy::NoShard, Strategy::Optim, Strategy::OptimGradsParams}) {
    for (bool hybrid : {false, true}) {
      for (int64_t bucket : {0, 64}) {
        SCOPED_TRACE(strategy_name(s) + (hybrid ? " hybrid" : "") + " bucket " + std::to_string(bucket));
        const Reduced late = reduce_two_micro_batches(s, kNumels, bucket, /*instant=*/false, hybrid);
        const Reduced early = reduce_two_micro_batches(s, kNumels, bucket, /*instant=*/true, hybrid);
        EXPECT_EQ(late.log, early.log);
        for (size_t i = 0; i < kNumels.size(); ++i) EXPECT_TRUE(at::equal(late.shards[i], early.shards[i]));
        if (s != Strategy::OptimGradsParams) {
          // The full gradient's all-gathers come in the last micro-batch, one per buffer.
          int gathers = 0;
          for (const auto& l : late.log) gathers += l.rfind("all_gather", 0) == 0 ? 1 : 0;
          EXPECT_EQ(gathers, static_cast<int>(kNumels.size()));
        }
      }
    }
  }
}

TEST(GradReducer, KeepsAtMostTwoReductionsInFlight) {
  std::vector<std::string> log;
  ScriptedComm comm(0, 2, /*instant=*/false, &log);
  CommClock clock;
  GradReducer reducer(StrategyPlan::make(ShardOptions(Strategy::OptimGrads), 2), comm, nullptr, at::kFloat, 0, clock);
  for (int i = 0; i < 4; ++i) reducer.add_buffer(ShardLayout(1000, 2));
  reducer.begin_micro_batch(true);
  const int64_t one = 1000 * 4 + 500 * 4;  // a reduction's input and output bytes
  std::vector<const void*> locals;
  for (size_t i = 0; i < 4; ++i) {
    at::Tensor local = reducer.new_local_gradient(i);
    locals.push_back(local.data_ptr());
    local.fill_(1.0f);
    reducer.reduce(i, local);
    // Two in flight; from the third on, the buffers of the finished one wait for the next.
    EXPECT_EQ(reducer.transient_bytes(), (std::min<int64_t>(i + 1, 2) + (i >= 2 ? 1 : 0)) * one)
        << "after buffer " << i;
  }
  // Buffer 3's local gradient is buffer 0's, reused: no fresh allocation (page faults) per unit.
  EXPECT_EQ(locals[3], locals[0]);
  ASSERT_EQ(comm.works.size(), 4u);
  EXPECT_EQ(comm.works[0]->waits, 1) << "the oldest reduction is finished first";
  EXPECT_EQ(comm.works[1]->waits, 1);
  EXPECT_EQ(comm.works[2]->waits, 0);
  EXPECT_EQ(comm.works[3]->waits, 0);
  reducer.finish_micro_batch();
  EXPECT_EQ(reducer.transient_bytes(), 0);
  EXPECT_EQ(reducer.resident_bytes(), 4 * 500 * 4) << "optim_grads keeps fp32 shards only";
}
