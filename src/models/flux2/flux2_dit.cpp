#include "models/flux2/flux2_dit.h"

#include "nn/activations.h"
#include "nn/timestep.h"

#include <numeric>
#include <stdexcept>

namespace zeroshard::models::flux2 {

using flux::modulate;
using flux::require;
using flux::rope_attention;
using flux::split_heads;

namespace {

// Linear(SiLU(temb)) -> chunks (shift, scale, gate) x sets, each [B, 1, D].
std::vector<at::Tensor> modulation(nn::Linear& lin, const at::Tensor& temb, int64_t sets) {
  return lin(torch::silu(temb)).unsqueeze(1).chunk(3 * sets, -1);
}

nn::Linear linear(int64_t in, int64_t out) { return nn::Linear(in, out, /*bias=*/false); }

}  // namespace

Flux2Config Flux2Config::from_json(const nlohmann::json& j, const std::string& source) {
  Flux2Config c;
  c.patch_size = require(j, "patch_size", source).get<int64_t>();
  c.in_channels = require(j, "in_channels", source).get<int64_t>();
  c.out_channels = j.contains("out_channels") && !j["out_channels"].is_null() ? j["out_channels"].get<int64_t>()
                                                                              : c.in_channels;
  c.num_layers = require(j, "num_layers", source).get<int64_t>();
  c.num_single_layers = require(j, "num_single_layers", source).get<int64_t>();
  c.attention_head_dim = require(j, "attention_head_dim", source).get<int64_t>();
  c.num_attention_heads = require(j, "num_attention_heads", source).get<int64_t>();
  c.joint_attention_dim = require(j, "joint_attention_dim", source).get<int64_t>();
  c.timestep_guidance_channels = require(j, "timestep_guidance_channels", source).get<int64_t>();
  c.mlp_ratio = require(j, "mlp_ratio", source).get<double>();
  c.axes_dims_rope = require(j, "axes_dims_rope", source).get<std::vector<int64_t>>();
  c.rope_theta = require(j, "rope_theta", source).get<double>();
  c.eps = require(j, "eps", source).get<double>();
  c.guidance_embeds = require(j, "guidance_embeds", source).get<bool>();
  c.validate(source);
  return c;
}

void Flux2Config::validate(const std::string& source) const {
  const int64_t axes = std::accumulate(axes_dims_rope.begin(), axes_dims_rope.end(), int64_t{0});
  if (axes != attention_head_dim) {
    throw std::invalid_argument(source + ": axes_dims_rope sums to " + std::to_string(axes) +
                                ", attention_head_dim is " + std::to_string(attention_head_dim));
  }
  if (num_attention_heads <= 0) throw std::invalid_argument(source + ": num_attention_heads must be > 0");
}

Flux2TimestepEmbedderImpl::Flux2TimestepEmbedderImpl(int64_t in, int64_t dim) {
  linear_1 = register_module("linear_1", linear(in, dim));
  linear_2 = register_module("linear_2", linear(dim, dim));
}

torch::Tensor Flux2TimestepEmbedderImpl::forward(const torch::Tensor& x) { return linear_2(torch::silu(linear_1(x))); }

Flux2FeedForwardImpl::Flux2FeedForwardImpl(int64_t dim, int64_t hidden) {
  linear_in = register_module("linear_in", linear(dim, 2 * hidden));
  linear_out = register_module("linear_out", linear(hidden, dim));
}

torch::Tensor Flux2FeedForwardImpl::forward(const torch::Tensor& x) {
  const auto ab = linear_in(x).chunk(2, -1);  // SwiGLU: silu(first half) * second half
  return linear_out(nn::swiglu(ab[0], ab[1]));
}

Flux2AttentionImpl::Flux2AttentionImpl(int64_t dim, int64_t heads, int64_t head_dim, double eps) {
  const int64_t inner = heads * head_dim;
  to_q = register_module("to_q", linear(dim, inner));
  to_k = register_module("to_k", linear(dim, inner));
  to_v = register_module("to_v", linear(dim, inner));
  norm_q = register_module("norm_q", flux::HeadRMSNorm(head_dim, eps, "weight"));
  norm_k = register_module("norm_k", flux::HeadRMSNorm(head_dim, eps, "weight"));
  auto out = register_module("to_out", torch::nn::ModuleList());
  to_out = linear(inner, dim);
  out->push_back(to_out);  // "to_out.0" (index 1 is a parameterless dropout upstream)
  norm_added_q = register_module("norm_added_q", flux::HeadRMSNorm(head_dim, eps, "weight"));
  norm_added_k = register_module("norm_added_k", flux::HeadRMSNorm(head_dim, eps, "weight"));
  add_q_proj = register_module("add_q_proj", linear(dim, inner));
  add_k_proj = register_module("add_k_proj", linear(dim, inner));
  add_v_proj = register_module("add_v_proj", linear(dim, inner));
  to_add_out = register_module("to_add_out", linear(inner, dim));
}

Flux2DoubleBlockImpl::Flux2DoubleBlockImpl(const Flux2Config& c) : heads_(c.num_attention_heads), eps_(c.eps) {
  attn = register_module("attn", Flux2Attention(c.inner_dim(), c.num_attention_heads, c.attention_head_dim, c.eps));
  ff = register_module("ff", Flux2FeedForward(c.inner_dim(), c.mlp_hidden()));
  ff_context = register_module("ff_context", Flux2FeedForward(c.inner_dim(), c.mlp_hidden()));
}

std::vector<torch::Tensor> Flux2DoubleBlockImpl::forward(const torch::Tensor& img, const torch::Tensor& txt,
                                                         const std::vector<torch::Tensor>& mod_img,
                                                         const std::vector<torch::Tensor>& mod_txt,
                                                         const nn::RopeAngles& pe) {
  std::vector<at::Tensor> inputs = {img, txt};
  inputs.insert(inputs.end(), mod_img.begin(), mod_img.end());
  inputs.insert(inputs.end(), mod_txt.begin(), mod_txt.end());
  inputs.push_back(pe.cos);
  inputs.push_back(pe.sin);
  return call_hooked(inputs, [this](const std::vector<at::Tensor>& in) {
    const at::Tensor &x_img = in[0], &x_txt = in[1];
    const at::Tensor* mi = &in[2];  // (shift, scale, gate) x (attention, MLP)
    const at::Tensor* mt = &in[8];
    const nn::RopeAngles angles{in[14], in[15]};
    const at::Tensor hi = modulate(x_img, mi[0], mi[1], eps_), ht = modulate(x_txt, mt[0], mt[1], eps_);
    const at::Tensor q = at::cat({attn->norm_added_q(split_heads(attn->add_q_proj(ht), heads_)),
                                  attn->norm_q(split_heads(attn->to_q(hi), heads_))},
                                 2);
    const at::Tensor k = at::cat({attn->norm_added_k(split_heads(attn->add_k_proj(ht), heads_)),
                                  attn->norm_k(split_heads(attn->to_k(hi), heads_))},
                                 2);
    const at::Tensor v = at::cat({split_heads(attn->add_v_proj(ht), heads_), split_heads(attn->to_v(hi), heads_)}, 2);
    const at::Tensor o = rope_attention(q, k, v, angles);  // [text, image]
    const int64_t lt = x_txt.size(1);
    at::Tensor oi = x_img + mi[2] * attn->to_out(o.narrow(1, lt, o.size(1) - lt));
    oi = oi + mi[5] * ff(modulate(oi, mi[3], mi[4], eps_));
    at::Tensor ot = x_txt + mt[2] * attn->to_add_out(o.narrow(1, 0, lt));
    ot = ot + mt[5] * ff_context(modulate(ot, mt[3], mt[4], eps_));
    return std::vector<at::Tensor>{oi, ot};
  });
}

Flux2ParallelAttentionImpl::Flux2ParallelAttentionImpl(int64_t dim, int64_t heads, int64_t head_dim,
                                                       int64_t mlp_hidden, double eps) {
  const int64_t inner = heads * head_dim;
  to_qkv_mlp_proj = register_module("to_qkv_mlp_proj", linear(dim, 3 * inner + 2 * mlp_hidden));
  norm_q = register_module("norm_q", flux::HeadRMSNorm(head_dim, eps, "weight"));
  norm_k = register_module("norm_k", flux::HeadRMSNorm(head_dim, eps, "weight"));
  to_out = register_module("to_out", linear(inner + mlp_hidden, dim));
}

Flux2SingleBlockImpl::Flux2SingleBlockImpl(const Flux2Config& c)
    : inner_(c.inner_dim()), mlp_hidden_(c.mlp_hidden()), heads_(c.num_attention_heads), eps_(c.eps) {
  attn = register_module("attn", Flux2ParallelAttention(inner_, heads_, c.attention_head_dim, mlp_hidden_, c.eps));
}

torch::Tensor Flux2SingleBlockImpl::forward(const torch::Tensor& x, const std::vector<torch::Tensor>& mod,
                                            const nn::RopeAngles& pe) {
  return call_hooked({x, mod.at(0), mod.at(1), mod.at(2), pe.cos, pe.sin}, [this](const std::vector<at::Tensor>& in) {
    const at::Tensor& h = in[0];
    const at::Tensor proj = attn->to_qkv_mlp_proj(modulate(h, in[1], in[2], eps_));
    const auto qkv = proj.narrow(-1, 0, 3 * inner_).chunk(3, -1);
    const at::Tensor o = rope_attention(attn->norm_q(split_heads(qkv[0], heads_)),
                                        attn->norm_k(split_heads(qkv[1], heads_)), split_heads(qkv[2], heads_),
                                        nn::RopeAngles{in[4], in[5]});
    const auto ab = proj.narrow(-1, 3 * inner_, 2 * mlp_hidden_).chunk(2, -1);
    return std::vector<at::Tensor>{h + in[3] * attn->to_out(at::cat({o, nn::swiglu(ab[0], ab[1])}, -1))};
  })[0];
}

Flux2DiTImpl::Flux2DiTImpl(const Flux2Config& c) : config_(c) {
  c.validate("Flux2DiT");
  const int64_t d = c.inner_dim();
  time_guidance_embed = register_module("time_guidance_embed", std::make_shared<torch::nn::Module>());
  timestep_embedder = time_guidance_embed->register_module(
      "timestep_embedder", Flux2TimestepEmbedder(c.timestep_guidance_channels, d));
  if (c.guidance_embeds) {
    guidance_embedder = time_guidance_embed->register_module(
        "guidance_embedder", Flux2TimestepEmbedder(c.timestep_guidance_channels, d));
  }
  auto holder = [this](const char* name) { return register_module(name, std::make_shared<torch::nn::Module>()); };
  mod_img = holder("double_stream_modulation_img")->register_module("linear", linear(d, 6 * d));
  mod_txt = holder("double_stream_modulation_txt")->register_module("linear", linear(d, 6 * d));
  mod_single = holder("single_stream_modulation")->register_module("linear", linear(d, 3 * d));
  x_embedder = register_module("x_embedder", linear(c.in_channels, d));
  context_embedder = register_module("context_embedder", linear(c.joint_attention_dim, d));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) transformer_blocks->push_back(Flux2DoubleBlock(c));
  single_transformer_blocks = register_module("single_transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_single_layers; ++i) single_transformer_blocks->push_back(Flux2SingleBlock(c));
  norm_out = holder("norm_out")->register_module("linear", linear(d, 2 * d));
  proj_out = register_module("proj_out", linear(d, c.out_features()));
}

torch::Tensor Flux2DiTImpl::forward(const torch::Tensor& hidden_states, const torch::Tensor& encoder_hidden_states,
                                    const torch::Tensor& timestep, const torch::Tensor& img_ids,
                                    const torch::Tensor& txt_ids, const torch::Tensor& guidance) {
  TORCH_CHECK(hidden_states.dim() == 3 && encoder_hidden_states.dim() == 3,
              "Flux2DiT: hidden_states and encoder_hidden_states must be [B, L, C], got ", hidden_states.sizes(), ", ",
              encoder_hidden_states.sizes());
  const int64_t axes = static_cast<int64_t>(config_.axes_dims_rope.size());
  const auto dt = hidden_states.scalar_type();
  // temb = timestep_embedder(emb(1000 t)) [+ guidance_embedder(emb(1000 g))]; emb: diffusers'
  // Timesteps(flip_sin_to_cos=True, downscale_freq_shift 0): [cos, sin] of 1000 t * 10000^(-i/half).
  // The frequency table is float64 here: the FLUX.2 reference cases are computed with upstream's
  // float32 table lifted to float64 (tests/fixtures/generate/flux2_dit.py --check; unlike the
  // FLUX.1 cases, see flux::timestep_embedding_f32_freqs); in float32 the two agree to 6e-8.
  const int64_t tc = config_.timestep_guidance_channels;
  nn::SinusoidOptions so;
  so.cos_first = true;
  so.freq_shift = 0.0;
  so.scale = 1000.0;
  at::Tensor temb = timestep_embedder(nn::timestep_sinusoid(timestep, tc, so, dt));
  if (guidance.defined() && guidance_embedder) temb = temb + guidance_embedder(nn::timestep_sinusoid(guidance, tc, so, dt));
  // One modulation per stream, computed once and shared by every block.
  const auto m_img = modulation(mod_img, temb, 2), m_txt = modulation(mod_txt, temb, 2);
  const auto m_single = modulation(mod_single, temb, 1);

  at::Tensor x = x_embedder(hidden_states);
  at::Tensor ctx = context_embedder(encoder_hidden_states);

  // RoPE from the first sample's ids (upstream: ids[0] serves the batch), text then image; axis k
  // rotates axes_dims_rope[k] features, interleaved pairs, theta^(-2j/axes_dims_rope[k]).
  auto first = [axes](const at::Tensor& ids, const char* what) {
    TORCH_CHECK(ids.size(-1) == axes, "Flux2DiT: ", what, " must have ", axes, " columns (one per RoPE axis), got ",
                ids.sizes());
    return ids.dim() == 3 ? ids.select(0, 0) : ids;
  };
  const at::Tensor ids = at::cat({first(txt_ids, "txt_ids"), first(img_ids, "img_ids")}, 0);
  const auto table_dt = dt == at::kDouble ? at::kDouble : at::kFloat;
  const nn::RopeAngles pe = nn::rope_angles(ids, config_.axes_dims_rope, config_.rope_theta, table_dt);

  for (const auto& m : *transformer_blocks) {
    auto out = m->as<Flux2DoubleBlockImpl>()->forward(x, ctx, m_img, m_txt, pe);
    x = out[0];
    ctx = out[1];
  }
  const int64_t lt = ctx.size(1);
  at::Tensor h = at::cat({ctx, x}, 1);
  for (const auto& m : *single_transformer_blocks) h = m->as<Flux2SingleBlockImpl>()->forward(h, m_single, pe);
  h = h.narrow(1, lt, h.size(1) - lt);
  // norm_out: Linear(SiLU(temb)) split as (SCALE, shift) -- diffusers' AdaLayerNormContinuous order.
  const auto ss = norm_out(torch::silu(temb)).unsqueeze(1).chunk(2, -1);
  return proj_out(modulate(h, ss[1], ss[0], config_.eps));
}

int64_t flux2_param_count(const Flux2Config& c) {
  const int64_t d = c.inner_dim(), hd = c.attention_head_dim, m = c.mlp_hidden(), tc = c.timestep_guidance_channels;
  const int64_t embed = tc * d + d * d;
  int64_t n = embed * (c.guidance_embeds ? 2 : 1);
  n += d * 6 * d * 2 + d * 3 * d;                        // the three shared modulations
  n += c.in_channels * d + c.joint_attention_dim * d;  // x_embedder, context_embedder
  const int64_t dbl = 8 * d * d + 4 * hd + 2 * (d * 2 * m + m * d);
  const int64_t sgl = d * (3 * d + 2 * m) + 2 * hd + (d + m) * d;
  n += c.num_layers * dbl + c.num_single_layers * sgl;
  return n + d * 2 * d + d * c.out_features();
}

}  // namespace zeroshard::models::flux2
