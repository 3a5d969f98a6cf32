// The Qwen family beyond the reference cases: config.json parsing (errors name the field) and
// export, checkpoint names, KV cache, hidden-state taps, MoE routing and the path of the
// load-balancing loss's gradient through the layers' hooked outputs.
#include "models/qwen3/config.h"
#include "models/qwen3/loss.h"
#include "models/qwen3/model.h"

#include <fstream>
#include <gtest/gtest.h>
#include <set>

namespace zeroshard::models::qwen3 {
namespace {

using nlohmann::json;

json small_json(const std::string& type = "qwen3") {
  json j = {
      {"model_type", type},     {"vocab_size", 50},         {"hidden_size", 24},           {"intermediate_size", 40},
      {"num_hidden_layers", 3}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},    {"head_dim", 10},
      {"rms_norm_eps", 1e-6},   {"rope_theta", 10000.0},    {"tie_word_embeddings", false}};
  if (type == "qwen3_moe") {
    j["num_experts"] = 5;
    j["num_experts_per_tok"] = 2;
    j["moe_intermediate_size"] = 12;
    j["norm_topk_prob"] = true;
    j["mlp_only_layers"] = {1};
  }
  return j;
}

// Random weights (float64), keyed by name so two models with the same names get the same values.
void randomize(QwenForCausalLMImpl& m, uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters()) {
    auto g = at::detail::createCPUGenerator(seed + std::hash<std::string>{}(p.key()));
    p.value().copy_(at::normal(0.0, p.value().dim() == 1 ? 0.3 : 0.4, p.value().sizes(), g, p.value().options()));
    if (p.value().dim() == 1 && p.key().find("norm") != std::string::npos) p.value().add_(1.0);
  }
}

std::string error_of(const json& j) {
  try {
    QwenConfig::from_hf_config(j, "cfg.json");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Qwen3Config, ErrorsNameTheField) {
  auto with = [](const std::string& key, const json& v) {
    json j = small_json();
    j[key] = v;
    return j;
  };
  EXPECT_NE(error_of(with("model_type", "llama")).find("model_type"), std::string::npos);
  EXPECT_NE(error_of(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}})).find("rope_scaling.type"),
            std::string::npos);
  EXPECT_NE(error_of(with("use_sliding_window", true)).find("use_sliding_window"), std::string::npos);
  EXPECT_NE(
      error_of(with("layer_types", {"full_attention", "sliding_attention", "full_attention"})).find("layer_types"),
      std::string::npos);
  EXPECT_NE(error_of(with("hidden_act", "gelu")).find("hidden_act"), std::string::npos);
  EXPECT_NE(error_of(with("attention_dropout", 0.1)).find("attention_dropout"), std::string::npos);
  EXPECT_NE(error_of(with("num_key_value_heads", 3)).find("num_key_value_heads"), std::string::npos);
  EXPECT_NE(error_of(with("hidden_size", "24")).find("hidden_size"), std::string::npos);
  json missing = small_json();
  missing.erase("vocab_size");
  EXPECT_NE(error_of(missing).find("vocab_size"), std::string::npos);
  json moe = small_json("qwen3_moe");
  moe["num_experts_per_tok"] = 6;
  EXPECT_NE(error_of(moe).find("num_experts_per_tok"), std::string::npos);
  EXPECT_EQ(error_of(small_json()), "");
}

TEST(Qwen3Config, TypeSwitchesAndDefaults) {
  const QwenConfig q3 = QwenConfig::from_hf_config(small_json(), "q3");
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.qkv_bias);
  json no_head_dim = small_json();
  no_head_dim.erase("head_dim");
  EXPECT_EQ(QwenConfig::from_hf_config(no_head_dim, "q3").head_dim, 128);  // Qwen3Config's default
  no_head_dim["head_dim"] = nullptr;
  EXPECT_EQ(QwenConfig::from_hf_config(no_head_dim, "q3").head_dim, 6);  // null: hidden / heads
  json q2 = small_json("qwen2");
  q2.erase("head_dim");
  const QwenConfig c2 = QwenConfig::from_hf_config(q2, "q2");
  EXPECT_EQ(c2.head_dim, 6);
  EXPECT_FALSE(c2.qk_norm);
  EXPECT_TRUE(c2.qkv_bias);
  EXPECT_FALSE(c2.o_bias);
  // Qwen2.5-VL with the language model's fields nested in text_config (recent transformers).
  json vl = {{"model_type", "qwen2_5_vl"}, {"vision_config", {{"depth", 32}}}, {"text_config", q2}};
  vl["text_config"]["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {1, 1, 1}}};
  const QwenConfig cvl = QwenConfig::from_hf_config(vl, "vl");
  EXPECT_EQ(cvl.hidden_size, 24);
  EXPECT_EQ(cvl.mrope_section, (std::vector<int64_t>{1, 1, 1}));
  const QwenConfig moe = QwenConfig::from_hf_config(small_json("qwen3_moe"), "moe");
  EXPECT_TRUE(moe.is_moe_layer(0));
  EXPECT_FALSE(moe.is_moe_layer(1));
  EXPECT_EQ(moe.num_moe_layers(), 2);
}

TEST(Qwen3Config, ExportRoundTrips) {
  for (const auto& s : published_sizes()) {
    // A complete released config.json comes back unchanged.
    EXPECT_EQ(s.config.to_hf_config(), s.config.source) << s.name;
  }
  for (const std::string dir : {"qwen3_lm", "qwen3_moe_lm", "qwen25_text"}) {
    std::ifstream in(std::string(ZS_SOURCE_DIR) + "/tests/fixtures/" + dir + "/config.json");
    const json j = json::parse(in);
    const QwenConfig a = QwenConfig::from_hf_config(j, dir);
    const json exported = a.to_hf_config();
    for (const auto& [k, v] : j.items()) EXPECT_EQ(exported[k], v) << dir << ": " << k;  // nothing lost or changed
    const QwenConfig b = QwenConfig::from_hf_config(exported, dir + " exported");
    EXPECT_EQ(b.to_hf_config(), exported) << dir;
    EXPECT_EQ(b.num_params(), a.num_params());
    EXPECT_EQ(b.head_dim, a.head_dim);
    EXPECT_EQ(b.mrope_section, a.mrope_section);
  }
}

TEST(Qwen3Model, CheckpointNames) {
  QwenForCausalLM m(QwenConfig::from_hf_config(small_json("qwen3_moe"), "moe"));
  std::set<std::string> names;
  for (const auto& p : m->named_parameters()) names.insert(p.key());
  for (const char* n :
       {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_norm.weight", "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.4.down_proj.weight",
        "model.layers.1.mlp.gate_proj.weight", "model.layers.2.mlp.experts.0.up_proj.weight"}) {
    EXPECT_EQ(names.count(n), 1u) << n;
  }
  EXPECT_EQ(names.count("model.layers.0.self_attn.q_proj.bias"), 0u);
  QwenForCausalLM q2(QwenConfig::from_hf_config(small_json("qwen2"), "q2"), false);
  std::set<std::string> n2;
  for (const auto& p : q2->named_parameters()) n2.insert(p.key());
  EXPECT_EQ(n2.count("model.layers.2.self_attn.v_proj.bias"), 1u);
  EXPECT_EQ(n2.count("model.layers.2.self_attn.o_proj.bias"), 0u);
  EXPECT_EQ(n2.count("model.layers.2.self_attn.q_norm.weight"), 0u);
  EXPECT_EQ(static_cast<int64_t>(n2.size()), static_cast<int64_t>(q2->parameters().size()));
  EXPECT_EQ(q2->num_params(), q2->config().num_params(false));
}

TEST(Qwen3Model, KVCacheMatchesTheFullForward) {
  for (const std::string type : {"qwen3", "qwen3_moe", "qwen2"}) {
    SCOPED_TRACE(type);
    QwenForCausalLM m(QwenConfig::from_hf_config(small_json(type), type));
    m->to(torch::kDouble);
    randomize(*m, 7);
    torch::NoGradGuard no_grad;
    const auto ids = torch::randint(0, 50, {2, 9}, torch::kLong);
    const auto full = m->forward({ids}).logits;
    KVCache cache;
    std::vector<torch::Tensor> parts{m->forward({ids.narrow(1, 0, 5)}, &cache).logits};
    for (int64_t t = 5; t < 9; ++t) parts.push_back(m->forward({ids.narrow(1, t, 1)}, &cache).logits);
    EXPECT_EQ(cache.length, 9);
    EXPECT_LT((torch::cat(parts, 1) - full).abs().max().item<double>(), 1e-12);

    // Left-padded prompt: mask and positions as generation passes them.
    auto mask = torch::ones({2, 9}, torch::kLong);
    mask[1].narrow(0, 0, 3).fill_(0);
    const auto pos = (mask.cumsum(1) - 1).clamp_min(0);
    const auto ref = m->forward({ids, mask, pos}).logits;
    KVCache c2;
    const auto a = m->forward({ids.narrow(1, 0, 6), mask.narrow(1, 0, 6), pos.narrow(1, 0, 6)}, &c2).logits;
    const auto b = m->forward({ids.narrow(1, 6, 3), mask, pos.narrow(1, 6, 3)}, &c2).logits;
    // Real tokens only: a padding query sees no real key and averages whatever keys exist.
    const auto cached = torch::cat({a, b}, 1);
    EXPECT_LT((cached[0] - ref[0]).abs().max().item<double>(), 1e-12);
    EXPECT_LT((cached[1].narrow(0, 3, 6) - ref[1].narrow(0, 3, 6)).abs().max().item<double>(), 1e-12);
    // The real tokens of the padded row equal the same tokens alone (positions from the mask).
    const auto alone = m->forward({ids[1].narrow(0, 3, 6).unsqueeze(0)}).logits;
    EXPECT_LT((ref[1].narrow(0, 3, 6) - alone[0]).abs().max().item<double>(), 1e-12);
  }
}

TEST(Qwen3Model, HiddenStateTapsFollowTransformers) {
  const QwenConfig c = QwenConfig::from_hf_config(small_json(), "q3");
  QwenForCausalLM m(c);
  m->to(torch::kDouble);
  randomize(*m, 3);
  torch::NoGradGuard no_grad;
  const auto ids = torch::randint(0, 50, {2, 7}, torch::kLong);
  const Inputs in{ids};
  const auto taps = m->hidden_states(in, {0, 1, 2, 3, -1, -2});
  EXPECT_TRUE(taps[0].equal(m->model->embed_tokens(ids)));
  EXPECT_TRUE(taps[3].equal(m->forward(in).last_hidden_state));  // index L: after model.norm
  EXPECT_TRUE(taps[4].equal(taps[3]));                           // -1 == L
  EXPECT_TRUE(taps[5].equal(taps[2]));                           // -2 == L - 1 (Z-Image's)
  // Index k < L is the residual stream after k layers, un-normed: a k-layer model with the same
  // weights has it as its own last hidden state before model.norm.
  for (int64_t k : {1, 2}) {
    json jk = small_json();
    jk["num_hidden_layers"] = k;
    QwenForCausalLM mk(QwenConfig::from_hf_config(jk, "qk"));
    mk->to(torch::kDouble);
    randomize(*mk, 3);
    EXPECT_TRUE(mk->forward(in).last_hidden_state.equal(m->model->norm(taps[static_cast<size_t>(k)])));
  }
  EXPECT_THROW(m->hidden_states(in, {4}), std::invalid_argument);
  EXPECT_THROW(m->hidden_states(in, {-5}), std::invalid_argument);
}

TEST(Qwen3Model, RoutedLayersReturnRouterLogitsAndExpertsSeeOnlyTheirTokens) {
  const QwenConfig c = QwenConfig::from_hf_config(small_json("qwen3_moe"), "moe");
  QwenForCausalLM m(c);
  m->to(torch::kDouble);
  randomize(*m, 5);
  const auto ids = torch::randint(0, 50, {1, 3}, torch::kLong);
  const Output out = m->forward({ids});
  ASSERT_EQ(out.router_logits.size(), 2u);  // layer 1 is dense (mlp_only_layers)
  EXPECT_EQ(out.router_logits[0].sizes(), (at::IntArrayRef{3, 5}));
  auto* block = m->model->layers[0]->as<DecoderLayerImpl>()->moe.get();
  EXPECT_EQ(block->last_tokens_per_expert.sum().item<int64_t>(), 3 * 2);
  out.logits.sum().backward();
  // 3 tokens x 2 slots reach at most 5 experts; an unchosen expert has no gradient, a chosen one has.
  for (int64_t e = 0; e < 5; ++e) {
    const auto& g = block->experts[static_cast<size_t>(e)]->as<MLPImpl>()->up_proj->weight.grad();
    EXPECT_EQ(g.defined(), block->last_tokens_per_expert[e].item<int64_t>() > 0) << "expert " << e;
  }
}

// bf16 (the training dtype): every dtype follows the input (nothing hard-coded to float32), the
// norms, RoPE, router softmax and losses compute in float32, and the result stays near float32's.
TEST(Qwen3Model, Bfloat16RunsForwardAndBackward) {
  for (const std::string type : {"qwen3_moe", "qwen2"}) {
    SCOPED_TRACE(type);
    const QwenConfig c = QwenConfig::from_hf_config(small_json(type), type);
    QwenForCausalLM m32(c), m16(c);
    randomize(*m32, 13);
    randomize(*m16, 13);
    m16->to(torch::kBFloat16);
    const auto ids = torch::randint(0, 50, {2, 6}, torch::kLong);
    auto mask = torch::ones({2, 6}, torch::kLong);
    mask[1][5] = 0;
    const Output a = m32->forward({ids, mask}), b = m16->forward({ids, mask});
    ASSERT_EQ(b.logits.scalar_type(), torch::kBFloat16);
    // bf16 rounding (native bf16 GEMMs on AMX/AVX512-BF16 CPUs, widened fp32 ones elsewhere) may
    // flip a near-tied top-k choice of the router for a token: bound the typical error tightly
    // and the worst one loosely.
    const double scale = a.logits.abs().max().item<double>();
    const at::Tensor err = (b.logits.to(torch::kFloat) - a.logits).abs() / scale;
    EXPECT_LT(err.mean().item<double>(), 0.01);
    // (0.156 seen under ctest -j2 with one thread per test, 0.15 alone: a flipped token's error.)
    EXPECT_LT(err.max().item<double>(), 0.3);
    const LmLoss loss = lm_loss(c, b, ids, mask, /*with_aux=*/true);
    EXPECT_EQ(loss.loss.scalar_type(), torch::kFloat);
    loss.loss.backward();
    for (const auto& p : m16->named_parameters()) {
      if (p.value().grad().defined()) {
        EXPECT_EQ(p.value().grad().scalar_type(), torch::kBFloat16) << p.key();
        EXPECT_TRUE(p.value().grad().isfinite().all().item<bool>()) << p.key();
      }
    }
  }
}

TEST(Qwen3Loss, CausalLmLossShiftsAndIgnores) {
  const auto logits = torch::randn({2, 4, 6}, torch::kDouble);
  auto labels = torch::randint(0, 6, {2, 4}, torch::kLong);
  labels[0][2] = -100;
  double sum = 0;
  int count = 0;
  const auto logp = torch::log_softmax(logits, -1);
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t + 1 < 4; ++t) {
      const int64_t y = labels[b][t + 1].item<int64_t>();
      if (y == -100) continue;
      sum -= logp[b][t][y].item<double>();
      ++count;
    }
  }
  EXPECT_NEAR(causal_lm_loss(logits, labels).item<double>(), sum / count, 1e-12);
  EXPECT_NEAR(causal_lm_loss(logits, labels, -100, 10.0).item<double>(), sum / 10.0, 1e-12);
}

TEST(Qwen3Loss, LoadBalancingLossMasksPaddedTokens) {
  // Two layers of [B=2, S=3] logits; row 1's last token is padding. Masked == the loss over the
  // real tokens alone.
  const auto l0 = torch::randn({6, 4}, torch::kDouble), l1 = torch::randn({6, 4}, torch::kDouble);
  auto mask = torch::ones({2, 3}, torch::kLong);
  mask[1][2] = 0;
  const auto keep = torch::tensor({0, 1, 2, 3, 4}, torch::kLong);
  const double masked = load_balancing_loss({l0, l1}, 4, 2, mask).item<double>();
  const double alone = load_balancing_loss({l0.index_select(0, keep), l1.index_select(0, keep)}, 4, 2).item<double>();
  EXPECT_NEAR(masked, alone, 1e-12);
  // Perfectly even routing has the minimum E * sum_e (k/E) (1/E) = k.
  EXPECT_NEAR(load_balancing_loss({torch::zeros({8, 4}, torch::kDouble)}, 4, 2).item<double>(), 2.0, 1e-12);
}

// The aux loss's gradient reaches each routed layer through its hooked outputs, so it also
// survives activation checkpointing (the body runs again in backward between the hooks).
TEST(Qwen3Model, AuxLossGradientFlowsThroughHookedOutputs) {
  const QwenConfig c = QwenConfig::from_hf_config(small_json("qwen3_moe"), "moe");
  const auto ids = torch::randint(0, 50, {2, 5}, torch::kLong);
  auto gate_grads = [&](bool checkpoint, std::vector<int>* hooked_outputs) {
    QwenForCausalLM m(c);
    m->to(torch::kDouble);
    randomize(*m, 11);
    for (size_t i = 0; i < m->model->layers->size(); ++i) {
      auto hooks = std::make_shared<nn::ForwardHooks>();
      hooks->checkpoint = checkpoint;
      hooks->name = "layer" + std::to_string(i);
      hooks->post = [hooked_outputs](std::vector<at::Tensor>& outs) {
        if (hooked_outputs != nullptr) hooked_outputs->push_back(static_cast<int>(outs.size()));
      };
      m->model->layers[i]->as<DecoderLayerImpl>()->set_forward_hooks(hooks);
    }
    const Output out = m->forward({ids});
    load_balancing_loss(out.router_logits, c.num_experts, c.num_experts_per_tok).backward();
    return std::vector<torch::Tensor>{m->model->layers[0]->as<DecoderLayerImpl>()->moe->gate->weight.grad(),
                                      m->model->layers[2]->as<DecoderLayerImpl>()->moe->gate->weight.grad()};
  };
  std::vector<int> outputs_per_call;
  const auto plain = gate_grads(false, &outputs_per_call);
  EXPECT_EQ(outputs_per_call, (std::vector<int>{2, 1, 2}));  // routed layers hook their router logits too
  const auto recomputed = gate_grads(true, nullptr);
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(plain[i].defined());
    ASSERT_TRUE(recomputed[i].defined());
    EXPECT_GT(plain[i].abs().max().item<double>(), 0.0);
    EXPECT_LT((plain[i] - recomputed[i]).abs().max().item<double>(), 1e-14);
  }
}

}  // namespace
}  // namespace zeroshard::models::qwen3
