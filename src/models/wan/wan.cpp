#include "models/wan/wan.h"

#include "nn/init.h"
#include "util/text.h"

#include <chrono>
#include <cmath>
#include <stdexcept>

namespace zeroshard::models {

void WanConfig::validate(int64_t latent_size) const {
  auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
  if (n_heads < 1 || dim % n_heads != 0 || head_dim() % 6 != 0) {
    fail("wan.dim (" + std::to_string(dim) + ") / wan.n_heads (" + std::to_string(n_heads) +
         ") must give a head size that is a multiple of 6 (3-D rotary positions: three even parts)");
  }
  if (latent_size % patch_size != 0) {
    fail("wan.patch_size (" + std::to_string(patch_size) + ") must divide the latent size " + std::to_string(latent_size) +
         " (data.image_size / the VAE's spatial factor)");
  }
  if (text.dim % text.n_heads != 0 || (text.dim / text.n_heads) % 2 != 0) {
    fail("wan.text_dim (" + std::to_string(text.dim) + ") / wan.text_heads (" + std::to_string(text.n_heads) +
         ") must give an even head size");
  }
}

namespace {

torch::Tensor heads(const torch::Tensor& x, int64_t n_heads) {  // [B, N, D] -> [B, H, N, hd]
  return x.reshape({x.size(0), x.size(1), n_heads, x.size(2) / n_heads}).transpose(1, 2);
}

torch::Tensor merge_heads(const torch::Tensor& a) {  // [B, H, N, hd] -> [B, N, D]
  return a.transpose(1, 2).reshape({a.size(0), a.size(2), a.size(1) * a.size(3)});
}

}  // namespace

WanAttentionImpl::WanAttentionImpl(int64_t dim) {
  q = register_module("q", nn::Linear(dim, dim, true));
  k = register_module("k", nn::Linear(dim, dim, true));
  v = register_module("v", nn::Linear(dim, dim, true));
  o = register_module("o", nn::Linear(dim, dim, true));
  norm_q = register_module("norm_q", nn::RMSNorm(dim, 1e-6));
  norm_k = register_module("norm_k", nn::RMSNorm(dim, 1e-6));
}

AffineLayerNormImpl::AffineLayerNormImpl(int64_t dim) {
  weight = register_parameter("weight", nn::new_parameter({dim}));
  bias = register_parameter("bias", nn::new_parameter({dim}));
  if (!nn::DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    weight.fill_(1.0);
  }
}

torch::Tensor AffineLayerNormImpl::forward(const torch::Tensor& x) {
  return torch::layer_norm(x.to(torch::kFloat), {x.size(-1)}, weight.to(torch::kFloat), bias.to(torch::kFloat), 1e-6)
      .to(x.scalar_type());
}

WanBlockImpl::WanBlockImpl(const WanConfig& c) : config_(c) {
  modulation = register_parameter("modulation", nn::new_parameter({1, 6, c.dim}));
  self_attn = register_module("self_attn", WanAttention(c.dim));
  norm3 = register_module("norm3", AffineLayerNorm(c.dim));
  cross_attn = register_module("cross_attn", WanAttention(c.dim));
  ffn = register_module("ffn", Mlp(c.dim, c.ffn_hidden, c.dim));
}

torch::Tensor WanBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& context, const torch::Tensor& e0,
                                    const VideoPositions& pos) {
  // pos by value: a checkpointed block runs its body again in backward, after this returns.
  return call_hooked({x, context, e0}, [this, pos](const std::vector<torch::Tensor>& in) {
    const torch::Tensor &h = in[0], &ctx = in[1];
    const auto m = (modulation.to(in[2].scalar_type()) + in[2]).chunk(6, 1);  // [B, 1, D] each
    const int64_t H = config_.n_heads;
    const double theta = config_.rope_theta;
    // Self-attention over the video tokens, 3-D rotary positions.
    const torch::Tensor u = nn::layer_norm_no_affine(h) * (1 + m[1]) + m[0];
    const torch::Tensor q = nn::apply_rope_axes(heads(self_attn->norm_q(self_attn->q(u)), H), {pos.t, pos.r, pos.c}, theta);
    const torch::Tensor k = nn::apply_rope_axes(heads(self_attn->norm_k(self_attn->k(u)), H), {pos.t, pos.r, pos.c}, theta);
    torch::Tensor y = h + self_attn->o(merge_heads(nn::full_attention(q, k, heads(self_attn->v(u), H)))) * m[2];
    // Cross-attention to the text (no modulation, no positions).
    const torch::Tensor un = norm3(y);
    const torch::Tensor cq = heads(cross_attn->norm_q(cross_attn->q(un)), H);
    const torch::Tensor ck = heads(cross_attn->norm_k(cross_attn->k(ctx)), H);
    y = y + cross_attn->o(merge_heads(nn::full_attention(cq, ck, heads(cross_attn->v(ctx), H))));
    // Feed-forward.
    y = y + ffn(nn::layer_norm_no_affine(y) * (1 + m[4]) + m[3]) * m[5];
    return std::vector<torch::Tensor>{y};
  })[0];
}

WanHeadImpl::WanHeadImpl(int64_t dim, int64_t out) {
  modulation = register_parameter("modulation", nn::new_parameter({1, 2, dim}));
  head = register_module("head", nn::Linear(dim, out, true));
}

torch::Tensor WanHeadImpl::forward(const torch::Tensor& x, const torch::Tensor& e) {
  const auto m = (modulation.to(e.scalar_type()) + e.unsqueeze(1)).chunk(2, 1);  // shift, scale
  return head(nn::layer_norm_no_affine(x) * (1 + m[1]) + m[0]);
}

WanDiTImpl::WanDiTImpl(const WanConfig& c, int64_t latent_channels) : config_(c) {
  const int64_t p2c = c.patch_size * c.patch_size * latent_channels;
  patch_embedding = register_module("patch_embedding", nn::Linear(p2c, c.dim, true));
  text_embedding = register_module("text_embedding", Mlp(c.text.dim, c.dim, c.dim));
  time_embedding = register_module("time_embedding", Mlp(256, c.dim, c.dim, /*silu=*/true));
  time_projection = register_module("time_projection", nn::Linear(c.dim, 6 * c.dim, true));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(WanBlock(c));
  head = register_module("head", WanHead(c.dim, p2c));
}

torch::Tensor WanDiTImpl::forward(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& txt) {
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), p = config_.patch_size, gh = x.size(3) / p,
                gw = x.size(4) / p;
  const at::ScalarType dt = patch_embedding->weight.scalar_type();  // bf16 under mixed precision
  const torch::Tensor patches =
      x.reshape({B, C, T, gh, p, gw, p}).permute({0, 2, 3, 5, 1, 4, 6}).reshape({B, T * gh * gw, C * p * p}).to(dt);
  torch::Tensor h = patch_embedding(patches);
  const torch::Tensor context = text_embedding(txt.to(dt));
  const torch::Tensor e = time_embedding(nn::timestep_embedding(sigma).to(dt));
  const torch::Tensor e0 = time_projection(torch::silu(e)).reshape({B, 6, config_.dim});
  VideoPositions pos;  // (frame, row, column), row-major
  pos.t = torch::arange(T, torch::kFloat).repeat_interleave(gh * gw);
  pos.r = torch::arange(gh, torch::kFloat).repeat_interleave(gw).repeat({T});
  pos.c = torch::arange(gw, torch::kFloat).repeat({T * gh});
  for (const auto& b : *blocks) h = b->as<WanBlockImpl>()->forward(h, context, e0, pos);
  const torch::Tensor out = head(h, e).to(torch::kFloat);
  return out.reshape({B, T, gh, gw, C, p, p}).permute({0, 4, 1, 2, 5, 3, 6}).reshape({B, C, T, gh * p, gw * p});
}

WanPipelineImpl::WanPipelineImpl(const WanConfig& c, const VaeConfig& vae_config) : config_(c) {
  text_encoder = register_module("text_encoder", TextEncoder(c.text));
  vae = register_module("vae", VideoVae(vae_config));
  dit = register_module("dit", WanDiT(c, vae_config.z_channels));
}

torch::Tensor WanPipelineImpl::forward(const torch::Tensor& clips, const torch::Tensor& tokens,
                                       const torch::Tensor& noise, const torch::Tensor& sigma) {
  return call_hooked({clips, tokens, noise, sigma}, [this](const std::vector<torch::Tensor>& in) {
    torch::Tensor x0, txt;
    {
      torch::NoGradGuard no_grad;  // the frozen towers keep no activations
      const auto t0 = std::chrono::steady_clock::now();
      x0 = vae->encode(in[0], vae->config().chunk_frames).first * config_.latent_scale;
      txt = text_encoder(in[1]).hidden;
      towers_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    const torch::Tensor s = in[3].view({-1, 1, 1, 1, 1});
    const torch::Tensor xt = (1 - s) * x0 + s * in[2];
    return std::vector<torch::Tensor>{(dit(xt, in[3], txt) - (in[2] - x0)).pow(2).mean()};
  })[0];
}

torch::Tensor WanPipelineImpl::generate(const torch::Tensor& tokens, const torch::Tensor& noise, int64_t steps) {
  torch::NoGradGuard no_grad;
  return call_hooked({tokens, noise}, [this, steps](const std::vector<torch::Tensor>& in) {
    const torch::Tensor txt = text_encoder(in[0]).hidden;
    torch::Tensor x = in[1];
    for (int64_t i = 0; i < steps; ++i) {
      const double s0 = 1.0 - static_cast<double>(i) / static_cast<double>(steps);
      const double s1 = 1.0 - static_cast<double>(i + 1) / static_cast<double>(steps);
      x = x + (s1 - s0) * dit(x, torch::full({x.size(0)}, s0, torch::kFloat), txt);
    }
    return std::vector<torch::Tensor>{vae->decode(x / config_.latent_scale, vae->config().chunk_frames)};
  })[0];
}

bool wan_unit(const std::string& qualified_name) { return qualified_name != "vae"; }

void wan_init(const WanConfig& c, const VaeConfig& vae, uint64_t seed, const std::string& name, at::Tensor& param) {
  if (util::starts_with(name, "vae.")) {
    vae_init(vae, seed, name.substr(4), param);
  } else if (util::starts_with(name, "text_encoder.") || nn::is_lora_parameter(name)) {
    FluxConfig towers;  // the text tower and adapters initialize as in the flux pipeline
    flux_init(towers, vae, seed, name, param);
  } else if (util::ends_with(name, "norm_q.weight") || util::ends_with(name, "norm_k.weight") ||
             util::ends_with(name, "norm3.weight")) {
    nn::init_constant(param, 1.0);
  } else if (util::ends_with(name, "modulation")) {
    nn::init_normal(param, seed, name, 1.0 / std::sqrt(static_cast<double>(c.dim)));
  } else if (param.dim() == 1 || util::starts_with(name, "dit.time_projection.") || util::starts_with(name, "dit.head.head.")) {
    nn::init_constant(param, 0.0);
  } else {
    nn::init_normal(param, seed, name, 0.02);
  }
}

}  // namespace zeroshard::models
