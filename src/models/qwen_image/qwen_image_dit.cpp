#include "models/qwen_image/qwen_image_dit.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "nn/attention.h"
#include "nn/timestep.h"

namespace zeroshard::models::qwen_image {

namespace {

// Fixed by diffusers, not by the config: RMSNorm/LayerNorm eps, the RoPE base, the sinusoid width.
constexpr double kEps = 1e-6;
constexpr double kRopeTheta = 10000.0;
constexpr int64_t kTimeChannels = 256;
constexpr int64_t kMlpMult = 4;

// diffusers GELU(approximate="tanh") holding its input projection (net.0.proj).
class GeluProjImpl : public torch::nn::Module {
 public:
  GeluProjImpl(int64_t in, int64_t out) { proj = register_module("proj", nn::Linear(in, out, true)); }
  nn::Linear proj{nullptr};
};
TORCH_MODULE(GeluProj);

// [B, T, H*Dh] -> [B, H, T, Dh] with the per-head RMSNorm, then rotated.
torch::Tensor heads(const torch::Tensor& y, int64_t h, int64_t dh, nn::RMSNorm& norm, const nn::RopeAngles* rope) {
  torch::Tensor t = y.view({y.size(0), y.size(1), h, dh});
  if (norm) t = norm(t);
  t = t.transpose(1, 2);
  return rope != nullptr ? nn::apply_rope(t, *rope, nn::RopePairing::Interleaved) : t;
}

// x * (1 + scale) + shift with per-sample [B, D] modulation.
torch::Tensor modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale) {
  return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

int64_t get_int(const nlohmann::json& j, const char* key, int64_t fallback) {
  return j.contains(key) && !j[key].is_null() ? j[key].get<int64_t>() : fallback;
}

}  // namespace

void QwenImageDitConfig::validate(const std::string& where) const {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(where + ": " + what);
  };
  need(patch_size > 0, "patch_size must be > 0, got " + std::to_string(patch_size));
  need(in_channels > 0 && out_channels > 0, "in_channels and out_channels must be > 0");
  need(num_layers >= 0, "num_layers must be >= 0");
  need(num_attention_heads > 0 && attention_head_dim > 0, "num_attention_heads and attention_head_dim must be > 0");
  need(joint_attention_dim > 0, "joint_attention_dim must be > 0");
  need(axes_dims_rope.size() == 3,
       "axes_dims_rope needs 3 entries (frame, height, width), got " + std::to_string(axes_dims_rope.size()));
  int64_t sum = 0;
  for (int64_t d : axes_dims_rope) {
    need(d >= 0 && d % 2 == 0, "axes_dims_rope entries must be even, got " + std::to_string(d));
    sum += d;
  }
  need(sum == attention_head_dim, "axes_dims_rope must sum to attention_head_dim " +
                                      std::to_string(attention_head_dim) + ", they sum to " + std::to_string(sum));
}

QwenImageDitConfig config_from_json(const nlohmann::json& j, const std::string& where) {
  // Defaults: the diffusers constructor's (a released config.json lists every field).
  QwenImageDitConfig c;
  try {
    c.patch_size = get_int(j, "patch_size", 2);
    c.in_channels = get_int(j, "in_channels", 64);
    c.out_channels = get_int(j, "out_channels", c.in_channels);  // `out_channels or in_channels`
    if (c.out_channels == 0) c.out_channels = c.in_channels;
    c.num_layers = get_int(j, "num_layers", 60);
    c.attention_head_dim = get_int(j, "attention_head_dim", 128);
    c.num_attention_heads = get_int(j, "num_attention_heads", 24);
    c.joint_attention_dim = get_int(j, "joint_attention_dim", 3584);
    if (j.contains("axes_dims_rope")) c.axes_dims_rope = j["axes_dims_rope"].get<std::vector<int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
  for (const char* flag : {"guidance_embeds", "zero_cond_t", "use_additional_t_cond", "use_layer3d_rope"}) {
    if (j.contains(flag) && j[flag].is_boolean() && j[flag].get<bool>()) {
      throw std::invalid_argument(where + ": " + flag +
                                  " = true is a Qwen-Image variant this port does not implement (only false)");
    }
  }
  c.validate(where);
  return c;
}

QwenImageDitConfig qwen_image_20b() { return QwenImageDitConfig{}; }

int64_t parameter_count(const QwenImageDitConfig& c) {
  const int64_t D = c.inner_dim(), J = c.joint_attention_dim, O = c.patch_size * c.patch_size * c.out_channels;
  auto linear = [](int64_t in, int64_t out) { return in * out + out; };
  const int64_t block = 2 * linear(D, 6 * D)        // img_mod, txt_mod
                        + 8 * linear(D, D)          // q, k, v, out for both streams
                        + 4 * c.attention_head_dim  // norm_q, norm_k, norm_added_q, norm_added_k
                        + 2 * (linear(D, kMlpMult * D) + linear(kMlpMult * D, D));  // img_mlp, txt_mlp
  return linear(kTimeChannels, D) + linear(D, D)                                    // time_text_embed
         + J + linear(c.in_channels, D) + linear(J, D)                              // txt_norm, img_in, txt_in
         + c.num_layers * block + linear(D, 2 * D) + linear(D, O);                  // blocks, norm_out, proj_out
}

MlpImpl::MlpImpl(int64_t dim, int64_t hidden) {
  net = register_module("net", torch::nn::ModuleList());
  auto gelu = GeluProj(dim, hidden);
  proj = gelu->proj;
  out = nn::Linear(hidden, dim, true);
  net->push_back(gelu);
  net->push_back(torch::nn::Identity());  // net.1: dropout (p = 0)
  net->push_back(out);
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return out(torch::gelu(proj(x), "tanh")); }

JointAttentionImpl::JointAttentionImpl(int64_t dim, int64_t heads, int64_t head_dim) {
  const int64_t inner = heads * head_dim;
  to_q = register_module("to_q", nn::Linear(dim, inner, true));
  to_k = register_module("to_k", nn::Linear(dim, inner, true));
  to_v = register_module("to_v", nn::Linear(dim, inner, true));
  add_q_proj = register_module("add_q_proj", nn::Linear(dim, inner, true));
  add_k_proj = register_module("add_k_proj", nn::Linear(dim, inner, true));
  add_v_proj = register_module("add_v_proj", nn::Linear(dim, inner, true));
  to_out = register_module("to_out", torch::nn::ModuleList());
  to_out->push_back(nn::Linear(inner, dim, true));
  to_add_out = register_module("to_add_out", nn::Linear(inner, dim, true));
  norm_q = register_module("norm_q", nn::RMSNorm(head_dim, kEps));
  norm_k = register_module("norm_k", nn::RMSNorm(head_dim, kEps));
  norm_added_q = register_module("norm_added_q", nn::RMSNorm(head_dim, kEps));
  norm_added_k = register_module("norm_added_k", nn::RMSNorm(head_dim, kEps));
}

BlockImpl::BlockImpl(int64_t dim, int64_t heads, int64_t head_dim) : heads_(heads), head_dim_(head_dim) {
  for (auto* mod : {&img_mod, &txt_mod}) {
    *mod = torch::nn::ModuleList();
    (*mod)->push_back(torch::nn::SiLU());
    (*mod)->push_back(nn::Linear(dim, 6 * dim, true));
  }
  register_module("img_mod", img_mod);
  img_norm1 = register_module("img_norm1", nn::LayerNorm(dim, kEps, /*affine=*/false));
  attn = register_module("attn", JointAttention(dim, heads, head_dim));
  img_norm2 = register_module("img_norm2", nn::LayerNorm(dim, kEps, false));
  img_mlp = register_module("img_mlp", Mlp(dim, kMlpMult * dim));
  register_module("txt_mod", txt_mod);
  txt_norm1 = register_module("txt_norm1", nn::LayerNorm(dim, kEps, false));
  txt_norm2 = register_module("txt_norm2", nn::LayerNorm(dim, kEps, false));
  txt_mlp = register_module("txt_mlp", Mlp(dim, kMlpMult * dim));
}

std::pair<torch::Tensor, torch::Tensor> BlockImpl::forward(const torch::Tensor& img, const torch::Tensor& txt,
                                                           const torch::Tensor& temb, const BlockContext& ctx) {
  // ctx by value: a checkpointed block runs its body again in backward, after this returns.
  auto out = call_hooked({img, txt, temb}, [this, ctx](const std::vector<torch::Tensor>& in) {
    const torch::Tensor &x = in[0], &t = in[1], &e = in[2];
    const int64_t B = x.size(0), N = x.size(1), L = t.size(1);
    // img_mod / txt_mod: Linear(SiLU(temb)) split as [shift, scale, gate] for the attention, then
    // [shift, scale, gate] for the MLP.
    const auto im = img_mod[1]->as<nn::LinearImpl>()->forward(torch::silu(e)).chunk(6, -1);
    const auto tm = txt_mod[1]->as<nn::LinearImpl>()->forward(torch::silu(e)).chunk(6, -1);
    const torch::Tensor xm = modulate(img_norm1(x), im[0], im[1]);
    const torch::Tensor tx = modulate(txt_norm1(t), tm[0], tm[1]);

    // Joint attention over [text, image] (text first); QK RMSNorm per head, then RoPE.
    JointAttentionImpl& a = *attn;
    const torch::Tensor q = torch::cat({heads(a.add_q_proj(tx), heads_, head_dim_, a.norm_added_q, &ctx.text_rope),
                                        heads(a.to_q(xm), heads_, head_dim_, a.norm_q, &ctx.image_rope)},
                                       2);
    const torch::Tensor k = torch::cat({heads(a.add_k_proj(tx), heads_, head_dim_, a.norm_added_k, &ctx.text_rope),
                                        heads(a.to_k(xm), heads_, head_dim_, a.norm_k, &ctx.image_rope)},
                                       2);
    nn::RMSNorm none{nullptr};
    const torch::Tensor v = torch::cat({heads(a.add_v_proj(tx), heads_, head_dim_, none, nullptr),
                                        heads(a.to_v(xm), heads_, head_dim_, none, nullptr)},
                                       2);
    nn::AttentionOptions opt;
    if (ctx.text_keys.defined()) {
      // Only padded text keys are removed: padded text queries still run, image keys never masked.
      opt.key_padding = torch::cat({ctx.text_keys, torch::ones({B, N}, ctx.text_keys.options())}, 1);
    }
    const torch::Tensor joint = nn::attention(q, k, v, opt).transpose(1, 2).reshape({B, L + N, heads_ * head_dim_});
    const torch::Tensor img_attn = a.to_out[0]->as<nn::LinearImpl>()->forward(joint.narrow(1, L, N));
    const torch::Tensor txt_attn = a.to_add_out(joint.narrow(1, 0, L));

    torch::Tensor x2 = x + im[2].unsqueeze(1) * img_attn;
    torch::Tensor t2 = t + tm[2].unsqueeze(1) * txt_attn;
    x2 = x2 + im[5].unsqueeze(1) * img_mlp(modulate(img_norm2(x2), im[3], im[4]));
    t2 = t2 + tm[5].unsqueeze(1) * txt_mlp(modulate(txt_norm2(t2), tm[3], tm[4]));
    return std::vector<torch::Tensor>{x2, t2};
  });
  return {out[0], out[1]};
}

TimestepEmbeddingImpl::TimestepEmbeddingImpl(int64_t in, int64_t dim) {
  linear_1 = register_module("linear_1", nn::Linear(in, dim, true));
  linear_2 = register_module("linear_2", nn::Linear(dim, dim, true));
}

torch::Tensor TimestepEmbeddingImpl::forward(const torch::Tensor& x) { return linear_2(torch::silu(linear_1(x))); }

TimeTextEmbedImpl::TimeTextEmbedImpl(int64_t dim) {
  timestep_embedder = register_module("timestep_embedder", TimestepEmbedding(kTimeChannels, dim));
}

torch::Tensor TimeTextEmbedImpl::forward(const torch::Tensor& timestep, at::ScalarType dtype) {
  // diffusers Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0, scale=1000): [cos, sin]
  // of 1000 * sigma * 10000^(-i/128). (Upstream evaluates it in float32; here in float64, the
  // float64 reference's arithmetic.)
  nn::SinusoidOptions o;
  o.max_period = 10000.0;
  o.cos_first = true;
  o.freq_shift = 0.0;
  o.scale = 1000.0;
  return timestep_embedder(nn::timestep_sinusoid(timestep.to(dtype), kTimeChannels, o, dtype));
}

AdaNormOutImpl::AdaNormOutImpl(int64_t dim) {
  linear = register_module("linear", nn::Linear(dim, 2 * dim, true));
  norm = register_module("norm", nn::LayerNorm(dim, kEps, /*affine=*/false));
}

torch::Tensor AdaNormOutImpl::forward(const torch::Tensor& x, const torch::Tensor& temb) {
  // AdaLayerNormContinuous: the projection splits as (scale, shift) — scale first, unlike the blocks.
  const auto m = linear(torch::silu(temb).to(x.scalar_type())).chunk(2, 1);
  return norm(x) * (1 + m[0].unsqueeze(1)) + m[1].unsqueeze(1);
}

QwenImageDitImpl::QwenImageDitImpl(const QwenImageDitConfig& c) : config_(c) {
  c.validate();
  const int64_t D = c.inner_dim();
  time_text_embed = register_module("time_text_embed", TimeTextEmbed(D));
  txt_norm = register_module("txt_norm", nn::RMSNorm(c.joint_attention_dim, kEps));
  img_in = register_module("img_in", nn::Linear(c.in_channels, D, true));
  txt_in = register_module("txt_in", nn::Linear(c.joint_attention_dim, D, true));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    transformer_blocks->push_back(Block(D, c.num_attention_heads, c.attention_head_dim));
  }
  norm_out = register_module("norm_out", AdaNormOut(D));
  proj_out = register_module("proj_out", nn::Linear(D, c.patch_size * c.patch_size * c.out_channels, true));
}

std::pair<at::Tensor, at::Tensor> rope_positions(const std::vector<ImageShape>& images, int64_t text_len) {
  if (images.empty()) throw std::invalid_argument("qwen_image rope_positions: no image shapes");
  std::vector<at::Tensor> parts;
  int64_t text_start = 0;
  for (size_t k = 0; k < images.size(); ++k) {
    const ImageShape& s = images[k];
    // scale_rope: rows -(h - h/2) .. h/2 - 1 and columns likewise (centred); image k's frames
    // start at position k.
    parts.push_back(nn::grid_positions(s.frames, s.height, s.width,
                                       {static_cast<double>(k), -static_cast<double>(s.height - s.height / 2),
                                        -static_cast<double>(s.width - s.width / 2)}));
    text_start = std::max({text_start, s.height / 2, s.width / 2});
  }
  // Text token j sits at text_start + j on all three axes, over the padded text length.
  const at::Tensor t =
      (at::arange(text_len, at::kDouble) + static_cast<double>(text_start)).unsqueeze(1).repeat({1, 3});
  return {at::cat(parts, 0), t};
}

torch::Tensor QwenImageDitImpl::forward(const torch::Tensor& hidden_states, const torch::Tensor& encoder_hidden_states,
                                        const torch::Tensor& text_mask, const torch::Tensor& timestep,
                                        const std::vector<ImageShape>& img_shapes) {
  const QwenImageDitConfig& c = config_;
  TORCH_CHECK(hidden_states.dim() == 3 && hidden_states.size(2) == c.in_channels,
              "qwen_image: hidden_states must be [B, N, ", c.in_channels, "], got ", hidden_states.sizes());
  const int64_t B = hidden_states.size(0), N = hidden_states.size(1);
  TORCH_CHECK(encoder_hidden_states.dim() == 3 && encoder_hidden_states.size(0) == B &&
                  encoder_hidden_states.size(2) == c.joint_attention_dim,
              "qwen_image: encoder_hidden_states must be [", B, ", L, ", c.joint_attention_dim, "], got ",
              encoder_hidden_states.sizes());
  TORCH_CHECK(timestep.dim() == 1 && timestep.size(0) == B, "qwen_image: timestep must be [", B, "], got ",
              timestep.sizes());
  const int64_t L = encoder_hidden_states.size(1);
  int64_t tokens = 0;
  for (const auto& s : img_shapes) tokens += s.frames * s.height * s.width;
  TORCH_CHECK(tokens == N, "qwen_image: img_shapes hold ", tokens, " tokens, hidden_states has ", N);

  torch::Tensor x = img_in(hidden_states);
  const torch::Tensor temb = time_text_embed(timestep, x.scalar_type());
  torch::Tensor txt = txt_in(txt_norm(encoder_hidden_states));

  BlockContext ctx;
  if (text_mask.defined()) {
    TORCH_CHECK(text_mask.sizes() == at::IntArrayRef({B, L}), "qwen_image: encoder_hidden_states_mask must be [", B,
                ", ", L, "], got ", text_mask.sizes());
    ctx.text_keys = text_mask.ne(0);
  }
  const at::ScalarType angle_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto [img_pos, txt_pos] = rope_positions(img_shapes, L);
  ctx.image_rope = nn::rope_angles(img_pos, c.axes_dims_rope, kRopeTheta, angle_dtype);
  ctx.text_rope = nn::rope_angles(txt_pos, c.axes_dims_rope, kRopeTheta, angle_dtype);

  for (const auto& m : *transformer_blocks) std::tie(x, txt) = m->as<BlockImpl>()->forward(x, txt, temb, ctx);
  // The image stream alone continues; the last block's text output is unused.
  return proj_out(norm_out(x, temb));
}

torch::Tensor pack_latents(const torch::Tensor& latent) {
  TORCH_CHECK(latent.dim() == 4 && latent.size(2) % 2 == 0 && latent.size(3) % 2 == 0,
              "qwen_image pack_latents: latent must be [B, C, H, W] with even H, W, got ", latent.sizes());
  const int64_t B = latent.size(0), C = latent.size(1), H = latent.size(2), W = latent.size(3);
  return latent.view({B, C, H / 2, 2, W / 2, 2}).permute({0, 2, 4, 1, 3, 5}).reshape({B, (H / 2) * (W / 2), C * 4});
}

torch::Tensor unpack_latents(const torch::Tensor& tokens, int64_t height, int64_t width) {
  TORCH_CHECK(tokens.dim() == 3 && height % 2 == 0 && width % 2 == 0 && tokens.size(1) == (height / 2) * (width / 2) &&
                  tokens.size(2) % 4 == 0,
              "qwen_image unpack_latents: tokens ", tokens.sizes(), " do not hold a ", height, " x ", width, " latent");
  const int64_t B = tokens.size(0), C = tokens.size(2) / 4;
  return tokens.view({B, height / 2, width / 2, C, 2, 2}).permute({0, 3, 1, 4, 2, 5}).reshape({B, C, height, width});
}

torch::Tensor true_cfg(const torch::Tensor& cond, const torch::Tensor& uncond, double scale) {
  const torch::Tensor comb = uncond + scale * (cond - uncond);
  return comb * (cond.norm(2, -1, true) / comb.norm(2, -1, true));
}

}  // namespace zeroshard::models::qwen_image
