// Published sizes of the Qwen family, counted on the model built inside nn::DeferredInit (no
// parameter bytes exist): each must equal the published count (config.cpp cites the sources),
// and agree with the model cards' rounded figures.
#include "models/qwen3/config.h"
#include "models/qwen3/model.h"
#include "zeroshard/nn/deferred.h"

#include <cmath>
#include <gtest/gtest.h>
#include <set>

namespace zeroshard::models::qwen3 {
namespace {

// Whether a model card's figure (billions, `digits` decimals) is `n` rounded or truncated (the
// cards do both: Qwen2.5-7B's 7,615,616,512 is "7.61B", Qwen3-8B's 8,190,735,360 "8.2B").
bool card_says(int64_t n, double card, int digits) {
  const double scale = std::pow(10.0, digits), x = static_cast<double>(n) / 1e9 * scale;
  return std::abs(std::round(x) - card * scale) < 1e-6 || std::abs(std::floor(x) - card * scale) < 1e-6;
}

TEST(Qwen3Sizes, DeferredModelsHaveThePublishedCounts) {
  for (const auto& s : published_sizes()) {
    SCOPED_TRACE(s.name);
    nn::DeferredInit deferred;
    QwenForCausalLM model(s.config, s.lm_head);
    int64_t bytes_held = 0;
    for (const auto& p : model->parameters()) {
      EXPECT_TRUE(nn::is_deferred(p));
      if (!nn::is_deferred(p)) bytes_held += static_cast<int64_t>(p.nbytes());
    }
    EXPECT_EQ(bytes_held, 0);
    EXPECT_EQ(model->num_params(), s.params) << s.source;
    EXPECT_EQ(s.config.num_params(s.lm_head), s.params);
  }
}

TEST(Qwen3Sizes, ModelCardFigures) {
  struct Card {
    QwenConfig config;
    double total, non_embedding;
    int digits_total, digits_non_embedding;
  };
  // Model cards (Qwen/Qwen3-*, Qwen/Qwen2.5-7B): "Number of Parameters" / "(Non-Embedding)".
  const std::vector<Card> cards = {{qwen3_0_6b(), 0.6, 0.44, 1, 2},
                                   {qwen3_4b(), 4.0, 3.6, 1, 1},
                                   {qwen3_8b(), 8.2, 6.95, 1, 2},
                                   {qwen3_30b_a3b(), 30.5, 29.9, 1, 1},
                                   {qwen25_vl_7b_text(), 7.61, 6.53, 2, 2}};
  for (const auto& c : cards) {
    SCOPED_TRACE(c.config.source.dump());
    const int64_t total = c.config.num_params(true);
    const int64_t embedding = c.config.vocab_size * c.config.hidden_size * (c.config.tie_word_embeddings ? 1 : 2);
    EXPECT_TRUE(card_says(total, c.total, c.digits_total)) << total;
    EXPECT_TRUE(card_says(total - embedding, c.non_embedding, c.digits_non_embedding)) << total - embedding;
  }
  // Qwen3-30B-A3B: 3.3B activated per token (8 of 128 experts).
  const QwenConfig moe = qwen3_30b_a3b();
  const int64_t expert = 3 * moe.hidden_size * moe.moe_intermediate_size;
  const int64_t inactive = moe.num_moe_layers() * (moe.num_experts - moe.num_experts_per_tok) * expert;
  EXPECT_TRUE(card_says(moe.num_params() - inactive, 3.3, 1)) << moe.num_params() - inactive;
}

TEST(Qwen3Sizes, TiedHeadIsOneTensorUnderTwoNames) {
  nn::DeferredInit deferred;
  QwenForCausalLM tied(qwen3_0_6b());
  const auto params = tied->named_parameters();
  ASSERT_NE(params.find("lm_head.weight"), nullptr);
  ASSERT_NE(params.find("model.embed_tokens.weight"), nullptr);
  EXPECT_EQ(params["lm_head.weight"].unsafeGetTensorImpl(), params["model.embed_tokens.weight"].unsafeGetTensorImpl());
  QwenForCausalLM untied(qwen3_8b());
  const auto p8 = untied->named_parameters();
  EXPECT_NE(p8["lm_head.weight"].unsafeGetTensorImpl(), p8["model.embed_tokens.weight"].unsafeGetTensorImpl());
  QwenForCausalLM tower(qwen25_vl_7b_text(), /*lm_head=*/false);
  EXPECT_EQ(tower->named_parameters().find("lm_head.weight"), nullptr);
}

}  // namespace
}  // namespace zeroshard::models::qwen3
