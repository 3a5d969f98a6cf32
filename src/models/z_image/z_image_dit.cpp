#include "models/z_image/z_image_dit.h"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "nn/attention.h"
#include "nn/timestep.h"
#include "zeroshard/nn/deferred.h"

namespace zeroshard::models::z_image {

namespace {

constexpr double kFinalNormEps = 1e-6;  // FinalLayer's LayerNorm (fixed upstream)

std::string pair_key(int64_t patch, int64_t f_patch) { return std::to_string(patch) + "-" + std::to_string(f_patch); }

nn::LinearImpl& linear_at(torch::nn::ModuleList& list, size_t i) { return *list[i]->as<nn::LinearImpl>(); }

// Rows padded with zeros to `rows` and stacked: [B, rows, ...] (torch pad_sequence).
torch::Tensor pad_stack(const std::vector<torch::Tensor>& seqs, int64_t rows) {
  std::vector<torch::Tensor> out;
  for (const auto& s : seqs) {
    if (s.size(0) == rows) {
      out.push_back(s);
    } else {
      std::vector<int64_t> shape = s.sizes().vec();
      shape[0] = rows - s.size(0);
      out.push_back(torch::cat({s, torch::zeros(shape, s.options())}, 0));
    }
  }
  return torch::stack(out, 0);
}

// The key mask and rotary angles of a batch of sequences with positions [S_i, 3] each: keys are
// false only on the batch padding (whose positions are 0: those rows are never attended and are
// dropped at the end).
SequenceContext sequence_context(const std::vector<at::Tensor>& positions, const ZImageDitConfig& c,
                                 at::ScalarType angle_dtype) {
  int64_t rows = 0;
  for (const auto& p : positions) rows = std::max(rows, p.size(0));
  const int64_t B = static_cast<int64_t>(positions.size());
  SequenceContext ctx;
  ctx.keys = torch::zeros({B, rows}, torch::kBool);
  for (int64_t i = 0; i < B; ++i) ctx.keys[i].narrow(0, 0, positions[static_cast<size_t>(i)].size(0)).fill_(true);
  const at::Tensor pos = pad_stack(positions, rows).view({B * rows, 3});
  const nn::RopeAngles a = nn::rope_angles(pos, c.axes_dims, c.rope_theta, angle_dtype);
  ctx.rope = {a.cos.view({B, rows, -1}), a.sin.view({B, rows, -1})};
  return ctx;
}

int64_t modulo_pad(int64_t n, int64_t m) { return (m - n % m) % m; }

}  // namespace

void ZImageDitConfig::validate(const std::string& where) const {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(where + ": " + what);
  };
  need(!all_patch_size.empty() && all_patch_size.size() == all_f_patch_size.size(),
       "all_patch_size and all_f_patch_size must be non-empty lists of equal length");
  for (size_t i = 0; i < all_patch_size.size(); ++i) {
    need(all_patch_size[i] > 0 && all_f_patch_size[i] > 0, "patch sizes must be > 0");
  }
  need(in_channels > 0 && dim > 0 && cap_feat_dim > 0, "in_channels, dim and cap_feat_dim must be > 0");
  need(n_layers >= 0 && n_refiner_layers >= 0, "n_layers and n_refiner_layers must be >= 0");
  need(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, "n_heads (" + std::to_string(n_heads) +
                                                                       ") must be a positive multiple of n_kv_heads (" +
                                                                       std::to_string(n_kv_heads) + ")");
  need(axes_dims.size() == 3 && axes_lens.size() == 3,
       "axes_dims and axes_lens need 3 entries (the position ids are (frame/caption, row, column))");
  int64_t sum = 0;
  for (int64_t d : axes_dims) {
    need(d >= 0 && d % 2 == 0, "axes_dims entries must be even, got " + std::to_string(d));
    sum += d;
  }
  need(sum == head_dim(), "axes_dims must sum to the head dim dim / n_heads = " + std::to_string(head_dim()) +
                              ", they sum to " + std::to_string(sum));
  need(adaln_embed_dim > 0 && seq_multi_of > 0 && frequency_embedding_size > 0 && max_period > 0,
       "ADALN_EMBED_DIM, SEQ_MULTI_OF, FREQUENCY_EMBEDDING_SIZE and MAX_PERIOD must be > 0");
}

ZImageDitConfig config_from_json(const nlohmann::json& j, const std::string& where) {
  ZImageDitConfig c;  // upstream's defaults for absent fields
  try {
    auto get = [&](const char* key, auto& field) {
      if (j.contains(key) && !j[key].is_null()) field = j[key].get<std::decay_t<decltype(field)>>();
    };
    get("all_patch_size", c.all_patch_size);
    get("all_f_patch_size", c.all_f_patch_size);
    get("in_channels", c.in_channels);
    get("dim", c.dim);
    get("n_layers", c.n_layers);
    get("n_refiner_layers", c.n_refiner_layers);
    get("n_heads", c.n_heads);
    get("n_kv_heads", c.n_kv_heads);
    get("norm_eps", c.norm_eps);
    get("qk_norm", c.qk_norm);
    get("cap_feat_dim", c.cap_feat_dim);
    get("rope_theta", c.rope_theta);
    get("t_scale", c.t_scale);
    get("axes_dims", c.axes_dims);
    get("axes_lens", c.axes_lens);
    get("ADALN_EMBED_DIM", c.adaln_embed_dim);
    get("SEQ_MULTI_OF", c.seq_multi_of);
    get("FREQUENCY_EMBEDDING_SIZE", c.frequency_embedding_size);
    get("MAX_PERIOD", c.max_period);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
  c.validate(where);
  return c;
}

ZImageDitConfig z_image_turbo_6b() { return ZImageDitConfig{}; }

int64_t parameter_count(const ZImageDitConfig& c) {
  const int64_t D = c.dim, Dh = c.head_dim(), A = c.adaln_dim(), F = c.ffn_hidden();
  auto linear = [](int64_t in, int64_t out, bool bias) { return in * out + (bias ? out : 0); };
  const int64_t plain = linear(D, c.n_heads * Dh, false) + 2 * linear(D, c.n_kv_heads * Dh, false) +
                        linear(c.n_heads * Dh, D, false) + (c.qk_norm ? 2 * Dh : 0)  // attention
                        + 3 * linear(D, F, false) + 4 * D;                           // feed_forward, 4 norms
  const int64_t modulated = plain + linear(A, 4 * D, true);
  int64_t n = (c.n_layers + c.n_refiner_layers) * modulated + c.n_refiner_layers * plain;
  n += linear(c.frequency_embedding_size, c.t_embedder_mid_size, true) + linear(c.t_embedder_mid_size, A, true);
  n += c.cap_feat_dim + linear(c.cap_feat_dim, D, true) + 2 * D;  // cap_embedder, pad tokens
  for (size_t i = 0; i < c.all_patch_size.size(); ++i) {
    const int64_t P = c.all_f_patch_size[i] * c.all_patch_size[i] * c.all_patch_size[i] * c.in_channels;
    n += linear(P, D, true) + linear(D, P, true) + linear(A, D, true);  // x_embedder, final linear + adaLN
  }
  return n;
}

ZImageAttentionImpl::ZImageAttentionImpl(int64_t dim, int64_t heads, int64_t kv_heads, bool qk_norm, double eps)
    : heads_(heads), kv_heads_(kv_heads), head_dim_(dim / heads) {
  to_q = register_module("to_q", nn::Linear(dim, heads * head_dim_));
  to_k = register_module("to_k", nn::Linear(dim, kv_heads * head_dim_));
  to_v = register_module("to_v", nn::Linear(dim, kv_heads * head_dim_));
  to_out = register_module("to_out", torch::nn::ModuleList());
  to_out->push_back(nn::Linear(heads * head_dim_, dim));
  if (qk_norm) {
    norm_q = register_module("norm_q", nn::RMSNorm(head_dim_, eps));
    norm_k = register_module("norm_k", nn::RMSNorm(head_dim_, eps));
  }
}

torch::Tensor ZImageAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& keys,
                                           const nn::RopeAngles& rope) {
  const int64_t B = x.size(0), S = x.size(1);
  // Per-head RMSNorm of q and k, then RoPE (complex pairs (2i, 2i+1), axes [f | h | w]).
  auto split = [&](const torch::Tensor& y, int64_t h) { return y.view({B, S, h, head_dim_}); };
  auto rotate = [&](torch::Tensor t, nn::RMSNorm& norm) {
    if (norm) t = norm(t);
    return nn::apply_rope(t.transpose(1, 2), rope, nn::RopePairing::Interleaved);
  };
  const torch::Tensor q = rotate(split(to_q(x), heads_), norm_q);
  const torch::Tensor k = rotate(split(to_k(x), kv_heads_), norm_k);
  const torch::Tensor v = split(to_v(x), kv_heads_).transpose(1, 2);
  nn::AttentionOptions opt;
  opt.key_padding = keys;
  const torch::Tensor a = nn::attention(q, k, v, opt).transpose(1, 2).reshape({B, S, heads_ * head_dim_});
  return linear_at(to_out, 0).forward(a);
}

ZImageBlockImpl::ZImageBlockImpl(const ZImageDitConfig& c, bool modulation) : modulation_(modulation) {
  attention = register_module("attention", ZImageAttention(c.dim, c.n_heads, c.n_kv_heads, c.qk_norm, c.norm_eps));
  feed_forward = register_module("feed_forward", nn::FeedForward(c.dim, c.ffn_hidden()));
  attention_norm1 = register_module("attention_norm1", nn::RMSNorm(c.dim, c.norm_eps));
  ffn_norm1 = register_module("ffn_norm1", nn::RMSNorm(c.dim, c.norm_eps));
  attention_norm2 = register_module("attention_norm2", nn::RMSNorm(c.dim, c.norm_eps));
  ffn_norm2 = register_module("ffn_norm2", nn::RMSNorm(c.dim, c.norm_eps));
  if (modulation) {
    adaLN_modulation = register_module("adaLN_modulation", torch::nn::ModuleList());
    adaLN_modulation->push_back(nn::Linear(c.adaln_dim(), 4 * c.dim, true));
  }
}

torch::Tensor ZImageBlockImpl::forward(const torch::Tensor& x, const SequenceContext& ctx, const torch::Tensor& adaln) {
  TORCH_CHECK(adaln.defined() == modulation_, "z_image block: adaLN input ",
              adaln.defined() ? "given to" : "missing for", " a block ", modulation_ ? "with" : "without",
              " modulation");
  std::vector<torch::Tensor> inputs{x};
  if (modulation_) inputs.push_back(adaln);
  // ctx by value: a checkpointed block runs its body again in backward, after this returns.
  auto out = call_hooked(inputs, [this, ctx](const std::vector<torch::Tensor>& in) {
    torch::Tensor h = in[0];
    if (!modulation_) {
      h = h + attention_norm2(attention(attention_norm1(h), ctx.keys, ctx.rope));
      return std::vector<torch::Tensor>{h + ffn_norm2(feed_forward(ffn_norm1(h)))};
    }
    // adaLN(t_emb) -> [scale_msa, gate_msa, scale_mlp, gate_mlp]: no shift; gates through tanh;
    // the "sandwich": RMSNorm before and after attention and FFN.
    const auto m = linear_at(adaLN_modulation, 0).forward(in[1]).unsqueeze(1).chunk(4, 2);
    const torch::Tensor gate_msa = m[1].tanh(), gate_mlp = m[3].tanh();
    h = h + gate_msa * attention_norm2(attention(attention_norm1(h) * (1 + m[0]), ctx.keys, ctx.rope));
    return std::vector<torch::Tensor>{h + gate_mlp * ffn_norm2(feed_forward(ffn_norm1(h) * (1 + m[2])))};
  });
  return out[0];
}

FinalLayerImpl::FinalLayerImpl(int64_t dim, int64_t adaln_dim, int64_t out) {
  norm_final = register_module("norm_final", nn::LayerNorm(dim, kFinalNormEps, /*affine=*/false));
  linear = register_module("linear", nn::Linear(dim, out, true));
  adaLN_modulation = register_module("adaLN_modulation", torch::nn::ModuleList());
  adaLN_modulation->push_back(torch::nn::SiLU());
  adaLN_modulation->push_back(nn::Linear(adaln_dim, dim, true));
}

torch::Tensor FinalLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& adaln) {
  // SiLU first here (the blocks take the t embedding itself); scale only, no shift.
  const torch::Tensor scale = 1 + linear_at(adaLN_modulation, 1).forward(torch::silu(adaln));
  return linear(norm_final(x) * scale.unsqueeze(1));
}

TimestepEmbedderImpl::TimestepEmbedderImpl(int64_t frequency_size, int64_t mid, int64_t out) {
  mlp = register_module("mlp", torch::nn::ModuleList());
  mlp->push_back(nn::Linear(frequency_size, mid, true));
  mlp->push_back(torch::nn::SiLU());
  mlp->push_back(nn::Linear(mid, out, true));
}

torch::Tensor TimestepEmbedderImpl::forward(const torch::Tensor& t_freq) {
  return linear_at(mlp, 2).forward(torch::silu(linear_at(mlp, 0).forward(t_freq)));
}

ZImageDitImpl::ZImageDitImpl(const ZImageDitConfig& c) : config_(c) {
  c.validate();
  all_x_embedder = register_module("all_x_embedder", torch::nn::ModuleDict());
  all_final_layer = register_module("all_final_layer", torch::nn::ModuleDict());
  for (size_t i = 0; i < c.all_patch_size.size(); ++i) {
    const int64_t p = c.all_patch_size[i], f = c.all_f_patch_size[i], P = f * p * p * c.in_channels;
    all_x_embedder->update(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{
        {pair_key(p, f), nn::Linear(P, c.dim, true).ptr()}});
    all_final_layer->update(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{
        {pair_key(p, f), FinalLayer(c.dim, c.adaln_dim(), P).ptr()}});
  }
  noise_refiner = register_module("noise_refiner", torch::nn::ModuleList());
  context_refiner = register_module("context_refiner", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_refiner_layers; ++i) {
    noise_refiner->push_back(ZImageBlock(c, /*modulation=*/true));
    context_refiner->push_back(ZImageBlock(c, /*modulation=*/false));
  }
  t_embedder =
      register_module("t_embedder", TimestepEmbedder(c.frequency_embedding_size, c.t_embedder_mid_size, c.adaln_dim()));
  cap_embedder = register_module("cap_embedder", torch::nn::ModuleList());
  cap_embedder->push_back(nn::RMSNorm(c.cap_feat_dim, c.norm_eps));
  cap_embedder->push_back(nn::Linear(c.cap_feat_dim, c.dim, true));
  x_pad_token = register_parameter("x_pad_token", nn::new_parameter({1, c.dim}));
  cap_pad_token = register_parameter("cap_pad_token", nn::new_parameter({1, c.dim}));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layers; ++i) layers->push_back(ZImageBlock(c, /*modulation=*/true));
}

torch::Tensor ZImageDitImpl::embed_time(const torch::Tensor& t, at::ScalarType dtype) {
  // [cos, sin] of (t * t_scale) * MAX_PERIOD^(-i / half) over FREQUENCY_EMBEDDING_SIZE features
  // (upstream evaluates it in float32; here in float64, the float64 reference's arithmetic),
  // then the MLP in the weights' dtype.
  nn::SinusoidOptions o;
  o.max_period = config_.max_period;
  o.cos_first = true;
  o.freq_shift = 0.0;
  o.scale = config_.t_scale;
  return t_embedder(nn::timestep_sinusoid(t, config_.frequency_embedding_size, o, dtype));
}

std::vector<torch::Tensor> ZImageDitImpl::forward(const std::vector<torch::Tensor>& x, const torch::Tensor& t,
                                                  const std::vector<torch::Tensor>& cap_feats, int64_t patch_size,
                                                  int64_t f_patch_size) {
  const ZImageDitConfig& c = config_;
  const int64_t B = static_cast<int64_t>(x.size());
  TORCH_CHECK(B > 0 && cap_feats.size() == x.size() && t.dim() == 1 && t.size(0) == B, "z_image: ", B,
              " latents need as many caption tensors (got ", cap_feats.size(), ") and t of shape [", B, "], got ",
              t.sizes());
  const std::string key = pair_key(patch_size, f_patch_size);
  if (!all_x_embedder->contains(key)) {
    std::string have;
    for (const auto& k : all_x_embedder->keys()) have += (have.empty() ? "" : ", ") + k;
    throw std::invalid_argument("z_image: patch_size " + std::to_string(patch_size) + ", f_patch_size " +
                                std::to_string(f_patch_size) + " is not a registered pair (have " + have + ")");
  }
  nn::LinearImpl& x_embedder = *all_x_embedder[key]->as<nn::LinearImpl>();
  const int64_t m = c.seq_multi_of, pH = patch_size, pF = f_patch_size;

  const torch::Tensor adaln = embed_time(t, linear_at(t_embedder->mlp, 0).weight.scalar_type());
  std::vector<torch::Tensor> img, cap, img_pos, cap_pos;
  std::vector<std::array<int64_t, 4>> sizes;  // (F, H, W, tokens) per sample
  for (int64_t i = 0; i < B; ++i) {
    const torch::Tensor& xi = x[static_cast<size_t>(i)];
    const torch::Tensor& ci = cap_feats[static_cast<size_t>(i)];
    TORCH_CHECK(xi.dim() == 4 && xi.size(0) == c.in_channels && xi.size(1) % pF == 0 && xi.size(2) % pH == 0 &&
                    xi.size(3) % pH == 0,
                "z_image: latent ", i, " must be [", c.in_channels, ", F, H, W] with F divisible by ", pF,
                " and H, W by ", pH, ", got ", xi.sizes());
    TORCH_CHECK(ci.dim() == 2 && ci.size(0) > 0 && ci.size(1) == c.cap_feat_dim, "z_image: caption ", i,
                " must be [L > 0, ", c.cap_feat_dim, "], got ", ci.sizes());
    const int64_t C = xi.size(0), Ft = xi.size(1) / pF, Ht = xi.size(2) / pH, Wt = xi.size(3) / pH;
    const int64_t T = Ft * Ht * Wt, L = ci.size(0);
    sizes.push_back({xi.size(1), xi.size(2), xi.size(3), T});
    // Both sequences are padded to a multiple of SEQ_MULTI_OF with the learned pad tokens.
    const int64_t Lp = L + modulo_pad(L, m), Tpad = modulo_pad(T, m);
    // Positions: caption row j -> (1 + j, 0, 0) over the padded caption; image token ->
    // (Lp + 1 + f, h, w); image pad tokens -> (0, 0, 0).
    TORCH_CHECK(Lp + Ft < c.axes_lens[0] && Ht <= c.axes_lens[1] && Wt <= c.axes_lens[2], "z_image: sample ", i,
                " needs positions up to (", Lp + Ft, ", ", Ht - 1, ", ", Wt - 1, "), beyond axes_lens (",
                c.axes_lens[0], ", ", c.axes_lens[1], ", ", c.axes_lens[2], ")");
    cap_pos.push_back(nn::grid_positions(Lp, 1, 1, {1, 0, 0}));
    img_pos.push_back(torch::cat(
        {nn::grid_positions(Ft, Ht, Wt, {static_cast<double>(Lp + 1), 0, 0}), torch::zeros({Tpad, 3}, torch::kDouble)},
        0));
    // Patchify: token (f, h, w) row-major, features (pf, ph, pw, c) — channel last.
    const torch::Tensor tokens =
        xi.view({C, Ft, pF, Ht, pH, Wt, pH}).permute({1, 3, 5, 2, 4, 6, 0}).reshape({T, pF * pH * pH * C});
    // Inputs in the weights' dtype (bf16 under mixed precision; float32 latents and states from a cache).
    img.push_back(torch::cat({x_embedder.forward(tokens.to(x_embedder.weight.scalar_type())),
                              x_pad_token.expand({Tpad, c.dim})},
                             0));
    const torch::Tensor ce = linear_at(cap_embedder, 1).forward(cap_embedder[0]->as<nn::RMSNormImpl>()->forward(
        ci.to(linear_at(cap_embedder, 1).weight.scalar_type())));
    cap.push_back(torch::cat({ce, cap_pad_token.expand({Lp - L, c.dim})}, 0));
  }
  const at::ScalarType angle_dtype = img[0].scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const torch::Tensor adaln_x = adaln.to(img[0].scalar_type());

  // noise_refiner over the image tokens, context_refiner over the caption tokens, each batch padded
  // to its longest sample (padding masked as keys).
  auto lengths = [](const std::vector<torch::Tensor>& v) {
    std::vector<int64_t> n;
    for (const auto& s : v) n.push_back(s.size(0));
    return n;
  };
  const std::vector<int64_t> img_len = lengths(img), cap_len = lengths(cap);
  const SequenceContext img_ctx = sequence_context(img_pos, c, angle_dtype);
  torch::Tensor xb = pad_stack(img, img_ctx.keys.size(1));
  for (const auto& b : *noise_refiner) xb = b->as<ZImageBlockImpl>()->forward(xb, img_ctx, adaln_x);
  const SequenceContext cap_ctx = sequence_context(cap_pos, c, angle_dtype);
  torch::Tensor cb = pad_stack(cap, cap_ctx.keys.size(1));
  for (const auto& b : *context_refiner) cb = b->as<ZImageBlockImpl>()->forward(cb, cap_ctx, torch::Tensor());

  // One sequence per sample: [image, caption] (image first).
  std::vector<torch::Tensor> unified, unified_pos;
  for (int64_t i = 0; i < B; ++i) {
    const size_t s = static_cast<size_t>(i);
    unified.push_back(torch::cat({xb[i].narrow(0, 0, img_len[s]), cb[i].narrow(0, 0, cap_len[s])}, 0));
    unified_pos.push_back(torch::cat({img_pos[s], cap_pos[s]}, 0));
  }
  const SequenceContext ctx = sequence_context(unified_pos, c, angle_dtype);
  torch::Tensor u = pad_stack(unified, ctx.keys.size(1));
  for (const auto& b : *layers) u = b->as<ZImageBlockImpl>()->forward(u, ctx, adaln_x);
  u = all_final_layer[key]->as<FinalLayerImpl>()->forward(u, adaln_x);

  // Unpatchify each sample's image tokens (the inverse of the patchify above).
  std::vector<torch::Tensor> out;
  for (int64_t i = 0; i < B; ++i) {
    const auto& [F, H, W, T] = sizes[static_cast<size_t>(i)];
    out.push_back(u[i].narrow(0, 0, T)
                      .view({F / pF, H / pH, W / pH, pF, pH, pH, c.in_channels})
                      .permute({6, 0, 3, 1, 4, 2, 5})
                      .reshape({c.in_channels, F, H, W}));
  }
  return out;
}

}  // namespace zeroshard::models::z_image
