#include "zeroshard/nn/hookable.h"
#include "zeroshard/shard.h"

#include <stdexcept>

namespace zeroshard {

namespace {
const char* kValid =
    "valid strategies: no_shard (zero stage 0), optim (1), optim_grads (2), optim_grads_params (3)";
}

Strategy strategy_from_zero_stage(int stage) {
  if (stage < 0 || stage > 3) {
    throw std::invalid_argument("zero stage " + std::to_string(stage) + " does not exist; " + kValid);
  }
  return static_cast<Strategy>(stage);
}

Strategy parse_strategy(const std::string& name) {
  if (name == "no_shard" || name == "0") return Strategy::NoShard;
  if (name == "optim" || name == "1") return Strategy::Optim;
  if (name == "optim_grads" || name == "2") return Strategy::OptimGrads;
  if (name == "optim_grads_params" || name == "3") return Strategy::OptimGradsParams;
  throw std::invalid_argument("unknown sharding strategy '" + name + "'; " + kValid);
}

std::string strategy_name(Strategy s) {
  switch (s) {
    case Strategy::NoShard: return "no_shard";
    case Strategy::Optim: return "optim";
    case Strategy::OptimGrads: return "optim_grads";
    case Strategy::OptimGradsParams: return "optim_grads_params";
  }
  return "?";
}

WrapPolicy wrap_every_hookable() {
  return [](const std::string&, const torch::nn::Module& m) {
    return dynamic_cast<const nn::HookableModule*>(&m) != nullptr;
  };
}

}  // namespace zeroshard
