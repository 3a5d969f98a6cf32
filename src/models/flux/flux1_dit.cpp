#include "models/flux/flux1_dit.h"

#include "nn/activations.h"

#include <numeric>
#include <stdexcept>

namespace zeroshard::models::flux {

namespace {

constexpr double kEps = 1e-6;           // every LayerNorm and QK RMSNorm of FLUX.1
constexpr int64_t kTimeChannels = 256;  // sinusoid width of time_in / guidance_in

}  // namespace

Flux1Config Flux1Config::from_json(const nlohmann::json& j, const std::string& source) {
  Flux1Config c;
  c.in_channels = require(j, "in_channels", source).get<int64_t>();
  c.out_channels = require(j, "out_channels", source).get<int64_t>();
  c.vec_in_dim = require(j, "vec_in_dim", source).get<int64_t>();
  c.context_in_dim = require(j, "context_in_dim", source).get<int64_t>();
  c.hidden_size = require(j, "hidden_size", source).get<int64_t>();
  c.mlp_ratio = require(j, "mlp_ratio", source).get<double>();
  c.num_heads = require(j, "num_heads", source).get<int64_t>();
  c.depth = require(j, "depth", source).get<int64_t>();
  c.depth_single_blocks = require(j, "depth_single_blocks", source).get<int64_t>();
  c.axes_dim = require(j, "axes_dim", source).get<std::vector<int64_t>>();
  c.theta = require(j, "theta", source).get<double>();
  c.qkv_bias = require(j, "qkv_bias", source).get<bool>();
  c.guidance_embed = require(j, "guidance_embed", source).get<bool>();
  c.validate(source);
  return c;
}

void Flux1Config::validate(const std::string& source) const {
  if (num_heads <= 0 || hidden_size % num_heads != 0) {
    throw std::invalid_argument(source + ": hidden_size " + std::to_string(hidden_size) +
                                " is not divisible by num_heads " + std::to_string(num_heads));
  }
  const int64_t axes = std::accumulate(axes_dim.begin(), axes_dim.end(), int64_t{0});
  if (axes != head_dim()) {
    throw std::invalid_argument(source + ": axes_dim sums to " + std::to_string(axes) + ", the head dim is " +
                                std::to_string(head_dim()) + " (hidden_size / num_heads)");
  }
}

MLPEmbedderImpl::MLPEmbedderImpl(int64_t in_dim, int64_t hidden) {
  in_layer = register_module("in_layer", nn::Linear(in_dim, hidden, true));
  out_layer = register_module("out_layer", nn::Linear(hidden, hidden, true));
}

torch::Tensor MLPEmbedderImpl::forward(const torch::Tensor& x) { return out_layer(torch::silu(in_layer(x))); }

Flux1ModulationImpl::Flux1ModulationImpl(int64_t dim, int64_t sets) : sets_(sets) {
  lin = register_module("lin", nn::Linear(dim, 3 * sets * dim, true));
}

std::vector<torch::Tensor> Flux1ModulationImpl::forward(const torch::Tensor& vec) {
  // (shift, scale, gate) per set, in this order along the features.
  return lin(torch::silu(vec)).unsqueeze(1).chunk(3 * sets_, -1);
}

Flux1SelfAttentionImpl::Flux1SelfAttentionImpl(int64_t dim, int64_t heads, bool qkv_bias) {
  qkv = register_module("qkv", nn::Linear(dim, 3 * dim, qkv_bias));
  norm = register_module("norm", std::make_shared<torch::nn::Module>());
  query_norm = norm->register_module("query_norm", HeadRMSNorm(dim / heads, kEps, "scale"));
  key_norm = norm->register_module("key_norm", HeadRMSNorm(dim / heads, kEps, "scale"));
  proj = register_module("proj", nn::Linear(dim, dim, true));
}

Flux1MlpImpl::Flux1MlpImpl(int64_t dim, int64_t hidden) {
  fc1 = register_module("0", nn::Linear(dim, hidden, true));
  fc2 = register_module("2", nn::Linear(hidden, dim, true));
}

torch::Tensor Flux1MlpImpl::forward(const torch::Tensor& x) { return fc2(nn::gelu_tanh(fc1(x))); }

namespace {

// qkv [B, L, 3 * H * Dh] laid out (q | k | v), each head-major -> q, k, v [B, H, L, Dh], q and k
// RMS-normed per head.
std::vector<at::Tensor> heads_of(const at::Tensor& qkv, int64_t heads, HeadRMSNorm& qn, HeadRMSNorm& kn) {
  auto parts = qkv.chunk(3, -1);
  return {qn(split_heads(parts[0], heads)), kn(split_heads(parts[1], heads)), split_heads(parts[2], heads)};
}

}  // namespace

Flux1DoubleBlockImpl::Flux1DoubleBlockImpl(const Flux1Config& c) : heads_(c.num_heads) {
  const int64_t d = c.hidden_size;
  img_mod = register_module("img_mod", Flux1Modulation(d, 2));
  img_attn = register_module("img_attn", Flux1SelfAttention(d, c.num_heads, c.qkv_bias));
  img_mlp = register_module("img_mlp", Flux1Mlp(d, c.mlp_hidden()));
  txt_mod = register_module("txt_mod", Flux1Modulation(d, 2));
  txt_attn = register_module("txt_attn", Flux1SelfAttention(d, c.num_heads, c.qkv_bias));
  txt_mlp = register_module("txt_mlp", Flux1Mlp(d, c.mlp_hidden()));
}

std::vector<torch::Tensor> Flux1DoubleBlockImpl::forward(const torch::Tensor& img, const torch::Tensor& txt,
                                                         const torch::Tensor& vec, const nn::RopeAngles& pe) {
  return call_hooked({img, txt, vec, pe.cos, pe.sin}, [this](const std::vector<at::Tensor>& in) {
    const at::Tensor &x_img = in[0], &x_txt = in[1], &v = in[2];
    const nn::RopeAngles angles{in[3], in[4]};
    const auto mi = img_mod(v), mt = txt_mod(v);  // (shift, scale, gate) x (attention, MLP)
    const auto qkv_i = heads_of(img_attn->qkv(modulate(x_img, mi[0], mi[1], kEps)), heads_, img_attn->query_norm,
                                img_attn->key_norm);
    const auto qkv_t = heads_of(txt_attn->qkv(modulate(x_txt, mt[0], mt[1], kEps)), heads_, txt_attn->query_norm,
                                txt_attn->key_norm);
    // Joint sequence: text first, then image (the order of the RoPE ids too).
    const at::Tensor attn = rope_attention(at::cat({qkv_t[0], qkv_i[0]}, 2), at::cat({qkv_t[1], qkv_i[1]}, 2),
                                           at::cat({qkv_t[2], qkv_i[2]}, 2), angles);
    const int64_t lt = x_txt.size(1);
    at::Tensor oi = x_img + mi[2] * img_attn->proj(attn.narrow(1, lt, attn.size(1) - lt));
    oi = oi + mi[5] * img_mlp(modulate(oi, mi[3], mi[4], kEps));
    at::Tensor ot = x_txt + mt[2] * txt_attn->proj(attn.narrow(1, 0, lt));
    ot = ot + mt[5] * txt_mlp(modulate(ot, mt[3], mt[4], kEps));
    return std::vector<at::Tensor>{oi, ot};
  });
}

Flux1SingleBlockImpl::Flux1SingleBlockImpl(const Flux1Config& c)
    : hidden_(c.hidden_size), mlp_hidden_(c.mlp_hidden()), heads_(c.num_heads) {
  linear1 = register_module("linear1", nn::Linear(hidden_, 3 * hidden_ + mlp_hidden_, true));
  linear2 = register_module("linear2", nn::Linear(hidden_ + mlp_hidden_, hidden_, true));
  norm = register_module("norm", std::make_shared<torch::nn::Module>());
  query_norm = norm->register_module("query_norm", HeadRMSNorm(c.head_dim(), kEps, "scale"));
  key_norm = norm->register_module("key_norm", HeadRMSNorm(c.head_dim(), kEps, "scale"));
  modulation = register_module("modulation", Flux1Modulation(hidden_, 1));
}

torch::Tensor Flux1SingleBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& vec,
                                            const nn::RopeAngles& pe) {
  return call_hooked({x, vec, pe.cos, pe.sin}, [this](const std::vector<at::Tensor>& in) {
    const at::Tensor &h = in[0], &v = in[1];
    const auto m = modulation(v);  // (shift, scale, gate)
    const at::Tensor proj = linear1(modulate(h, m[0], m[1], kEps));
    const auto qkv = heads_of(proj.narrow(-1, 0, 3 * hidden_), heads_, query_norm, key_norm);
    const at::Tensor attn = rope_attention(qkv[0], qkv[1], qkv[2], nn::RopeAngles{in[2], in[3]});
    const at::Tensor mlp = nn::gelu_tanh(proj.narrow(-1, 3 * hidden_, mlp_hidden_));
    return std::vector<at::Tensor>{h + m[2] * linear2(at::cat({attn, mlp}, -1))};
  })[0];
}

Flux1LastLayerImpl::Flux1LastLayerImpl(int64_t hidden, int64_t out_channels) {
  auto holder = register_module("adaLN_modulation", std::make_shared<torch::nn::Module>());
  ada = holder->register_module("1", nn::Linear(hidden, 2 * hidden, true));  // index 0 is the SiLU
  linear = register_module("linear", nn::Linear(hidden, out_channels, true));
}

torch::Tensor Flux1LastLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& vec) {
  const auto ss = ada(torch::silu(vec)).unsqueeze(1).chunk(2, -1);  // (shift, scale)
  return linear(modulate(x, ss[0], ss[1], kEps));
}

Flux1DiTImpl::Flux1DiTImpl(const Flux1Config& c) : config_(c) {
  c.validate("Flux1DiT");
  const int64_t d = c.hidden_size;
  img_in = register_module("img_in", nn::Linear(c.in_channels, d, true));
  time_in = register_module("time_in", MLPEmbedder(kTimeChannels, d));
  vector_in = register_module("vector_in", MLPEmbedder(c.vec_in_dim, d));
  if (c.guidance_embed) guidance_in = register_module("guidance_in", MLPEmbedder(kTimeChannels, d));
  txt_in = register_module("txt_in", nn::Linear(c.context_in_dim, d, true));
  double_blocks = register_module("double_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.depth; ++i) double_blocks->push_back(Flux1DoubleBlock(c));
  single_blocks = register_module("single_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.depth_single_blocks; ++i) single_blocks->push_back(Flux1SingleBlock(c));
  final_layer = register_module("final_layer", Flux1LastLayer(d, c.out_channels));
}

torch::Tensor Flux1DiTImpl::forward(const torch::Tensor& img, const torch::Tensor& img_ids, const torch::Tensor& txt,
                                    const torch::Tensor& txt_ids, const torch::Tensor& timesteps,
                                    const torch::Tensor& y, const torch::Tensor& guidance) {
  TORCH_CHECK(img.dim() == 3 && txt.dim() == 3, "Flux1DiT: img and txt must be [B, L, C], got ", img.sizes(), ", ",
              txt.sizes());
  const int64_t axes = static_cast<int64_t>(config_.axes_dim.size());
  TORCH_CHECK(img_ids.dim() == 3 && txt_ids.dim() == 3 && img_ids.size(-1) == axes && txt_ids.size(-1) == axes,
              "Flux1DiT: img_ids / txt_ids must be [B, L, ", axes, "] (one column per RoPE axis), got ",
              img_ids.sizes(), ", ", txt_ids.sizes());
  const auto dt = img.scalar_type();
  at::Tensor x = img_in(img);
  // vec = time_in(emb(1000 t)) [+ guidance_in(emb(1000 g))] + vector_in(y); emb: 256 channels,
  // cos half first, float32 frequency table (see timestep_embedding_f32_freqs).
  at::Tensor vec = time_in(timestep_embedding_f32_freqs(timesteps, kTimeChannels, 1000.0, true, dt));
  if (config_.guidance_embed) {
    TORCH_CHECK(guidance.defined(), "Flux1DiT: guidance_embed is set (a dev-like model): pass a guidance [B]");
    vec = vec + guidance_in(timestep_embedding_f32_freqs(guidance, kTimeChannels, 1000.0, true, dt));
  }
  vec = vec + vector_in(y);
  at::Tensor ctx = txt_in(txt);

  // RoPE over the joint (text, image) ids: axis k rotates axes_dim[k] features by id k with
  // theta^(-2j/axes_dim[k]), the axes' pairs concatenated in id order; interleaved pairs.
  const at::Tensor ids = at::cat({txt_ids, img_ids}, 1);
  const int64_t B = ids.size(0), L = ids.size(1);
  // Tables in float32 for reduced-precision activations (float64 stays float64).
  const auto table_dt = dt == at::kDouble ? at::kDouble : at::kFloat;
  nn::RopeAngles pe = nn::rope_angles(ids.reshape({B * L, axes}), config_.axes_dim, config_.theta, table_dt);
  pe.cos = pe.cos.view({B, L, -1});
  pe.sin = pe.sin.view({B, L, -1});

  for (const auto& m : *double_blocks) {
    auto out = m->as<Flux1DoubleBlockImpl>()->forward(x, ctx, vec, pe);
    x = out[0];
    ctx = out[1];
  }
  const int64_t lt = ctx.size(1);
  at::Tensor h = at::cat({ctx, x}, 1);
  for (const auto& m : *single_blocks) h = m->as<Flux1SingleBlockImpl>()->forward(h, vec, pe);
  return final_layer(h.narrow(1, lt, h.size(1) - lt), vec);
}

int64_t flux1_param_count(const Flux1Config& c) {
  const int64_t d = c.hidden_size, hd = c.head_dim(), m = c.mlp_hidden();
  auto lin = [](int64_t in, int64_t out, bool bias) { return in * out + (bias ? out : 0); };
  auto embedder = [&](int64_t in) { return lin(in, d, true) + lin(d, d, true); };
  int64_t n = lin(c.in_channels, d, true) + embedder(kTimeChannels) + embedder(c.vec_in_dim) +
              (c.guidance_embed ? embedder(kTimeChannels) : 0) + lin(c.context_in_dim, d, true);
  const int64_t stream = lin(d, 6 * d, true) + lin(d, 3 * d, c.qkv_bias) + 2 * hd + lin(d, d, true) +
                         lin(d, m, true) + lin(m, d, true);
  n += c.depth * 2 * stream;
  n += c.depth_single_blocks * (lin(d, 3 * d + m, true) + lin(d + m, d, true) + 2 * hd + lin(d, 3 * d, true));
  n += lin(d, 2 * d, true) + lin(d, c.out_channels, true);
  return n;
}

}  // namespace zeroshard::models::flux
