// Wan 2.1: published parameter counts on deferred models, config refusals, and the DiT's
// seq_len padding / mixed-grid batching / unit checkpointing behaviours.
#include "models/wan/dit.h"
#include "models/wan/vae.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>

using namespace zeroshard;
using namespace zeroshard::models::wan;

TEST(WanSizes, PublishedCountsOnTheDeferredModels) {
  // Arithmetic from the released configs (wan/configs/wan_t2v_1_3B.py, wan_t2v_14B.py): the
  // element counts of the released diffusion_pytorch_model*.safetensors of Wan2.1-T2V-1.3B
  // (1,418,996,800) and -14B (14,288,491,584; also each expert of Wan2.2-T2V-A14B, same shape).
  EXPECT_EQ(wan21_t2v_1_3b().num_params(), 1418996800LL);
  EXPECT_EQ(wan21_t2v_14b().num_params(), 14288491584LL);
  // Wan2.1_VAE.pth: 126,892,531 elements (encoder, decoder, conv1, conv2).
  EXPECT_EQ(wan21_vae().num_params(), 126892531LL);
  nn::DeferredInit deferred;
  WanModel m(wan21_t2v_14b());
  for (const auto& p : m->parameters()) ASSERT_TRUE(nn::is_deferred(p));
  WanVae v(wan21_vae());
  for (const auto& p : v->parameters()) ASSERT_TRUE(nn::is_deferred(p));
}

TEST(WanSizes, DiffusersConfigsGiveTheSameModels) {
  // diffusers scripts/convert_wan_to_diffusers.py, "Wan-T2V-1.3B" / "Wan-T2V-14B".
  const nlohmann::json small = {{"added_kv_proj_dim", nullptr}, {"attention_head_dim", 128}, {"cross_attn_norm", true},
                                {"eps", 1e-06}, {"ffn_dim", 8960}, {"freq_dim", 256}, {"in_channels", 16},
                                {"num_attention_heads", 12}, {"num_layers", 30}, {"out_channels", 16},
                                {"patch_size", {1, 2, 2}}, {"qk_norm", "rms_norm_across_heads"}, {"text_dim", 4096}};
  const WanDiTConfig c = WanDiTConfig::from_diffusers_json(small, "transformer/config.json");
  EXPECT_EQ(c.dim, 1536);
  EXPECT_EQ(c.num_params(), wan21_t2v_1_3b().num_params());
  nlohmann::json big = small;
  big["num_attention_heads"] = 40;
  big["num_layers"] = 40;
  big["ffn_dim"] = 13824;
  EXPECT_EQ(WanDiTConfig::from_diffusers_json(big, "transformer/config.json").num_params(), 14288491584LL);
  big["image_dim"] = 1280;  // i2v
  EXPECT_THROW(WanDiTConfig::from_diffusers_json(big, "transformer/config.json"), std::invalid_argument);
}

TEST(WanSizes, OnlyTextToVideoIsBuilt) {
  for (const std::string type : {"i2v", "flf2v", "vace"}) {
    nlohmann::json j = {{"model_type", type}};
    try {
      WanDiTConfig::from_json(j, "config.json");
      FAIL() << type << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + type + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(WanDiTConfig::from_json({{"window_size", {64, 64}}}, "config.json"), std::invalid_argument);
  EXPECT_THROW(WanDiTConfig::from_json({{"dim", 96}, {"num_heads", 5}}, "config.json"), std::invalid_argument);
}

namespace {
WanDiTConfig tiny_dit() {
  WanDiTConfig c;
  c.dim = 48;
  c.num_heads = 2;
  c.num_layers = 2;
  c.ffn_dim = 64;
  c.freq_dim = 32;
  c.text_len = 6;
  c.text_dim = 8;
  c.in_dim = 4;
  c.out_dim = 4;
  return c;
}
}  // namespace

TEST(WanDiT, RopeSplitFollowsHeadDim) {
  WanDiTConfig c;
  c.dim = 1536;
  c.num_heads = 12;  // d = 128: 44 / 42 / 42
  EXPECT_EQ(c.rope_axes_dim(), (std::vector<int64_t>{44, 42, 42}));
  c.dim = 96;
  c.num_heads = 3;  // d = 32: 12 / 10 / 10 (the reference case's 6 / 5 / 5 pairs)
  EXPECT_EQ(c.rope_axes_dim(), (std::vector<int64_t>{12, 10, 10}));
}

TEST(WanDiT, SeqLenPaddingAndMixedGridsMatchSingleSamples) {
  at::manual_seed(0);
  WanModel m(tiny_dit());
  m->reset_parameters(3);
  {
    torch::NoGradGuard no_grad;  // head.head starts at zero: make the output depend on everything
    m->head->head->weight.normal_(0, 0.1);
  }
  m->to(at::kDouble);
  m->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor a = at::randn({4, 2, 4, 6}, at::kDouble), b = at::randn({4, 3, 2, 4}, at::kDouble);
  const at::Tensor ca = at::randn({5, 8}, at::kDouble), cb = at::randn({2, 8}, at::kDouble);
  const at::Tensor t = at::tensor({300.0, 871.5}, at::kDouble);
  const at::Tensor alone_a = m->forward({a}, t.narrow(0, 0, 1), {ca})[0];
  const at::Tensor alone_b = m->forward({b}, t.narrow(0, 1, 1), {cb})[0];
  ASSERT_EQ(alone_a.sizes(), a.sizes());
  // Padding one sample to 20 tokens (it has 12): keys masked, rows dropped.
  const at::Tensor padded = m->forward({a}, t.narrow(0, 0, 1), {ca}, 20)[0];
  EXPECT_LT((padded - alone_a).abs().max().item<double>(), 1e-12);
  // Two grids in one batch (12 and 6 tokens, padded to 12).
  const auto both = m->forward({a, b}, t, {ca, cb});
  EXPECT_LT((both[0] - alone_a).abs().max().item<double>(), 1e-12);
  EXPECT_LT((both[1] - alone_b).abs().max().item<double>(), 1e-12);
  EXPECT_THROW(m->forward({a}, t.narrow(0, 0, 1), {ca}, 5), std::invalid_argument);            // seq_len < tokens
  EXPECT_THROW(m->forward({a}, t.narrow(0, 0, 1), {at::randn({7, 8}, at::kDouble)}), std::invalid_argument);  // > text_len
}

TEST(WanDiT, CheckpointedBlocksRecomputeExactly) {
  // Every block takes e0 and the text context as tensor inputs and uses each twice or more, so
  // their gradients are sums over blocks and uses whose grouping checkpointing changes: equal to
  // rounding (tight in float64), while each block's recompute is bitwise (the check would throw).
  WanModel m(tiny_dit());
  m->reset_parameters(5);
  {
    torch::NoGradGuard no_grad;
    m->head->head->weight.normal_(0, 0.1);
  }
  m->to(at::kDouble);
  const at::Tensor x = at::randn({2, 4, 2, 4, 4}, at::kDouble), ctx = at::randn({2, 3, 8}, at::kDouble);
  const at::Tensor t = at::tensor({10.0, 500.0}, at::kDouble).requires_grad_(true);
  auto grads = [&]() {
    m->zero_grad();
    t.mutable_grad() = at::Tensor();
    (m->forward_batched(x, t, ctx) * x).sum().backward();
    std::vector<at::Tensor> g = {t.grad().clone()};
    for (const auto& p : m->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  const auto plain = grads();
  for (const auto& b : *m->blocks) {
    auto hooks = std::make_shared<nn::ForwardHooks>();
    hooks->checkpoint = true;
    hooks->recompute_check = nn::RecomputeCheck::Bitwise;
    b->as<WanAttentionBlockImpl>()->set_forward_hooks(hooks);
  }
  const auto ckpt = grads();
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    const double scale = std::max(1e-30, plain[i].abs().max().item<double>());
    EXPECT_LT((plain[i] - ckpt[i]).abs().max().item<double>() / scale, 1e-12) << i;
  }
  EXPECT_GT(plain[0].abs().sum().item<double>(), 0.0);  // the timestep gets a gradient
}

TEST(WanDiT, RunsWithBf16Parameters) {
  // Mixed precision: bf16 parameters, fp32 inputs; norms, RoPE and softmax in fp32 inside.
  WanModel m(tiny_dit());
  m->reset_parameters(9);
  {
    torch::NoGradGuard no_grad;
    m->head->head->weight.normal_(0, 0.1);
  }
  torch::NoGradGuard no_grad;
  const at::Tensor x = at::randn({1, 4, 2, 4, 4}), ctx = at::randn({1, 3, 8}), t = at::tensor({250.0f});
  const at::Tensor ref = m->forward_batched(x, t, ctx);
  m->to(at::kBFloat16);
  const at::Tensor got = m->forward_batched(x, t, ctx);
  EXPECT_EQ(got.scalar_type(), at::kBFloat16);
  EXPECT_LT((got.to(at::kFloat) - ref).abs().max().item<double>() / ref.abs().max().item<double>(), 0.05);
}
