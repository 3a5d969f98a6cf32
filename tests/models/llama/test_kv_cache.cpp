// Generation with a KV cache gives the logits of recomputing the whole sequence.
#include "models/llama/llama.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using namespace zeroshard;

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

