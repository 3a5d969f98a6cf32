// Sampling from LM checkpoints: the KV cache against recomputing the whole sequence, and the
// same text under every strategy and world size.
#include "models/llama/llama.h"
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

void expect_cache_matches_full_forward(models::LlamaConfig c) {
  models::Llama model(c);
  model->reset_parameters(11);
  torch::NoGradGuard no_grad;
  at::manual_seed(5);
  const at::Tensor tokens = torch::randint(0, c.vocab_size, {2, 12}, at::kLong);
  const at::Tensor full = model->forward(tokens);
  models::KVCache cache;
  std::vector<at::Tensor> steps = {model->forward(tokens.narrow(1, 0, 5), &cache)};
  for (int64_t t = 5; t < 12; ++t) steps.push_back(model->forward(tokens.narrow(1, t, 1), &cache));
  EXPECT_EQ(cache.length, 12);
  const at::Tensor cached = torch::cat(steps, 1);
  const double err = (cached - full).abs().max().item<double>() / full.abs().max().item<double>();
  EXPECT_LT(err, 1e-5) << "cached logits differ from the full forward";
}

models::LlamaConfig small() {
  models::LlamaConfig c;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 48;
  c.max_seq_len = 16;
  return c;
}

}  // namespace

TEST(KvCache, MatchesRecomputingTheWholeSequence) {
  expect_cache_matches_full_forward(small());
  models::LlamaConfig moe = small();
  moe.moe.n_experts = 4;
  moe.moe.shared_expert_hidden = 16;
  expect_cache_matches_full_forward(moe);
}

TEST(Sample, SameTextUnderEveryStrategyWorldSizeAndWithoutCache) {
  TrainRun run = train("--set train.steps=30 --set train.save_final=true", 2, "sample_src");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto sample = [&](const std::string& args) {
    std::string out;
    const int rc = run_command(std::string(ZS_BINARY) + " sample " + run.dir +
                                   " --prompt 'The ' --tokens 24 " + args,
                               &out);
    EXPECT_EQ(rc, 0) << args << "\n" << out;
    return out;
  };
  const std::string reference = sample("--nproc 1 --strategy no_shard --temperature 0");
  EXPECT_EQ(reference.rfind("The ", 0), 0u) << reference;
  EXPECT_EQ(reference.size(), 4u + 24u + 1u) << "prompt + 24 bytes + newline: " << reference;
  for (const char* s : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
    EXPECT_EQ(sample(std::string("--nproc 2 --temperature 0 --strategy ") + s), reference) << s;
  }
  EXPECT_EQ(sample("--nproc 2 --temperature 0 --no-cache"), reference);
  // Sampling with a temperature is seeded: the same seed gives the same text.
  EXPECT_EQ(sample("--nproc 2 --temperature 1 --seed 3"), sample("--nproc 1 --temperature 1 --seed 3"));

  std::string out;
  EXPECT_EQ(run_command(std::string(ZS_BINARY) + " sample " + run.dir + " --tokens 40", &out), 1);
  EXPECT_NE(out.find("exceeds model.max_seq_len 32"), std::string::npos) << out;
}
