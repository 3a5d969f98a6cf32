#include "shard/layout.h"
#include "zeroshard/shard.h"

#include <gtest/gtest.h>

using namespace zeroshard;
using zeroshard::shard::ShardLayout;

TEST(ShardLayout, PadsToAMultipleOfTheWorldSize) {
  for (int W : {1, 2, 3, 4, 7}) {
    for (int64_t n : {0, 1, 2, 3, 5, 13, 100, 1001}) {
      ShardLayout L(n, W);
      EXPECT_EQ(L.padded % W, 0);
      EXPECT_GE(L.padded, n);
      EXPECT_LT(L.padded - n, W) << "padding must be less than one element per rank";
      EXPECT_EQ(L.shard_size * W, L.padded);
      int64_t valid = 0;
      for (int r = 0; r < W; ++r) {
        EXPECT_EQ(L.shard_begin(r), r * L.shard_size);
        EXPECT_EQ(L.shard_end(r), L.shard_begin(r + 1));
        valid += L.valid_in_shard(r);
      }
      EXPECT_EQ(valid, n) << "every real element is owned exactly once (n=" << n << ", W=" << W << ")";
    }
  }
}

TEST(ShardLayout, IntersectsRangesWithShards) {
  ShardLayout L(10, 3);  // shard 4: [0,4) [4,8) [8,12)
  int64_t lo, hi;
  L.intersect(1, 2, 9, &lo, &hi);
  EXPECT_EQ(lo, 4);
  EXPECT_EQ(hi, 8);
  L.intersect(0, 5, 9, &lo, &hi);
  EXPECT_GE(lo, hi) << "disjoint ranges intersect to nothing";
  EXPECT_EQ(L.valid_in_shard(2), 2);
}

TEST(ShardLayout, RejectsNonsense) {
  EXPECT_THROW(ShardLayout(-1, 2), std::invalid_argument);
  EXPECT_THROW(ShardLayout(5, 0), std::invalid_argument);
}

TEST(Strategy, NamesAndZeroStageAliases) {
  EXPECT_EQ(parse_strategy("no_shard"), Strategy::NoShard);
  EXPECT_EQ(parse_strategy("optim"), Strategy::Optim);
  EXPECT_EQ(parse_strategy("optim_grads"), Strategy::OptimGrads);
  EXPECT_EQ(parse_strategy("optim_grads_params"), Strategy::OptimGradsParams);
  for (int s = 0; s <= 3; ++s) {
    EXPECT_EQ(parse_strategy(std::to_string(s)), strategy_from_zero_stage(s));
    EXPECT_EQ(parse_strategy(strategy_name(strategy_from_zero_stage(s))), strategy_from_zero_stage(s));
  }
  try {
    parse_strategy("fsdp");
    FAIL() << "unknown strategy accepted";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'fsdp'"), std::string::npos);
    EXPECT_NE(msg.find("optim_grads_params (3)"), std::string::npos) << msg;
  }
  EXPECT_THROW(strategy_from_zero_stage(4), std::invalid_argument);
}
