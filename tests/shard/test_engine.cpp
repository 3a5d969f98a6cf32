// The engine under every strategy, in real multi-process runs of a toy model with tied,
// unused and frozen parameters: bitwise parity across strategies, agreement with plain
// single-process libtorch training, and per-rank memory against the ZeRO formulas.
#include "io/safetensors.h"
#include "support/spawn.h"
#include "support/toy_model.h"
#include "zeroshard/optim.h"
#include "zeroshard/shard.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

const std::vector<std::string> kStrategies = {"no_shard", "optim", "optim_grads", "optim_grads_params"};

struct ToyResult {
  std::string dir;
  std::vector<std::string> shards;  // per rank, raw bytes
  std::string norms;
  std::string losses;  // all ranks concatenated
};

ToyResult run_toy(int world, const std::string& strategy, const std::string& flag = "") {
  ToyResult res;
  res.dir = make_temp_dir("toy_" + strategy);
  std::vector<std::string> args{"toy", res.dir, strategy};
  if (!flag.empty()) args.push_back(flag);
  auto results = run_ranks(ZS_WORKER, args, world, 120);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << strategy << " rank " << r << " of " << world;
    res.shards.push_back(read_text(res.dir + "/shard.rank" + std::to_string(r) + ".bin"));
    res.losses += read_text(res.dir + "/losses.rank" + std::to_string(r) + ".txt");
  }
  res.norms = read_text(res.dir + "/norms.txt");
  return res;
}

// Plain libtorch: the same global batch per step, loss / (W * accum) accumulated, libtorch's
// clip_grad_norm_ and AdamW.
std::map<std::string, torch::Tensor> reference_training(int world, std::vector<double>* norms,
                                                        std::map<std::string, torch::Tensor>* init) {
  ToyModel model;
  model->reset(7);
  for (auto& item : model->named_parameters(true)) (*init)[item.key()] = item.value().detach().clone();
  std::vector<torch::Tensor> trainable;
  for (auto& p : model->parameters(true)) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  torch::optim::AdamW optim(trainable, torch::optim::AdamWOptions(ToyRun::kLr).weight_decay(ToyRun::kWeightDecay));
  for (int step = 0; step < ToyRun::kSteps; ++step) {
    optim.zero_grad();
    for (int micro = 0; micro < ToyRun::kAccum; ++micro) {
      for (int r = 0; r < world; ++r) {
        auto batch = toy_batch(step, (micro * world + r) * ToyModelImpl::kMicroBatch);
        auto logits = model->forward(batch.narrow(1, 0, ToyModelImpl::kSeq));
        auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, ToyModelImpl::kVocab}),
                                                         batch.narrow(1, 1, ToyModelImpl::kSeq).reshape({-1}));
        (loss / static_cast<double>(world * ToyRun::kAccum)).backward();
      }
    }
    // The engine treats a parameter without a gradient as one with a zero gradient (as a flat
    // buffer must): AdamW still applies the decoupled weight decay to it.
    for (auto& p : trainable) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    }
    norms->push_back(torch::nn::utils::clip_grad_norm_(trainable, ToyRun::kClip));
    for (auto& group : optim.param_groups()) group.options().set_lr(ToyRun::lr_at(step));
    optim.step();
  }
  std::map<std::string, torch::Tensor> out;
  for (auto& item : model->named_parameters(true)) out[item.key()] = item.value().detach().clone();
  return out;
}

}  // namespace

class EngineParity : public ::testing::TestWithParam<int> {};

TEST_P(EngineParity, FourStrategiesBitwiseIdenticalAndEqualToPlainLibtorch) {
  const int W = GetParam();
  std::vector<ToyResult> runs;
  for (const auto& s : kStrategies) runs.push_back(run_toy(W, s));
  for (size_t k = 1; k < runs.size(); ++k) {
    EXPECT_EQ(runs[k].losses, runs[0].losses) << kStrategies[k] << " vs no_shard: micro-batch losses";
    EXPECT_EQ(runs[k].norms, runs[0].norms) << kStrategies[k] << " vs no_shard: gradient norms";
    for (int r = 0; r < W; ++r) {
      EXPECT_FALSE(runs[k].shards[r].empty());
      EXPECT_TRUE(runs[k].shards[r] == runs[0].shards[r]) << kStrategies[k] << " vs no_shard: final shard of rank " << r;
    }
  }

  std::vector<double> ref_norms;
  std::map<std::string, torch::Tensor> init;
  auto ref = reference_training(W, &ref_norms, &init);
  std::istringstream norms(runs[3].norms);
  for (size_t i = 0; i < ref_norms.size(); ++i) {
    double ours = 0;
    norms >> ours;
    EXPECT_NEAR(ours, ref_norms[i], 1e-5 * ref_norms[i]) << "global grad norm at step " << i + 1;
  }
  for (size_t k = 0; k < runs.size(); ++k) {
    const std::string file = runs[k].dir + "/params.safetensors";
    io::SafetensorsFile params(file);
    EXPECT_EQ(params.entries().size(), ref.size()) << "tied weights appear once";
    for (const auto& e : params.entries()) {
      ASSERT_TRUE(ref.count(e.name)) << e.name;
      auto ours = params.read(e.name);
      EXPECT_LT((ours - ref[e.name]).abs().max().item<double>(), 5e-5) << kStrategies[k] << ": " << e.name;
      if (e.name.find("frozen_scale") != std::string::npos || e.name.rfind("blocks.1.", 0) == 0) {
        EXPECT_TRUE(torch::equal(ours, init[e.name])) << "frozen parameter changed: " << e.name;
      }
      if (e.name == "blocks.0.unused.weight") {
        // No gradient ever: AdamW only applies the decoupled weight decay.
        auto expect = init[e.name].clone();
        for (int s = 0; s < ToyRun::kSteps; ++s) expect = expect * static_cast<float>(1.0 - ToyRun::lr_at(s) * ToyRun::kWeightDecay);
        EXPECT_LT((ours - expect).abs().max().item<double>(), 1e-6) << e.name;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, EngineParity, ::testing::Values(2, 3));

// no_shard / optim publish the reduced gradient into their full buffers during the backward
// the caller marks as the last; a caller that never marks one still gets the whole gradient
// (finish_gradients gathers what is missing): the same bits.
TEST(EngineParity, UnmarkedLastMicroBatchGivesTheSameBits) {
  for (const std::string s : {"no_shard", "optim"}) {
    const ToyResult marked = run_toy(3, s), unmarked = run_toy(3, s, "not_last");
    EXPECT_EQ(marked.norms, unmarked.norms) << s;
    EXPECT_EQ(marked.losses, unmarked.losses) << s;
    for (int r = 0; r < 3; ++r) EXPECT_TRUE(marked.shards[r] == unmarked.shards[r]) << s << " rank " << r;
  }
}

TEST(EngineMemory, PerRankModelStateMatchesZeroFormulasAtW4) {
  const int W = 4;
  const std::string dir = make_temp_dir("mem");
  std::map<std::string, nlohmann::json> rank0;
  for (const auto& s : kStrategies) {
    auto results = run_ranks(ZS_WORKER, {"memory", dir, s}, W, 180);
    for (int r = 0; r < W; ++r) ASSERT_EQ(results[r].exit_code, 0) << s << " rank " << r;
    rank0[s] = nlohmann::json::parse(read_text(dir + "/mem." + s + ".rank0.json"));
  }
  const double psi = rank0["no_shard"]["num_params"].get<double>();
  EXPECT_EQ(rank0["no_shard"]["num_params"].get<int64_t>(), rank0["no_shard"]["analytic_params"].get<int64_t>());
  auto state = [&](const std::string& s) {
    const auto& j = rank0[s];
    return j["params_bytes"].get<double>() + j["grads_bytes"].get<double>() + j["optim_bytes"].get<double>();
  };
  auto within = [](double got, double want) { return std::abs(got - want) <= 0.05 * want; };
  EXPECT_TRUE(within(state("no_shard"), 16 * psi)) << state("no_shard") << " vs 16 psi = " << 16 * psi;
  EXPECT_TRUE(within(state("optim"), 4 * psi + 4 * psi + 8 * psi / W)) << state("optim");
  EXPECT_TRUE(within(state("optim_grads"), 4 * psi + 12 * psi / W)) << state("optim_grads");
  const auto& z3 = rank0["optim_grads_params"];
  const double largest = z3["largest_unit_bytes"].get<double>();
  const double z3_total = state("optim_grads_params") + z3["gathered_peak_bytes"].get<double>();
  EXPECT_TRUE(within(z3_total, 16 * psi / W + largest))
      << "optim_grads_params: state + gathered peak = " << z3_total << " vs 16 psi / W + largest unit = "
      << 16 * psi / W + largest;
  EXPECT_TRUE(within(state("optim_grads_params"), 16 * psi / W)) << state("optim_grads_params");
  EXPECT_GE(z3["gathered_peak_bytes"].get<double>(), largest) << "the largest unit was gathered at some point";
  EXPECT_EQ(z3["gathered_bytes"].get<int64_t>(), 0) << "nothing stays gathered after the step";
  for (const auto& s : {"no_shard", "optim", "optim_grads"}) {
    EXPECT_EQ(rank0[s]["gathered_peak_bytes"].get<int64_t>(), 0) << s << " never gathers parameters";
  }
}

namespace {

// The engine in one process with the given options: final parameters and per-step norms.
std::map<std::string, torch::Tensor> engine_training(const ShardOptions& options, std::vector<double>* norms) {
  ToyModel model;
  model->reset(7);
  auto sharded = fully_shard(model.ptr(), make_local_communicator(), options);
  AdamWOptions o;
  o.lr = ToyRun::kLr;
  o.weight_decay = ToyRun::kWeightDecay;
  ShardedAdamW optim(sharded, o);
  for (int step = 0; step < ToyRun::kSteps; ++step) {
    for (int micro = 0; micro < ToyRun::kAccum; ++micro) {
      auto batch = toy_batch(step, micro * ToyModelImpl::kMicroBatch);
      auto logits = model->forward(batch.narrow(1, 0, ToyModelImpl::kSeq));
      sharded->backward(torch::nn::functional::cross_entropy(logits.reshape({-1, ToyModelImpl::kVocab}),
                                                             batch.narrow(1, 1, ToyModelImpl::kSeq).reshape({-1})));
    }
    norms->push_back(sharded->finish_gradients(ToyRun::kClip));
    optim.step(ToyRun::lr_at(step));
  }
  std::map<std::string, torch::Tensor> out;
  sharded->for_each_full_parameter([&](const std::string& name, const at::Tensor& t) { out[name] = t.clone(); });
  return out;
}

}  // namespace

// In one process (world of one), every strategy must train exactly like plain libtorch.
TEST(EngineSingleProcess, EveryStrategyMatchesPlainLibtorch) {
  std::vector<double> ref_norms;
  std::map<std::string, torch::Tensor> init;
  auto ref = reference_training(1, &ref_norms, &init);
  for (const auto& s : kStrategies) {
    std::vector<double> norms;
    const auto params = engine_training(parse_strategy(s), &norms);
    for (int step = 0; step < ToyRun::kSteps; ++step) {
      EXPECT_NEAR(norms[step], ref_norms[step], 1e-5 * ref_norms[step]) << s << " step " << step + 1;
    }
    for (const auto& [name, t] : params) {
      EXPECT_LT((t - ref[name]).abs().max().item<double>(), 5e-5) << s << ": " << name;
    }
  }
}

namespace {

// A unit whose forward is not a function of its inputs: every call adds its call count.
struct NoisyBlockImpl : public nn::HookableModule {
  NoisyBlockImpl() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
  torch::Tensor forward(const torch::Tensor& x) {
    return call_hooked(x, [this](const torch::Tensor& in) { return fc(in) + static_cast<double>(++calls); });
  }
  torch::nn::Linear fc{nullptr};
  int calls = 0;
};
TORCH_MODULE(NoisyBlock);

struct NoisyModelImpl : public nn::HookableModule {
  NoisyModelImpl() { noisy = register_module("noisy", NoisyBlock()); }
  torch::Tensor forward(const torch::Tensor& x) {
    return call_hooked(x, [this](const torch::Tensor& in) { return noisy(in); });
  }
  NoisyBlock noisy{nullptr};
};
TORCH_MODULE(NoisyModel);

}  // namespace

// Activation checkpointing recomputes the same operations on the same inputs: the bits are
// those of the run that kept its activations (tied, unused and frozen parameters included,
// and a first unit after a frozen unit).
TEST(ActivationCheckpointing, EveryStrategyGivesTheBitsOfTheRunWithoutIt) {
  for (const auto& s : kStrategies) {
    ShardOptions plain(parse_strategy(s));
    ShardOptions ckpt = plain;
    ckpt.activation_checkpointing = true;
    ckpt.recompute_check = nn::RecomputeCheck::Bitwise;
    std::vector<double> norms_plain, norms_ckpt;
    auto a = engine_training(plain, &norms_plain);
    auto b = engine_training(ckpt, &norms_ckpt);
    EXPECT_EQ(norms_plain, norms_ckpt) << s;
    for (const auto& [name, t] : a) EXPECT_TRUE(at::equal(t, b.at(name))) << s << ": " << name;
  }
}

TEST(ActivationCheckpointing, RecomputeCheckNamesANondeterministicUnit) {
  for (auto check : {nn::RecomputeCheck::Shape, nn::RecomputeCheck::Bitwise}) {
    NoisyModel model;
    ShardOptions o(Strategy::OptimGradsParams);
    o.activation_checkpointing = true;
    o.recompute_check = check;
    auto sharded = fully_shard(model.ptr(), make_local_communicator(), o);
    at::Tensor loss = model->forward(torch::ones({2, 4}, torch::requires_grad())).sum();
    if (check == nn::RecomputeCheck::Shape) {
      EXPECT_NO_THROW(sharded->backward(loss)) << "values are not compared in shape mode";
      continue;
    }
    try {
      sharded->backward(loss);
      FAIL() << "a recompute that differs from its forward must be reported";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("the recompute of 'noisy' in backward gave output 0 other values"),
                std::string::npos)
          << e.what();
    }
  }
}
