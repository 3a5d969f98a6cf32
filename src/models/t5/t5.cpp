#include "models/t5/t5.h"

#include "io/safetensors.h"
#include "nn/activations.h"
#include "nn/init.h"
#include "nn/matmul.h"
#include "nn/rms_norm.h"
#include "nn/norms.h"
#include "util/text.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace zeroshard::models::t5 {

// --- config -----------------------------------------------------------------------------------

void T5Config::validate() const {
  auto fail = [](const std::string& m) { throw std::invalid_argument("T5 config: " + m); };
  if (vocab_size < 1 || dim < 1 || dim_ffn < 1 || num_layers < 1) {
    fail("vocab_size, dim, dim_ffn and the layer count must be positive");
  }
  if (num_heads < 1 || dim_attn % num_heads != 0) {
    fail("dim_attn " + std::to_string(dim_attn) + " is not a multiple of num_heads " + std::to_string(num_heads));
  }
  if (num_buckets < 4 || num_buckets % 2 != 0) {
    fail("num_buckets " + std::to_string(num_buckets) + " must be even and >= 4 (half per direction)");
  }
  if (max_distance <= num_buckets / 4) {
    fail("max_distance " + std::to_string(max_distance) + " must exceed the exact range num_buckets / 4 = " +
         std::to_string(num_buckets / 4));
  }
}

int64_t T5Config::num_params() const {
  nn::DeferredInit deferred;
  T5Encoder model(*this);
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  return n;
}

namespace {
const nlohmann::json& need(const nlohmann::json& j, const std::string& key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) throw std::invalid_argument(source + ": no field '" + key + "'");
  return j[key];
}
}  // namespace

T5Config T5Config::from_wan_json(const nlohmann::json& j, const std::string& source) {
  T5Config c;
  c.vocab_size = need(j, "vocab_size", source).get<int64_t>();
  c.dim = need(j, "dim", source).get<int64_t>();
  c.dim_attn = need(j, "dim_attn", source).get<int64_t>();
  c.dim_ffn = need(j, "dim_ffn", source).get<int64_t>();
  c.num_heads = need(j, "num_heads", source).get<int64_t>();
  c.num_layers = need(j, "encoder_layers", source).get<int64_t>();
  c.num_buckets = need(j, "num_buckets", source).get<int64_t>();
  c.shared_pos = need(j, "shared_pos", source).get<bool>();
  // Wan's T5RelativeEmbedding has max_dist = 128 and no config key for it.
  c.max_distance = 128;
  if (j.contains("_hf_config") && j["_hf_config"].contains("relative_attention_max_distance")) {
    c.max_distance = j["_hf_config"]["relative_attention_max_distance"].get<int64_t>();
  }
  c.validate();
  return c;
}

T5Config T5Config::from_hf_json(const nlohmann::json& j, const std::string& source) {
  T5Config c;
  c.vocab_size = need(j, "vocab_size", source).get<int64_t>();
  c.dim = need(j, "d_model", source).get<int64_t>();
  c.num_heads = need(j, "num_heads", source).get<int64_t>();
  c.dim_attn = need(j, "d_kv", source).get<int64_t>() * c.num_heads;
  c.dim_ffn = need(j, "d_ff", source).get<int64_t>();
  c.num_layers = need(j, "num_layers", source).get<int64_t>();
  c.num_buckets = j.value("relative_attention_num_buckets", int64_t{32});
  c.max_distance = j.value("relative_attention_max_distance", int64_t{128});
  c.eps = j.value("layer_norm_epsilon", 1e-6);
  const std::string ffn = j.value("feed_forward_proj", std::string("gated-gelu"));
  if (ffn != "gated-gelu") {
    throw std::invalid_argument(source + ": feed_forward_proj '" + ffn +
                                "' is not supported (T5 v1.1 and umT5 use \"gated-gelu\")");
  }
  const std::string type = j.value("model_type", std::string("t5"));
  if (type != "t5" && type != "umt5") {
    throw std::invalid_argument(source + ": model_type '" + type + "' is neither \"t5\" nor \"umt5\"");
  }
  c.shared_pos = type == "t5";
  c.validate();
  return c;
}

T5Config umt5_xxl() {
  T5Config c;  // wan/modules/t5.py umt5_xxl(): the defaults above
  return c;
}

T5Config t5_v1_1_xxl() {
  T5Config c;  // google/t5-v1_1-xxl config.json (FLUX.1-dev text_encoder_2/config.json)
  c.vocab_size = 32128;
  c.shared_pos = true;
  return c;
}

// --- layers -----------------------------------------------------------------------------------

T5LayerNormImpl::T5LayerNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", nn::new_parameter({dim}));
  if (!nn::DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    weight.fill_(1.0);
  }
}

torch::Tensor T5LayerNormImpl::forward(const torch::Tensor& x) {
  // T5's norm: no mean subtraction, no bias, eps inside the root.
  return nn::rms_norm(x, weight, eps_);
}

torch::Tensor relative_position_buckets(int64_t lq, int64_t lk, int64_t num_buckets, int64_t max_distance) {
  const at::Tensor rel = torch::arange(lk, torch::kLong).unsqueeze(0) - torch::arange(lq, torch::kLong).unsqueeze(1);
  const int64_t half = num_buckets / 2, exact = half / 2;
  // Bidirectional: j > i goes to the upper half.
  const at::Tensor direction = rel.gt(0).to(torch::kLong) * half;
  const at::Tensor d = rel.abs();
  // Evaluated in float32 as upstream does (wan/modules/t5.py and transformers both take
  // log(d.float() / exact) / log(max_distance / exact) * (half - exact), truncated to long): the
  // float32 rounding decides the bucket at the edges, so float64 here could differ.
  const at::Tensor df = d.to(torch::kFloat).clamp_min(1.0f);
  const at::Tensor large =
      (torch::log(df / static_cast<float>(exact)) / std::log(static_cast<double>(max_distance) / exact) *
       static_cast<double>(half - exact))
          .to(torch::kLong) +
      exact;
  return direction + torch::where(d.lt(exact), d, large.clamp_max(half - 1));
}

T5RelativeEmbeddingImpl::T5RelativeEmbeddingImpl(int64_t num_buckets, int64_t num_heads, int64_t max_distance)
    : num_buckets_(num_buckets), max_distance_(max_distance) {
  embedding = register_module("embedding", nn::Embedding(num_buckets, num_heads));
}

torch::Tensor T5RelativeEmbeddingImpl::forward(int64_t length) {
  const at::Tensor buckets = relative_position_buckets(length, length, num_buckets_, max_distance_);
  return embedding(buckets).permute({2, 0, 1}).unsqueeze(0);  // [1, H, L, L]
}

T5AttentionImpl::T5AttentionImpl(int64_t dim, int64_t dim_attn, int64_t num_heads) : num_heads_(num_heads) {
  q = register_module("q", nn::Linear(dim, dim_attn));
  k = register_module("k", nn::Linear(dim, dim_attn));
  v = register_module("v", nn::Linear(dim, dim_attn));
  o = register_module("o", nn::Linear(dim_attn, dim));
}

torch::Tensor T5AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& key_mask, const torch::Tensor& bias) {
  const int64_t B = x.size(0), L = x.size(1), H = num_heads_;
  auto heads = [&](const at::Tensor& t) { return t.view({B, L, H, -1}).transpose(1, 2); };  // [B, H, L, d]
  const at::Tensor qh = heads(q(x)), kh = heads(k(x)), vh = heads(v(x));
  // T5 folds 1/sqrt(d) into q's init: no scaling here.
  const at::ScalarType dt = nn::norm_dtype(x);
  at::Tensor logits = nn::matmul(qh, kh.transpose(-2, -1)).to(dt);
  // The additive bias: the position bias, with masked keys replaced by the lowest finite value
  // (upstream: masked_fill(mask == 0, finfo.min) on the bias, then added to q.k).
  at::Tensor b = bias.to(dt).expand({B, H, L, L});
  if (key_mask.defined()) {
    const double lowest = dt == at::kDouble ? std::numeric_limits<double>::lowest() : std::numeric_limits<float>::lowest();
    b = b.masked_fill(key_mask.eq(0).view({B, 1, 1, L}), lowest);
  }
  // Softmax in float32 for reduced precision (float64 stays float64), as upstream's attn.float().
  const at::Tensor probs = at::softmax(logits + b, -1).to(x.scalar_type());
  const at::Tensor out = nn::matmul(probs, vh).transpose(1, 2).reshape({B, L, -1});
  return o(out);
}

T5FeedForwardImpl::T5FeedForwardImpl(int64_t dim, int64_t dim_ffn) {
  // "gate" is a Sequential(Linear, GELU) upstream: the linear is "gate.0".
  auto gate = register_module("gate", std::make_shared<torch::nn::Module>("Sequential"));
  gate0 = gate->register_module("0", nn::Linear(dim, dim_ffn));
  fc1 = register_module("fc1", nn::Linear(dim, dim_ffn));
  fc2 = register_module("fc2", nn::Linear(dim_ffn, dim));
}

torch::Tensor T5FeedForwardImpl::forward(const torch::Tensor& x) {
  // gate.0 is the activated branch, fc1 the linear one (HF: wi_0 activated, wi_1 linear).
  return fc2(fc1(x) * nn::gelu_tanh(gate0(x)));
}

T5BlockImpl::T5BlockImpl(const T5Config& c) {
  norm1 = register_module("norm1", T5LayerNorm(c.dim, c.eps));
  attn = register_module("attn", T5Attention(c.dim, c.dim_attn, c.num_heads));
  norm2 = register_module("norm2", T5LayerNorm(c.dim, c.eps));
  ffn = register_module("ffn", T5FeedForward(c.dim, c.dim_ffn));
  if (!c.shared_pos) pos_embedding = register_module("pos_embedding", T5RelativeEmbedding(c.num_buckets, c.num_heads, c.max_distance));
}

torch::Tensor T5BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& key_mask, const torch::Tensor& shared_bias) {
  // The mask and the shared bias cross the unit boundary as tensors (when present).
  std::vector<at::Tensor> inputs = {x};
  const bool has_mask = key_mask.defined(), has_bias = shared_bias.defined();
  if (has_mask) inputs.push_back(key_mask);
  if (has_bias) inputs.push_back(shared_bias);
  if (!has_bias && !pos_embedding) {
    throw std::invalid_argument("T5 block: built with shared_pos but called without the shared position bias");
  }
  return call_hooked(inputs, [this, has_mask, has_bias](const std::vector<at::Tensor>& in) {
    const at::Tensor& h = in[0];
    const at::Tensor mask = has_mask ? in[1] : at::Tensor();
    const at::Tensor bias = has_bias ? in[has_mask ? 2 : 1] : pos_embedding(h.size(1));
    at::Tensor y = h + attn(norm1(h), mask, bias);
    y = y + ffn(norm2(y));
    return std::vector<at::Tensor>{y};
  })[0];
}

T5EncoderImpl::T5EncoderImpl(const T5Config& c) : config_(c) {
  c.validate();
  token_embedding = register_module("token_embedding", nn::Embedding(c.vocab_size, c.dim));
  if (c.shared_pos) pos_embedding = register_module("pos_embedding", T5RelativeEmbedding(c.num_buckets, c.num_heads, c.max_distance));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) blocks->push_back(T5Block(c));
  norm = register_module("norm", T5LayerNorm(c.dim, c.eps));
}

torch::Tensor T5EncoderImpl::forward(const torch::Tensor& ids, const torch::Tensor& mask) {
  if (ids.dim() != 2) throw std::invalid_argument("T5 encoder: ids must be [batch, length], got " + io::shape_text(ids.sizes().vec()));
  if (mask.defined() && mask.sizes() != ids.sizes()) {
    throw std::invalid_argument("T5 encoder: mask " + io::shape_text(mask.sizes().vec()) + " does not match ids " +
                                io::shape_text(ids.sizes().vec()));
  }
  std::vector<at::Tensor> inputs = {ids};
  if (mask.defined()) inputs.push_back(mask);
  return call_hooked(inputs, [this](const std::vector<at::Tensor>& in) {
    const at::Tensor m = in.size() > 1 ? in[1] : at::Tensor();
    at::Tensor x = token_embedding(in[0]);  // unscaled (dropout: eval)
    const at::Tensor shared = pos_embedding ? pos_embedding(x.size(1)) : at::Tensor();
    for (const auto& b : *blocks) x = b->as<T5BlockImpl>()->forward(x, m, shared);
    return std::vector<at::Tensor>{norm(x)};
  })[0];
}

void T5EncoderImpl::reset_parameters(uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters(/*recurse=*/true)) t5_init(config_, seed, p.key(), p.value());
}

void t5_init(const T5Config& c, uint64_t seed, const std::string& name, at::Tensor& param) {
  using util::ends_with;
  auto normal = [&](double std) { nn::init_normal(param, seed, name, std); };
  const double dim = static_cast<double>(c.dim), dim_attn = static_cast<double>(c.dim_attn);
  if (ends_with(name, "norm1.weight") || ends_with(name, "norm2.weight") || name == "norm.weight") {
    nn::init_constant(param, 1.0);
  } else if (name == "token_embedding.weight") {
    normal(1.0);
  } else if (ends_with(name, "attn.q.weight")) {
    normal(1.0 / std::sqrt(dim * dim_attn));
  } else if (ends_with(name, "attn.k.weight") || ends_with(name, "attn.v.weight") ||
             ends_with(name, "ffn.gate.0.weight") || ends_with(name, "ffn.fc1.weight")) {
    normal(1.0 / std::sqrt(dim));
  } else if (ends_with(name, "attn.o.weight")) {
    normal(1.0 / std::sqrt(static_cast<double>(c.num_heads) * dim_attn));
  } else if (ends_with(name, "ffn.fc2.weight")) {
    normal(1.0 / std::sqrt(static_cast<double>(c.dim_ffn)));
  } else if (ends_with(name, "pos_embedding.embedding.weight")) {
    normal(1.0 / std::sqrt(2.0 * static_cast<double>(c.num_buckets * c.num_heads)));
  } else {
    throw std::invalid_argument("t5_init: no rule for parameter '" + name + "'");
  }
}

nn::NameMap hf_t5_name_map(bool shared_pos) {
  nn::NameMap m;
  // The position tables first: their transformers names would otherwise match the attention rule.
  if (shared_pos) {
    m.rename("pos_embedding.embedding.weight", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
  } else {
    m.rename("blocks.*.pos_embedding.embedding.weight",
             "encoder.block.*.layer.0.SelfAttention.relative_attention_bias.weight");
  }
  m.rename("token_embedding.weight", "shared.weight");
  m.rename("blocks.*.norm1.weight", "encoder.block.*.layer.0.layer_norm.weight");
  m.rename("blocks.*.attn.*.weight", "encoder.block.*.layer.0.SelfAttention.*.weight");
  m.rename("blocks.*.norm2.weight", "encoder.block.*.layer.1.layer_norm.weight");
  m.rename("blocks.*.ffn.gate.0.weight", "encoder.block.*.layer.1.DenseReluDense.wi_0.weight");
  m.rename("blocks.*.ffn.fc1.weight", "encoder.block.*.layer.1.DenseReluDense.wi_1.weight");
  m.rename("blocks.*.ffn.fc2.weight", "encoder.block.*.layer.1.DenseReluDense.wo.weight");
  m.rename("norm.weight", "encoder.final_layer_norm.weight");
  return m;
}

// --- Wan's trim-then-pad ------------------------------------------------------------------------

namespace {
std::vector<int64_t> lengths_of(const torch::Tensor& states, const torch::Tensor& mask) {
  if (states.dim() != 3 || mask.dim() != 2 || mask.size(0) != states.size(0) || mask.size(1) != states.size(1)) {
    throw std::invalid_argument("trim: states [B, L, D] " + io::shape_text(states.sizes().vec()) +
                                " and mask [B, L] " + io::shape_text(mask.sizes().vec()) + " do not fit");
  }
  const at::Tensor n = mask.gt(0).sum(1).to(torch::kLong).contiguous();
  return std::vector<int64_t>(n.data_ptr<int64_t>(), n.data_ptr<int64_t>() + n.numel());
}
}  // namespace

std::vector<torch::Tensor> trim_to_lengths(const torch::Tensor& states, const torch::Tensor& mask) {
  const std::vector<int64_t> n = lengths_of(states, mask);
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < n.size(); ++i) out.push_back(states[static_cast<int64_t>(i)].narrow(0, 0, n[i]));
  return out;
}

torch::Tensor trim_and_zero_pad(const torch::Tensor& states, const torch::Tensor& mask, int64_t text_len) {
  const std::vector<int64_t> n = lengths_of(states, mask);
  std::vector<torch::Tensor> rows;
  for (size_t i = 0; i < n.size(); ++i) {
    if (n[i] > text_len) {
      throw std::invalid_argument("trim_and_zero_pad: prompt " + std::to_string(i) + " has " + std::to_string(n[i]) +
                                  " tokens, more than text_len " + std::to_string(text_len));
    }
    const at::Tensor u = states[static_cast<int64_t>(i)].narrow(0, 0, n[i]);
    rows.push_back(at::cat({u, u.new_zeros({text_len - n[i], states.size(2)})}, 0));
  }
  return at::stack(rows, 0);
}

}  // namespace zeroshard::models::t5
