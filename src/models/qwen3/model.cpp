#include "models/qwen3/model.h"

#include "nn/activations.h"
#include "nn/attention.h"
#include "nn/init.h"
#include "nn/matmul.h"
#include "nn/norms.h"
#include "util/text.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace zeroshard::models::qwen3 {

// ---- attention ----

AttentionImpl::AttentionImpl(const QwenConfig& c)
    : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
  const int64_t D = c.hidden_size;
  q_proj = register_module("q_proj", nn::Linear(D, heads_ * head_dim_, c.qkv_bias));
  k_proj = register_module("k_proj", nn::Linear(D, kv_heads_ * head_dim_, c.qkv_bias));
  v_proj = register_module("v_proj", nn::Linear(D, kv_heads_ * head_dim_, c.qkv_bias));
  o_proj = register_module("o_proj", nn::Linear(heads_ * head_dim_, D, c.o_bias));
  if (c.qk_norm) {
    q_norm = register_module("q_norm", nn::RMSNorm(head_dim_, c.rms_norm_eps));
    k_norm = register_module("k_norm", nn::RMSNorm(head_dim_, c.rms_norm_eps));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const LayerContext& ctx, int64_t layer) {
  const int64_t B = x.size(0), S = x.size(1);
  // [B, S, heads, head_dim]; Qwen3's q_norm / k_norm normalize each head over head_dim here,
  // before RoPE. Qwen2's biases are part of the projections, also before RoPE.
  auto q = q_proj(x).view({B, S, heads_, head_dim_});
  auto k = k_proj(x).view({B, S, kv_heads_, head_dim_});
  auto v = v_proj(x).view({B, S, kv_heads_, head_dim_}).transpose(1, 2);
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  // Rotate-half RoPE: pairs (j, j + head_dim/2) rotate by position * theta^(-2j/head_dim).
  q = nn::apply_rope(q.transpose(1, 2), ctx.rope, nn::RopePairing::RotateHalf);
  k = nn::apply_rope(k.transpose(1, 2), ctx.rope, nn::RopePairing::RotateHalf);
  if (ctx.cache != nullptr) {
    auto& ck = ctx.cache->keys[static_cast<size_t>(layer)];
    auto& cv = ctx.cache->values[static_cast<size_t>(layer)];
    if (ck.defined()) {
      k = torch::cat({ck, k}, 2);
      v = torch::cat({cv, v}, 2);
    }
    ck = k;
    cv = v;
  }
  // GQA: KV head j serves query heads j*g .. j*g + g - 1. transformers' eager attention: repeat_kv,
  // scores * head_dim^-0.5, masked scores at the lowest
  // finite value (finfo.min), softmax in float32 (float64 for float64), probabilities cast back.
  const auto out = nn::attention(q, k, v, ctx.attention);
  return o_proj(out.transpose(1, 2).reshape({B, S, heads_ * head_dim_}));
}

// ---- feed-forward ----

MLPImpl::MLPImpl(int64_t hidden, int64_t intermediate) {
  gate_proj = register_module("gate_proj", nn::Linear(hidden, intermediate));
  up_proj = register_module("up_proj", nn::Linear(hidden, intermediate));
  down_proj = register_module("down_proj", nn::Linear(intermediate, hidden));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) { return down_proj(nn::swiglu(gate_proj(x), up_proj(x))); }

SparseMoeBlockImpl::SparseMoeBlockImpl(const QwenConfig& c)
    : top_k_(c.num_experts_per_tok), norm_topk_prob_(c.norm_topk_prob) {
  gate = register_module("gate", nn::Linear(c.hidden_size, c.num_experts));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < c.num_experts; ++e) experts->push_back(MLP(c.hidden_size, c.moe_intermediate_size));
}

MoeOutput SparseMoeBlockImpl::forward(const torch::Tensor& x) {
  const int64_t D = x.size(-1);
  const auto flat = x.reshape({-1, D});
  const int64_t N = flat.size(0), E = static_cast<int64_t>(experts->size());
  const auto router_logits = gate(flat);  // [N, E]
  const auto probs = torch::softmax(router_logits.to(nn::norm_dtype(router_logits)), -1);
  auto [weights, chosen] = probs.topk(top_k_, -1);  // [N, k], largest first
  if (norm_topk_prob_) weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights.to(x.scalar_type()).reshape({-1});  // per (token, slot)

  // Group the (token, slot) pairs by expert; each expert runs once on its tokens. A token's
  // contributions add up in ascending expert order, as transformers' loop over experts does.
  const auto pair_expert = chosen.reshape({-1});
  const auto order = std::get<1>(torch::sort(pair_expert, /*stable=*/true, 0, /*descending=*/false));
  const auto counts = torch::bincount(pair_expert, {}, E).to(torch::kCPU);
  last_tokens_per_expert = counts;
  const auto* count = counts.data_ptr<int64_t>();
  auto out = torch::zeros_like(flat);
  int64_t offset = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (count[e] == 0) continue;
    const auto pairs = order.narrow(0, offset, count[e]);
    offset += count[e];
    const auto tokens = torch::div(pairs, top_k_, "floor");
    auto y = experts[static_cast<size_t>(e)]->as<MLPImpl>()->forward(flat.index_select(0, tokens));
    y = y * weights.index_select(0, pairs).unsqueeze(1);
    out = out.index_add(0, tokens, y);
  }
  (void)N;
  return {out.view(x.sizes()), router_logits};
}

// ---- decoder layer ----

DecoderLayerImpl::DecoderLayerImpl(const QwenConfig& c, int64_t index) : index_(index) {
  self_attn = register_module("self_attn", Attention(c));
  if (c.is_moe_layer(index)) {
    moe = register_module("mlp", SparseMoeBlock(c));
  } else {
    mlp = register_module("mlp", MLP(c.hidden_size, c.intermediate_size));
  }
  input_layernorm = register_module("input_layernorm", nn::RMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", nn::RMSNorm(c.hidden_size, c.rms_norm_eps));
}

std::vector<torch::Tensor> DecoderLayerImpl::forward(const torch::Tensor& hidden, const LayerContext& ctx) {
  // By value: a checkpointed body runs again in backward, after this call returns.
  return call_hooked({hidden}, [this, ctx](const std::vector<torch::Tensor>& in) -> std::vector<torch::Tensor> {
    const auto h = in[0] + self_attn(input_layernorm(in[0]), ctx, index_);
    if (!moe) return {h + mlp(post_attention_layernorm(h))};
    MoeOutput routed = moe(post_attention_layernorm(h));
    return {h + routed.out, routed.router_logits};
  });
}

// ---- model ----

QwenModelImpl::QwenModelImpl(const QwenConfig& c) {
  embed_tokens = register_module("embed_tokens", Embedding(c.vocab_size, c.hidden_size, c.pad_token_id));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c, i));
  norm = register_module("norm", nn::RMSNorm(c.hidden_size, c.rms_norm_eps));
}

QwenForCausalLMImpl::QwenForCausalLMImpl(const QwenConfig& c, bool lm_head_wanted)
    : config_(c), has_lm_head_(lm_head_wanted) {
  c.validate();
  model = register_module("model", QwenModel(c));
  if (lm_head_wanted) {
    if (c.tie_word_embeddings) {
      tied_head = register_module("lm_head", TiedHead(model->embed_tokens->weight));
      model->embed_tokens->sparse_grad = true;  // its rows are added into the head's dense gradient
    } else {
      lm_head = register_module("lm_head", nn::Linear(c.hidden_size, c.vocab_size));
    }
  }
}

LayerContext QwenForCausalLMImpl::make_context(const torch::Tensor& ids, const torch::Tensor& mask,
                                               const torch::Tensor& positions, const torch::Tensor& segments,
                                               const torch::Tensor& like, KVCache* cache) const {
  TORCH_CHECK(ids.dim() == 2, "qwen: input_ids must be [batch, seq], got ", ids.sizes());
  const int64_t B = ids.size(0), S = ids.size(1), past = cache == nullptr ? 0 : cache->length;
  LayerContext ctx;
  ctx.cache = cache;
  ctx.attention.causal = true;
  if (mask.defined()) {
    TORCH_CHECK(mask.dim() == 2 && mask.size(0) == B && mask.size(1) == past + S, "qwen: attention_mask must be [", B,
                ", ", past + S, "] (cached + new tokens), got ", mask.sizes());
    ctx.attention.key_padding = mask.to(torch::kBool);
  }
  if (segments.defined()) {
    TORCH_CHECK(cache == nullptr, "qwen: segment_ids (packed sequences) are not supported with a KV cache");
    TORCH_CHECK(segments.dim() == 2 && segments.size(0) == B && segments.size(1) == S, "qwen: segment_ids must be [", B,
                ", ", S, "], got ", segments.sizes());
    ctx.attention.query_segments = segments;
    ctx.attention.key_segments = segments;
  }
  torch::Tensor pos = positions;
  if (!pos.defined()) {
    pos = torch::arange(past, past + S, torch::kLong).unsqueeze(0).expand({B, S});
  } else {
    TORCH_CHECK(pos.dim() == 2 && pos.size(0) == B && pos.size(1) == S, "qwen: position_ids must be [", B, ", ", S,
                "] (one row per sequence; Qwen2.5-VL's [3, B, S] vision positions are not supported), got ",
                pos.sizes());
  }
  // Angles in float64, rounded once to the compute dtype (float32, or float64 for float64).
  const auto dtype = like.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  const auto angles = nn::rope_angles(pos.reshape({-1, 1}), {config_.head_dim}, config_.rope_theta, dtype);
  ctx.rope.cos = angles.cos.view({B, S, -1});
  ctx.rope.sin = angles.sin.view({B, S, -1});
  return ctx;
}

Output QwenForCausalLMImpl::forward(const Inputs& inputs, KVCache* cache) {
  const auto out = call_hooked(
      {inputs.input_ids, inputs.attention_mask, inputs.position_ids, inputs.segment_ids},
      [this, cache](const std::vector<torch::Tensor>& in) -> std::vector<torch::Tensor> {
        const int64_t L = static_cast<int64_t>(model->layers->size());
        if (cache != nullptr) {
          cache->keys.resize(static_cast<size_t>(L));
          cache->values.resize(static_cast<size_t>(L));
        }
        auto h = model->embed_tokens(in[0]);
        const LayerContext ctx = make_context(in[0], in[1], in[2], in[3], h, cache);
        std::vector<torch::Tensor> result(2);
        for (int64_t i = 0; i < L; ++i) {
          auto outs = model->layers[static_cast<size_t>(i)]->as<DecoderLayerImpl>()->forward(h, ctx);
          h = outs[0];
          if (outs.size() > 1) result.push_back(outs[1]);
        }
        if (cache != nullptr) cache->length += in[0].size(1);
        result[0] = model->norm(h);
        if (has_lm_head_) {
          result[1] = nn::linear(result[0], config_.tie_word_embeddings ? tied_head->weight : lm_head->weight);
        }
        return result;
      });
  Output o;
  o.last_hidden_state = out[0];
  o.logits = out[1];
  o.router_logits.assign(out.begin() + 2, out.end());
  return o;
}

std::vector<torch::Tensor> QwenForCausalLMImpl::hidden_states(const Inputs& inputs,
                                                              const std::vector<int64_t>& indices) {
  const int64_t L = static_cast<int64_t>(model->layers->size());
  std::vector<int64_t> wanted;
  for (int64_t i : indices) {
    const int64_t k = i < 0 ? i + L + 1 : i;
    if (k < 0 || k > L) {
      throw std::invalid_argument("qwen hidden_states: index " + std::to_string(i) + " is outside 0 .. " +
                                  std::to_string(L) + " (or -" + std::to_string(L + 1) + " .. -1) for " +
                                  std::to_string(L) + " layers");
    }
    wanted.push_back(k);
  }
  if (wanted.empty()) return {};
  const int64_t last = *std::max_element(wanted.begin(), wanted.end());
  return call_hooked({inputs.input_ids, inputs.attention_mask, inputs.position_ids, inputs.segment_ids},
                     [this, wanted, last, L](const std::vector<torch::Tensor>& in) {
                       std::vector<torch::Tensor> states;  // states[i]: after i layers
                       auto h = model->embed_tokens(in[0]);
                       const LayerContext ctx = make_context(in[0], in[1], in[2], in[3], h, nullptr);
                       states.push_back(h);
                       for (int64_t i = 0; i < std::min(last, L); ++i) {
                         h = model->layers[static_cast<size_t>(i)]->as<DecoderLayerImpl>()->forward(h, ctx)[0];
                         states.push_back(h);
                       }
                       if (last == L) states.back() = model->norm(h);  // transformers' last entry is normed
                       std::vector<torch::Tensor> out;
                       for (int64_t k : wanted) out.push_back(states[static_cast<size_t>(k)]);
                       return out;
                     });
}

void QwenForCausalLMImpl::init_parameter(uint64_t seed, const std::string& name, at::Tensor& param) const {
  using util::ends_with;
  if (nn::is_lora_parameter(name)) {
    nn::lora_init(seed, name, param);
  } else if (ends_with(name, "norm.weight")) {  // input_/post_attention_layernorm, q/k_norm, model.norm
    nn::init_constant(param, 1.0);
  } else if (ends_with(name, ".bias")) {
    nn::init_constant(param, 0.0);
  } else {
    nn::init_normal(param, seed, name, config_.initializer_range);
    if (name == "model.embed_tokens.weight" && config_.pad_token_id >= 0) {
      at::NoGradGuard no_grad;
      param[config_.pad_token_id].zero_();
    }
  }
}

int64_t QwenForCausalLMImpl::num_params() const {
  std::set<const void*> seen;
  int64_t n = 0;
  for (const auto& p : parameters(/*recurse=*/true)) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  }
  return n;
}

}  // namespace zeroshard::models::qwen3
