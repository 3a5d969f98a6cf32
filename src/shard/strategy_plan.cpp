#include "shard/strategy_plan.h"

#include <stdexcept>
#include <string>

namespace zeroshard::shard {

StrategyPlan StrategyPlan::make(const ShardOptions& options, int world_size) {
  if (world_size < 1) {
    throw std::invalid_argument("fully_shard: the world size must be >= 1, got " + std::to_string(world_size));
  }
  if (options.persistence_threshold < 0) {
    throw std::invalid_argument("fully_shard: persistence_threshold must be >= 0, got " +
                                std::to_string(options.persistence_threshold));
  }
  const int group = options.shard_group_size;
  if (group < 0 || (group > 0 && world_size % group != 0)) {
    throw std::invalid_argument("fully_shard: shard_group_size " + std::to_string(group) +
                                " does not divide the world size " + std::to_string(world_size) +
                                " (hybrid sharding needs whole copies of the model)");
  }
  StrategyPlan p;
  p.strategy = options.strategy;
  const int stage = static_cast<int>(options.strategy);  // the ZeRO stage: each shards one more state
  if (stage < 0 || stage > 3) {
    throw std::invalid_argument("fully_shard: no strategy has the value " + std::to_string(stage));
  }
  p.shard_optim = stage >= 1;
  p.shard_grads = stage >= 2;
  p.shard_params = stage >= 3;
  p.gather_reduced_grads = !p.shard_grads;
  p.full_master = !p.shard_optim;
  p.persistence_threshold = options.persistence_threshold;
  p.shard_ranks = group > 0 && group < world_size ? group : world_size;
  p.replicas = world_size / p.shard_ranks;
  return p;
}

}  // namespace zeroshard::shard
