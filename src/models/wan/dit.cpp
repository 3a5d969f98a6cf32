#include "models/wan/dit.h"

#include "io/safetensors.h"
#include "nn/activations.h"
#include "nn/attention.h"
#include "nn/init.h"
#include "nn/matmul.h"
#include "nn/rms_norm.h"
#include "nn/rope.h"
#include "nn/timestep.h"
#include "util/text.h"

#include <cmath>
#include <stdexcept>

namespace zeroshard::models::wan {

// --- config -----------------------------------------------------------------------------------

std::vector<int64_t> WanDiTConfig::rope_axes_dim() const {
  const int64_t d = head_dim();
  return {d - 4 * (d / 6), 2 * (d / 6), 2 * (d / 6)};
}

void WanDiTConfig::validate() const {
  auto fail = [](const std::string& m) { throw std::invalid_argument("Wan DiT config: " + m); };
  if (model_type != "t2v") {
    fail("model_type '" + model_type +
         "' is not supported: only 't2v' (the i2v/flf2v/vace variants need the CLIP image encoder, img_emb and "
         "the image cross-attention projections, which this model does not build)");
  }
  if (window_size[0] != -1 || window_size[1] != -1) {
    fail("window_size [" + std::to_string(window_size[0]) + ", " + std::to_string(window_size[1]) +
         "] is not supported: only global attention [-1, -1] (every released Wan 2.1 model)");
  }
  for (int64_t p : patch_size) {
    if (p < 1) fail("patch_size entries must be >= 1");
  }
  if (num_heads < 1 || dim % num_heads != 0) fail("dim " + std::to_string(dim) + " is not a multiple of num_heads " + std::to_string(num_heads));
  if (head_dim() % 2 != 0) fail("head_dim " + std::to_string(head_dim()) + " must be even (RoPE pairs)");
  if (freq_dim < 2 || freq_dim % 2 != 0) fail("freq_dim " + std::to_string(freq_dim) + " must be even");
  if (in_dim < 1 || out_dim < 1 || text_dim < 1 || text_len < 1 || ffn_dim < 1 || num_layers < 1) {
    fail("in_dim, out_dim, text_dim, text_len, ffn_dim and num_layers must be positive");
  }
}

int64_t WanDiTConfig::num_params() const {
  nn::DeferredInit deferred;
  WanModel model(*this);
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  return n;
}

WanDiTConfig WanDiTConfig::from_json(const nlohmann::json& j, const std::string& source) {
  WanDiTConfig c;
  try {
    c.model_type = j.value("model_type", c.model_type);
    if (j.contains("patch_size")) {
      const auto v = j["patch_size"].get<std::vector<int64_t>>();
      if (v.size() != 3) throw std::invalid_argument("patch_size needs 3 entries (t, h, w)");
      c.patch_size = {v[0], v[1], v[2]};
    }
    if (j.contains("window_size")) {
      const auto v = j["window_size"].get<std::vector<int64_t>>();
      if (v.size() != 2) throw std::invalid_argument("window_size needs 2 entries");
      c.window_size = {v[0], v[1]};
    }
    c.text_len = j.value("text_len", c.text_len);
    c.in_dim = j.value("in_dim", c.in_dim);
    c.dim = j.value("dim", c.dim);
    c.ffn_dim = j.value("ffn_dim", c.ffn_dim);
    c.freq_dim = j.value("freq_dim", c.freq_dim);
    c.text_dim = j.value("text_dim", c.text_dim);
    c.out_dim = j.value("out_dim", c.out_dim);
    c.num_heads = j.value("num_heads", c.num_heads);
    c.num_layers = j.value("num_layers", c.num_layers);
    c.qk_norm = j.value("qk_norm", c.qk_norm);
    c.cross_attn_norm = j.value("cross_attn_norm", c.cross_attn_norm);
    c.eps = j.value("eps", c.eps);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(source + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  return c;
}

WanDiTConfig WanDiTConfig::from_diffusers_json(const nlohmann::json& j, const std::string& source) {
  WanDiTConfig c;
  try {
    for (const char* key : {"image_dim", "added_kv_proj_dim", "pos_embed_seq_len"}) {
      if (j.contains(key) && !j[key].is_null()) {
        throw std::invalid_argument(std::string(key) +
                                    " is set: an image-to-video transformer; only text-to-video (t2v) is supported");
      }
    }
    if (j.contains("patch_size")) {
      const auto v = j["patch_size"].get<std::vector<int64_t>>();
      if (v.size() != 3) throw std::invalid_argument("patch_size needs 3 entries (t, h, w)");
      c.patch_size = {v[0], v[1], v[2]};
    }
    c.num_heads = j.value("num_attention_heads", int64_t{40});
    c.dim = c.num_heads * j.value("attention_head_dim", int64_t{128});
    c.in_dim = j.value("in_channels", c.in_dim);
    c.out_dim = j.value("out_channels", c.out_dim);
    c.text_dim = j.value("text_dim", c.text_dim);
    c.freq_dim = j.value("freq_dim", c.freq_dim);
    c.ffn_dim = j.value("ffn_dim", int64_t{13824});
    c.num_layers = j.value("num_layers", int64_t{40});
    c.cross_attn_norm = j.value("cross_attn_norm", true);
    c.eps = j.value("eps", c.eps);
    const std::string qk = j.contains("qk_norm") && j["qk_norm"].is_string() ? j["qk_norm"].get<std::string>() : "";
    if (j.contains("qk_norm") && !j["qk_norm"].is_null() && qk != "rms_norm_across_heads") {
      throw std::invalid_argument("qk_norm '" + j["qk_norm"].dump() + "': only \"rms_norm_across_heads\" (Wan 2.1)");
    }
    c.qk_norm = j.contains("qk_norm") ? !j["qk_norm"].is_null() : true;
    c.validate();
  } catch (const std::exception& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  return c;
}

WanDiTConfig wan21_t2v_1_3b() {
  WanDiTConfig c;  // wan/configs/wan_t2v_1_3B.py
  c.dim = 1536;
  c.ffn_dim = 8960;
  c.num_heads = 12;
  c.num_layers = 30;
  return c;
}

WanDiTConfig wan21_t2v_14b() {
  WanDiTConfig c;  // wan/configs/wan_t2v_14B.py
  c.dim = 5120;
  c.ffn_dim = 13824;
  c.num_heads = 40;
  c.num_layers = 40;
  return c;
}

// --- layers -----------------------------------------------------------------------------------

namespace {

// LayerNorm over the last dimension without affine parameters (norm1, norm2, the head's norm).
at::Tensor plain_layer_norm(const at::Tensor& x, double eps) {
  return at::layer_norm(x.to(nn::norm_dtype(x)), {x.size(-1)}, {}, {}, eps).to(x.scalar_type());
}

at::Tensor param_tensor(torch::nn::Module& m, const std::string& name, at::IntArrayRef shape) {
  return m.register_parameter(name, nn::new_parameter(shape));
}

}  // namespace

WanRMSNormImpl::WanRMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", nn::new_parameter({dim}));
  if (!nn::DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    weight.fill_(1.0);
  }
}

torch::Tensor WanRMSNormImpl::forward(const torch::Tensor& x) {
  return nn::rms_norm(x, weight, eps_);
}

WanAttentionImpl::WanAttentionImpl(int64_t dim, int64_t num_heads, bool qk_norm, double eps) : num_heads_(num_heads) {
  q = register_module("q", nn::Linear(dim, dim, /*bias=*/true));
  k = register_module("k", nn::Linear(dim, dim, true));
  v = register_module("v", nn::Linear(dim, dim, true));
  o = register_module("o", nn::Linear(dim, dim, true));
  if (qk_norm) {
    norm_q = register_module("norm_q", WanRMSNorm(dim, eps));
    norm_k = register_module("norm_k", WanRMSNorm(dim, eps));
  }
}

torch::Tensor WanAttentionImpl::heads(const torch::Tensor& t) const {
  return t.view({t.size(0), t.size(1), num_heads_, -1}).transpose(1, 2);
}

torch::Tensor WanAttentionImpl::self_attention(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                               const torch::Tensor& key_padding) {
  // q/k RMSNorm over the full width (all heads at once), then the head split and RoPE.
  at::Tensor qx = q(x), kx = k(x);
  if (norm_q) {
    qx = norm_q(qx);
    kx = norm_k(kx);
  }
  const nn::RopeAngles angles{cos, sin};
  const at::Tensor qh = nn::apply_rope(heads(qx), angles, nn::RopePairing::Interleaved);
  const at::Tensor kh = nn::apply_rope(heads(kx), angles, nn::RopePairing::Interleaved);
  nn::AttentionOptions opt;  // scale 1/sqrt(head_dim)
  opt.key_padding = key_padding;
  const at::Tensor out = nn::attention(qh, kh, heads(v(x)), opt);
  return o(out.transpose(1, 2).reshape({x.size(0), x.size(1), -1}));
}

torch::Tensor WanAttentionImpl::cross_attention(const torch::Tensor& x, const torch::Tensor& context) {
  at::Tensor qx = q(x), kx = k(context);
  if (norm_q) {
    qx = norm_q(qx);
    kx = norm_k(kx);
  }
  // t2v: no key mask (the zero-padded text rows are attended as bias-only tokens).
  const at::Tensor out = nn::attention(heads(qx), heads(kx), heads(v(context)));
  return o(out.transpose(1, 2).reshape({x.size(0), x.size(1), -1}));
}

WanAttentionBlockImpl::WanAttentionBlockImpl(const WanDiTConfig& c) : dim_(c.dim), eps_(c.eps) {
  self_attn = register_module("self_attn", WanAttention(c.dim, c.num_heads, c.qk_norm, c.eps));
  if (c.cross_attn_norm) norm3 = register_module("norm3", nn::LayerNorm(c.dim, c.eps, /*affine=*/true));
  cross_attn = register_module("cross_attn", WanAttention(c.dim, c.num_heads, c.qk_norm, c.eps));
  auto ffn = register_module("ffn", std::make_shared<torch::nn::Module>("Sequential"));
  ffn0 = ffn->register_module("0", nn::Linear(c.dim, c.ffn_dim, true));
  ffn2 = ffn->register_module("2", nn::Linear(c.ffn_dim, c.dim, true));
  modulation = param_tensor(*this, "modulation", {1, 6, c.dim});
}

torch::Tensor WanAttentionBlockImpl::body(const torch::Tensor& x, const torch::Tensor& e0, const torch::Tensor& context,
                                          const torch::Tensor& cos, const torch::Tensor& sin,
                                          const torch::Tensor& key_padding) {
  // (shift, scale, gate) for self-attention, then for the FFN: the block's table + e0.
  const at::Tensor e = modulation + e0;  // [B, 6, dim]
  auto m = [&e](int64_t i) { return e.narrow(1, i, 1); };
  at::Tensor y = self_attn->self_attention(plain_layer_norm(x, eps_) * (1 + m(1)) + m(0), cos, sin, key_padding);
  at::Tensor h = x + y * m(2);
  h = h + cross_attn->cross_attention(norm3 ? norm3(h) : h, context);  // ungated
  y = ffn2(nn::gelu_tanh(ffn0(plain_layer_norm(h, eps_) * (1 + m(4)) + m(3))));
  return h + y * m(5);
}

torch::Tensor WanAttentionBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& e0, const torch::Tensor& context,
                                             const torch::Tensor& cos, const torch::Tensor& sin,
                                             const torch::Tensor& key_padding) {
  std::vector<at::Tensor> inputs = {x, e0, context, cos, sin};
  if (key_padding.defined()) inputs.push_back(key_padding);
  return call_hooked(inputs, [this](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{body(in[0], in[1], in[2], in[3], in[4], in.size() > 5 ? in[5] : at::Tensor())};
  })[0];
}

WanHeadImpl::WanHeadImpl(int64_t dim, int64_t out_features, double eps) : dim_(dim), eps_(eps) {
  head = register_module("head", nn::Linear(dim, out_features, true));
  modulation = param_tensor(*this, "modulation", {1, 2, dim});
}

torch::Tensor WanHeadImpl::forward(const torch::Tensor& x, const torch::Tensor& e) {
  // The head's table + e (not e0): chunk 0 = shift, chunk 1 = scale.
  const at::Tensor m = modulation + e.unsqueeze(1);
  return head(plain_layer_norm(x, eps_) * (1 + m.narrow(1, 1, 1)) + m.narrow(1, 0, 1));
}

// --- the model --------------------------------------------------------------------------------

WanModelImpl::WanModelImpl(const WanDiTConfig& c) : config_(c) {
  c.validate();
  const auto& p = c.patch_size;
  patch_embedding = register_module("patch_embedding", std::make_shared<torch::nn::Module>("Conv3d"));
  patch_weight = param_tensor(*patch_embedding, "weight", {c.dim, c.in_dim, p[0], p[1], p[2]});
  patch_bias = param_tensor(*patch_embedding, "bias", {c.dim});
  auto text = register_module("text_embedding", std::make_shared<torch::nn::Module>("Sequential"));
  text0 = text->register_module("0", nn::Linear(c.text_dim, c.dim, true));
  text2 = text->register_module("2", nn::Linear(c.dim, c.dim, true));
  auto time = register_module("time_embedding", std::make_shared<torch::nn::Module>("Sequential"));
  time0 = time->register_module("0", nn::Linear(c.freq_dim, c.dim, true));
  time2 = time->register_module("2", nn::Linear(c.dim, c.dim, true));
  auto proj = register_module("time_projection", std::make_shared<torch::nn::Module>("Sequential"));
  time_proj = proj->register_module("1", nn::Linear(c.dim, 6 * c.dim, true));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) blocks->push_back(WanAttentionBlock(c));
  head = register_module("head", WanHead(c.dim, p[0] * p[1] * p[2] * c.out_dim, c.eps));
}

std::vector<torch::Tensor> WanModelImpl::forward(const std::vector<torch::Tensor>& x, const torch::Tensor& t,
                                                 const std::vector<torch::Tensor>& context, int64_t seq_len) {
  if (x.empty() || x.size() != context.size()) {
    throw std::invalid_argument("WanModel: " + std::to_string(x.size()) + " latents and " +
                                std::to_string(context.size()) + " contexts; one context per latent, at least one");
  }
  if (t.dim() != 1 || t.size(0) != static_cast<int64_t>(x.size())) {
    throw std::invalid_argument("WanModel: t must be [" + std::to_string(x.size()) + "] (one timestep per sample), got " +
                                io::shape_text(t.sizes().vec()));
  }
  // The lists travel through the root's hooks flattened: x_0.., t, context_0..
  std::vector<at::Tensor> inputs(x.begin(), x.end());
  inputs.push_back(t);
  inputs.insert(inputs.end(), context.begin(), context.end());
  const size_t batch = x.size();
  return call_hooked(inputs, [this, batch, seq_len](const std::vector<at::Tensor>& in) { return body(in, batch, seq_len); });
}

torch::Tensor WanModelImpl::forward_batched(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context) {
  if (x.dim() != 5 || context.dim() != 3 || context.size(0) != x.size(0)) {
    throw std::invalid_argument("WanModel: batched x must be [B, C, F, H, W] and context [B, L, text_dim], got " +
                                io::shape_text(x.sizes().vec()) + " and " + io::shape_text(context.sizes().vec()));
  }
  std::vector<at::Tensor> xs, cs;
  for (int64_t i = 0; i < x.size(0); ++i) {
    xs.push_back(x[i]);
    cs.push_back(context[i]);
  }
  return at::stack(forward(xs, t, cs, 0), 0);
}

std::vector<torch::Tensor> WanModelImpl::body(const std::vector<torch::Tensor>& in, size_t batch, int64_t seq_len) {
  const WanDiTConfig& c = config_;
  const auto& p = c.patch_size;
  const int64_t B = static_cast<int64_t>(batch);
  const at::ScalarType dt = patch_weight.scalar_type();

  // Patchify: Conv3d with kernel = stride = patch_size; tokens in (frame, row, col) order.
  std::vector<at::Tensor> tokens;
  std::vector<std::array<int64_t, 3>> grids;
  int64_t longest = 0;
  for (size_t i = 0; i < batch; ++i) {
    const at::Tensor& u = in[i];
    if (u.dim() != 4 || u.size(0) != c.in_dim || u.size(1) % p[0] || u.size(2) % p[1] || u.size(3) % p[2]) {
      throw std::invalid_argument("WanModel: latent " + std::to_string(i) + " " + io::shape_text(u.sizes().vec()) +
                                  " must be [" + std::to_string(c.in_dim) + ", F, H, W] with F, H, W multiples of the patch (" +
                                  std::to_string(p[0]) + ", " + std::to_string(p[1]) + ", " + std::to_string(p[2]) + ")");
    }
    const at::Tensor e = nn::conv3d(u.unsqueeze(0).to(dt), patch_weight, patch_bias, p, {0, 0, 0});
    grids.push_back({e.size(2), e.size(3), e.size(4)});
    tokens.push_back(e.flatten(2).transpose(1, 2));  // [1, n_i, dim]
    longest = std::max(longest, tokens.back().size(1));
  }
  if (seq_len == 0) seq_len = longest;
  if (seq_len < longest) {
    throw std::invalid_argument("WanModel: seq_len " + std::to_string(seq_len) + " is below a sample's " +
                                std::to_string(longest) + " tokens");
  }
  // Zero rows up to seq_len; they are masked as keys and dropped at the end.
  bool padded = false;
  for (auto& u : tokens) {
    if (u.size(1) < seq_len) {
      padded = true;
      u = at::cat({u, u.new_zeros({1, seq_len - u.size(1), u.size(2)})}, 1);
    }
  }
  at::Tensor h = at::cat(tokens, 0);

  // RoPE angles per token (float64 tables; padded rows get position 0 = unrotated).
  bool same_grid = true;
  for (const auto& g : grids) same_grid = same_grid && g == grids[0];
  auto angles_for = [&](const std::array<int64_t, 3>& g) {
    at::Tensor pos = nn::grid_positions(g[0], g[1], g[2]);
    if (pos.size(0) < seq_len) pos = at::cat({pos, pos.new_zeros({seq_len - pos.size(0), 3})}, 0);
    return nn::rope_angles(pos, c.rope_axes_dim(), 10000.0, at::kDouble);
  };
  at::Tensor cos, sin;
  if (same_grid) {
    const nn::RopeAngles a = angles_for(grids[0]);
    cos = a.cos;
    sin = a.sin;
  } else {
    std::vector<at::Tensor> cs, ss;
    for (const auto& g : grids) {
      const nn::RopeAngles a = angles_for(g);
      cs.push_back(a.cos);
      ss.push_back(a.sin);
    }
    cos = at::stack(cs, 0);
    sin = at::stack(ss, 0);
  }
  at::Tensor key_padding;
  if (padded) {
    std::vector<int64_t> n;
    for (const auto& g : grids) n.push_back(g[0] * g[1] * g[2]);
    key_padding = at::arange(seq_len, at::kLong).unsqueeze(0).lt(at::tensor(n, at::kLong).unsqueeze(1));
  }

  // Time: float64 sinusoid (cos half first) -> MLP -> e; SiLU + Linear -> e0 [B, 6, dim].
  const at::Tensor& t = in[batch];
  const at::Tensor e = time2(at::silu(time0(nn::timestep_sinusoid(t, c.freq_dim, {}, time0->weight.scalar_type()))));
  const at::Tensor e0 = time_proj(at::silu(e)).unflatten(1, {6, c.dim});

  // Text: each prompt zero-padded to text_len rows, then the MLP on every row.
  std::vector<at::Tensor> rows;
  for (size_t i = 0; i < batch; ++i) {
    const at::Tensor& u = in[batch + 1 + i];
    if (u.dim() != 2 || u.size(1) != c.text_dim || u.size(0) > c.text_len) {
      throw std::invalid_argument("WanModel: context " + std::to_string(i) + " " + io::shape_text(u.sizes().vec()) +
                                  " must be [L, " + std::to_string(c.text_dim) + "] with L <= text_len " +
                                  std::to_string(c.text_len));
    }
    const at::Tensor v = u.to(text0->weight.scalar_type());
    rows.push_back(at::cat({v, v.new_zeros({c.text_len - v.size(0), v.size(1)})}, 0));
  }
  const at::Tensor context = text2(nn::gelu_tanh(text0(at::stack(rows, 0))));

  for (const auto& b : *blocks) h = b->as<WanAttentionBlockImpl>()->forward(h, e0, context, cos, sin, key_padding);
  h = head(h, e);  // [B, seq_len, pt*ph*pw*C]

  // Unpatchify: per token (pt, ph, pw, C) with C fastest -> [C, F, H, W].
  std::vector<at::Tensor> out;
  for (int64_t i = 0; i < B; ++i) {
    const auto& g = grids[static_cast<size_t>(i)];
    at::Tensor u = h[i].narrow(0, 0, g[0] * g[1] * g[2]).reshape({g[0], g[1], g[2], p[0], p[1], p[2], c.out_dim});
    u = u.permute({6, 0, 3, 1, 4, 2, 5}).reshape({c.out_dim, g[0] * p[0], g[1] * p[1], g[2] * p[2]});
    out.push_back(u);
  }
  return out;
}

void WanModelImpl::reset_parameters(uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters(/*recurse=*/true)) wan_dit_init(config_, seed, item.key(), item.value());
}

void wan_dit_init(const WanDiTConfig& c, uint64_t seed, const std::string& name, at::Tensor& param) {
  using util::ends_with;
  using util::starts_with;
  torch::NoGradGuard no_grad;
  auto uniform = [&](double bound) {
    at::Generator g = nn::generator_for(seed, name);
    param.uniform_(-bound, bound, g);
  };
  auto xavier = [&](int64_t fan_in, int64_t fan_out) {
    uniform(std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
  };
  if (name == "patch_embedding.weight") {
    xavier(param.numel() / param.size(0), param.size(0));  // over the kernel flattened
  } else if (name == "patch_embedding.bias") {
    uniform(1.0 / std::sqrt(static_cast<double>(c.in_dim * c.patch_size[0] * c.patch_size[1] * c.patch_size[2])));
  } else if (ends_with(name, "modulation")) {
    nn::init_normal(param, seed, name, 1.0 / std::sqrt(static_cast<double>(c.dim)));
  } else if (ends_with(name, "norm_q.weight") || ends_with(name, "norm_k.weight") || ends_with(name, "norm3.weight")) {
    nn::init_constant(param, 1.0);
  } else if (ends_with(name, ".bias")) {
    nn::init_constant(param, 0.0);  // Linear biases and norm3.bias
  } else if (name == "head.head.weight") {
    nn::init_constant(param, 0.0);
  } else if (starts_with(name, "text_embedding.") || starts_with(name, "time_embedding.")) {
    nn::init_normal(param, seed, name, 0.02);
  } else if (ends_with(name, ".weight") && param.dim() == 2) {
    xavier(param.size(1), param.size(0));
  } else {
    throw std::invalid_argument("wan_dit_init: no rule for parameter '" + name + "'");
  }
}

nn::NameMap dit_diffusers_name_map() {
  nn::NameMap m;
  m.rename("time_embedding.0.**", "condition_embedder.time_embedder.linear_1.**");
  m.rename("time_embedding.2.**", "condition_embedder.time_embedder.linear_2.**");
  m.rename("text_embedding.0.**", "condition_embedder.text_embedder.linear_1.**");
  m.rename("text_embedding.2.**", "condition_embedder.text_embedder.linear_2.**");
  m.rename("time_projection.1.**", "condition_embedder.time_proj.**");
  m.rename("head.modulation", "scale_shift_table");
  m.rename("head.head.**", "proj_out.**");
  m.rename("blocks.*.modulation", "blocks.*.scale_shift_table");
  for (const std::string attn : {"self_attn", "cross_attn"}) {
    const std::string to = attn == "self_attn" ? "attn1" : "attn2";
    for (const std::string x : {"q", "k", "v"}) m.rename("blocks.*." + attn + "." + x + ".**", "blocks.*." + to + ".to_" + x + ".**");
    m.rename("blocks.*." + attn + ".o.**", "blocks.*." + to + ".to_out.0.**");
    m.rename("blocks.*." + attn + ".norm_q.**", "blocks.*." + to + ".norm_q.**");
    m.rename("blocks.*." + attn + ".norm_k.**", "blocks.*." + to + ".norm_k.**");
  }
  // Upstream calls its norms norm1, norm3 (cross-attention, affine), norm2 (FFN); diffusers
  // numbers them in call order, so the affine one is norm2 there.
  m.rename("blocks.*.norm3.**", "blocks.*.norm2.**");
  m.rename("blocks.*.ffn.0.**", "blocks.*.ffn.net.0.proj.**");
  m.rename("blocks.*.ffn.2.**", "blocks.*.ffn.net.2.**");
  return m;
}

}  // namespace zeroshard::models::wan
