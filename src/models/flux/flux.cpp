#include "models/flux/flux.h"

#include "nn/activations.h"
#include "nn/init.h"
#include "util/text.h"

#include <chrono>
#include <cmath>
#include <stdexcept>

namespace zeroshard::models {

void FluxConfig::validate(int64_t latent_size) const {
  auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
  if (n_heads < 1 || dim % n_heads != 0 || head_dim() % 4 != 0) {
    fail("flux.dim (" + std::to_string(dim) + ") / flux.n_heads (" + std::to_string(n_heads) +
         ") must give a head size that is a multiple of 4 (2-D rotary positions)");
  }
  if (latent_size % patch_size != 0) {
    fail("flux.patch_size (" + std::to_string(patch_size) + ") must divide the latent size " + std::to_string(latent_size) +
         " (data.image_size / the VAE's spatial factor)");
  }
  if (text.dim % text.n_heads != 0 || (text.dim / text.n_heads) % 2 != 0) {
    fail("flux.text_dim (" + std::to_string(text.dim) + ") / flux.text_heads (" + std::to_string(text.n_heads) +
         ") must give an even head size");
  }
}

// --- building blocks ----------------------------------------------------------------------

namespace {

torch::Tensor modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale) {
  return (1 + scale) * nn::layer_norm_no_affine(x) + shift;
}

// [B, N, 3D] -> q, k, v as [B, H, N, hd], q and k RMS-normed per head.
std::array<torch::Tensor, 3> split_heads(const torch::Tensor& qkv, int64_t heads, nn::RMSNorm& norm_q,
                                         nn::RMSNorm& norm_k) {
  const int64_t B = qkv.size(0), N = qkv.size(1), D = qkv.size(2) / 3, hd = D / heads;
  auto part = [&](int64_t i) { return qkv.narrow(2, i * D, D).reshape({B, N, heads, hd}).transpose(1, 2); };
  return {norm_q(part(0)), norm_k(part(1)), part(2)};
}

torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const TokenPositions& pos,
                     double theta) {
  const torch::Tensor a = nn::full_attention(nn::apply_rope_axes(q, {pos.rows, pos.cols}, theta),
                                             nn::apply_rope_axes(k, {pos.rows, pos.cols}, theta), v);
  return a.transpose(1, 2).reshape({q.size(0), q.size(2), q.size(1) * q.size(3)});
}

}  // namespace

ModulationImpl::ModulationImpl(int64_t dim, int64_t sets) : sets_(sets) {
  lin = register_module("lin", nn::Linear(dim, 3 * sets * dim, /*bias=*/true));
}

std::vector<torch::Tensor> ModulationImpl::forward(const torch::Tensor& vec) {
  return lin(torch::silu(vec)).unsqueeze(1).chunk(3 * sets_, -1);
}

MlpImpl::MlpImpl(int64_t in, int64_t hidden, int64_t out, bool silu) : silu_(silu) {
  fc1 = register_module("fc1", nn::Linear(in, hidden, true));
  fc2 = register_module("fc2", nn::Linear(hidden, out, true));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  const torch::Tensor h = fc1(x);
  return fc2(silu_ ? torch::silu(h) : nn::gelu_tanh(h));
}

JointAttentionImpl::JointAttentionImpl(int64_t dim, int64_t n_heads) {
  qkv = register_module("qkv", nn::Linear(dim, 3 * dim, true));
  norm_q = register_module("norm_q", nn::RMSNorm(dim / n_heads, 1e-6));
  norm_k = register_module("norm_k", nn::RMSNorm(dim / n_heads, 1e-6));
  proj = register_module("proj", nn::Linear(dim, dim, true));
}

DoubleStreamBlockImpl::DoubleStreamBlockImpl(const FluxConfig& c) : config_(c) {
  img_mod = register_module("img_mod", Modulation(c.dim, 2));
  img_attn = register_module("img_attn", JointAttention(c.dim, c.n_heads));
  img_mlp = register_module("img_mlp", Mlp(c.dim, c.mlp_ratio * c.dim, c.dim));
  txt_mod = register_module("txt_mod", Modulation(c.dim, 2));
  txt_attn = register_module("txt_attn", JointAttention(c.dim, c.n_heads));
  txt_mlp = register_module("txt_mlp", Mlp(c.dim, c.mlp_ratio * c.dim, c.dim));
}

std::pair<torch::Tensor, torch::Tensor> DoubleStreamBlockImpl::forward(const torch::Tensor& img, const torch::Tensor& txt,
                                                                       const torch::Tensor& vec,
                                                                       const TokenPositions& pos) {
  // pos by value: a checkpointed block runs its body again in backward, after this returns.
  auto out = call_hooked({img, txt, vec}, [this, pos](const std::vector<torch::Tensor>& in) {
    const torch::Tensor &x = in[0], &t = in[1], &v = in[2];
    const auto im = img_mod(v), tm = txt_mod(v);  // shift1, scale1, gate1, shift2, scale2, gate2
    auto [iq, ik, iv] = split_heads(img_attn->qkv(modulate(x, im[0], im[1])), config_.n_heads, img_attn->norm_q,
                                    img_attn->norm_k);
    auto [tq, tk, tv] = split_heads(txt_attn->qkv(modulate(t, tm[0], tm[1])), config_.n_heads, txt_attn->norm_q,
                                    txt_attn->norm_k);
    const int64_t L = t.size(1);
    const torch::Tensor a = attend(torch::cat({tq, iq}, 2), torch::cat({tk, ik}, 2), torch::cat({tv, iv}, 2), pos,
                                   config_.rope_theta);
    torch::Tensor x2 = x + im[2] * img_attn->proj(a.narrow(1, L, a.size(1) - L));
    x2 = x2 + im[5] * img_mlp(modulate(x2, im[3], im[4]));
    torch::Tensor t2 = t + tm[2] * txt_attn->proj(a.narrow(1, 0, L));
    t2 = t2 + tm[5] * txt_mlp(modulate(t2, tm[3], tm[4]));
    return std::vector<torch::Tensor>{x2, t2};
  });
  return {out[0], out[1]};
}

SingleStreamBlockImpl::SingleStreamBlockImpl(const FluxConfig& c) : config_(c) {
  const int64_t M = c.mlp_ratio * c.dim;
  mod = register_module("mod", Modulation(c.dim, 1));
  linear1 = register_module("linear1", nn::Linear(c.dim, 3 * c.dim + M, true));
  norm_q = register_module("norm_q", nn::RMSNorm(c.head_dim(), 1e-6));
  norm_k = register_module("norm_k", nn::RMSNorm(c.head_dim(), 1e-6));
  linear2 = register_module("linear2", nn::Linear(c.dim + M, c.dim, true));
}

torch::Tensor SingleStreamBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& vec, const TokenPositions& pos) {
  auto out = call_hooked({x, vec}, [this, pos](const std::vector<torch::Tensor>& in) {
    const torch::Tensor &h = in[0], &v = in[1];
    const auto m = mod(v);  // shift, scale, gate
    const int64_t D = config_.dim;
    const torch::Tensor u = linear1(modulate(h, m[0], m[1]));
    auto [q, k, vv] = split_heads(u.narrow(2, 0, 3 * D), config_.n_heads, norm_q, norm_k);
    const torch::Tensor a = attend(q, k, vv, pos, config_.rope_theta);
    const torch::Tensor mlp = nn::gelu_tanh(u.narrow(2, 3 * D, u.size(2) - 3 * D));
    return std::vector<torch::Tensor>{h + m[2] * linear2(torch::cat({a, mlp}, -1))};
  });
  return out[0];
}

FinalLayerImpl::FinalLayerImpl(int64_t dim, int64_t out) {
  adaLN = register_module("adaLN", nn::Linear(dim, 2 * dim, true));
  linear = register_module("linear", nn::Linear(dim, out, true));
}

torch::Tensor FinalLayerImpl::forward(const torch::Tensor& img, const torch::Tensor& vec) {
  const auto ss = adaLN(torch::silu(vec)).unsqueeze(1).chunk(2, -1);  // shift, scale
  return linear(modulate(img, ss[0], ss[1]));
}

// --- the DiT ------------------------------------------------------------------------------

FluxDiTImpl::FluxDiTImpl(const FluxConfig& c, int64_t latent_channels) : config_(c), channels_(latent_channels) {
  const int64_t p2c = c.patch_size * c.patch_size * latent_channels;
  img_in = register_module("img_in", nn::Linear(p2c, c.dim, true));
  txt_in = register_module("txt_in", nn::Linear(c.text.dim, c.dim, true));
  time_in = register_module("time_in", Mlp(256, c.dim, c.dim, /*silu=*/true));
  vector_in = register_module("vector_in", Mlp(c.text.dim, c.dim, c.dim, /*silu=*/true));
  double_blocks = register_module("double_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.double_blocks; ++i) double_blocks->push_back(DoubleStreamBlock(c));
  single_blocks = register_module("single_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.single_blocks; ++i) single_blocks->push_back(SingleStreamBlock(c));
  final_layer = register_module("final", FinalLayer(c.dim, p2c));
}

torch::Tensor FluxDiTImpl::forward(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& txt,
                                   const torch::Tensor& pooled) {
  const int64_t B = x.size(0), C = x.size(1), p = config_.patch_size, gh = x.size(2) / p, gw = x.size(3) / p;
  const at::ScalarType dt = img_in->weight.scalar_type();  // bf16 under mixed precision
  const torch::Tensor patches =
      x.reshape({B, C, gh, p, gw, p}).permute({0, 2, 4, 1, 3, 5}).reshape({B, gh * gw, C * p * p}).to(dt);
  torch::Tensor img = img_in(patches);
  torch::Tensor t = txt_in(txt.to(dt));
  const torch::Tensor vec = time_in(nn::timestep_embedding(sigma).to(dt)) + vector_in(pooled.to(dt));
  const int64_t L = t.size(1);
  TokenPositions pos;  // text (0, 0) first, then the patch grid row-major
  pos.rows = torch::cat({torch::zeros({L}), torch::arange(gh, torch::kFloat).repeat_interleave(gw)});
  pos.cols = torch::cat({torch::zeros({L}), torch::arange(gw, torch::kFloat).repeat({gh})});
  for (const auto& b : *double_blocks) std::tie(img, t) = b->as<DoubleStreamBlockImpl>()->forward(img, t, vec, pos);
  torch::Tensor h = torch::cat({t, img}, 1);
  for (const auto& b : *single_blocks) h = b->as<SingleStreamBlockImpl>()->forward(h, vec, pos);
  const torch::Tensor out = final_layer(h.narrow(1, L, gh * gw), vec).to(torch::kFloat);
  return out.reshape({B, gh, gw, C, p, p}).permute({0, 3, 1, 4, 2, 5}).reshape({B, C, gh * p, gw * p});
}

torch::Tensor flow_matching_loss(FluxDiT& dit, const torch::Tensor& x0, const torch::Tensor& noise,
                                 const torch::Tensor& sigma, const torch::Tensor& txt, const torch::Tensor& pooled) {
  const torch::Tensor s = sigma.view({-1, 1, 1, 1});
  const torch::Tensor xt = (1 - s) * x0 + s * noise;
  return (dit(xt, sigma, txt, pooled) - (noise - x0)).pow(2).mean();
}

// --- the pipeline -------------------------------------------------------------------------

FluxPipelineImpl::FluxPipelineImpl(const FluxConfig& c, const VaeConfig& vae_config) : config_(c) {
  text_encoder = register_module("text_encoder", TextEncoder(c.text));
  vae = register_module("vae", VideoVae(vae_config));
  dit = register_module("dit", FluxDiT(c, vae_config.z_channels));
}

torch::Tensor FluxPipelineImpl::encode_images(const torch::Tensor& images) {
  return vae->encode(images.unsqueeze(2), 0).first.squeeze(2) * config_.latent_scale;
}

torch::Tensor FluxPipelineImpl::forward(const torch::Tensor& images, const torch::Tensor& tokens,
                                        const torch::Tensor& noise, const torch::Tensor& sigma) {
  auto out = call_hooked({images, tokens, noise, sigma}, [this](const std::vector<torch::Tensor>& in) {
    torch::Tensor x0;
    TextEncoding text;
    {
      // The frozen towers keep no activations (their units are gathered and freed as in
      // inference; they never get a backward).
      torch::NoGradGuard no_grad;
      const auto t0 = std::chrono::steady_clock::now();
      x0 = encode_images(in[0]);
      text = text_encoder(in[1]);
      towers_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return std::vector<torch::Tensor>{flow_matching_loss(dit, x0, in[2], in[3], text.hidden, text.pooled)};
  });
  return out[0];
}

torch::Tensor FluxPipelineImpl::generate(const torch::Tensor& tokens, const torch::Tensor& noise, int64_t steps) {
  torch::NoGradGuard no_grad;
  auto out = call_hooked({tokens, noise}, [this, steps](const std::vector<torch::Tensor>& in) {
    const TextEncoding text = text_encoder(in[0]);
    torch::Tensor x = in[1];
    const int64_t B = x.size(0);
    for (int64_t i = 0; i < steps; ++i) {
      // dx/dsigma = noise - x0 = the predicted velocity; step from sigma_i down to sigma_{i+1}.
      const double s0 = 1.0 - static_cast<double>(i) / static_cast<double>(steps);
      const double s1 = 1.0 - static_cast<double>(i + 1) / static_cast<double>(steps);
      x = x + (s1 - s0) * dit(x, torch::full({B}, s0, torch::kFloat), text.hidden, text.pooled);
    }
    return std::vector<torch::Tensor>{vae->decode((x / config_.latent_scale).unsqueeze(2), 0).squeeze(2)};
  });
  return out[0];
}

bool flux_unit(const std::string& qualified_name) { return qualified_name != "vae"; }

void flux_init(const FluxConfig& c, const VaeConfig& vae, uint64_t seed, const std::string& name, at::Tensor& param) {
  (void)c;
  auto starts = [&](const char* p) { return util::starts_with(name, p); };
  auto ends = [&](const char* s) { return util::ends_with(name, s); };
  if (starts("vae.")) {
    vae_init(vae, seed, name.substr(4), param);
  } else if (nn::is_lora_parameter(name)) {
    nn::lora_init(seed, name, param);
  } else if (ends("norm1.weight") || ends("norm2.weight") || ends("norm.weight") || ends("norm_q.weight") ||
             ends("norm_k.weight")) {
    nn::init_constant(param, 1.0);
  } else if (param.dim() == 1 || name.find("mod.lin") != std::string::npos || starts("dit.final.")) {
    nn::init_constant(param, 0.0);  // biases; adaLN-Zero modulation and output
  } else {
    nn::init_normal(param, seed, name, 0.02);
  }
}

}  // namespace zeroshard::models
