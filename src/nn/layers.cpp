#include "nn/layers.h"

#include "nn/activations.h"
#include "nn/attention.h"
#include "nn/init.h"
#include "nn/matmul.h"
#include "nn/rms_norm.h"
#include "util/text.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace zeroshard::nn {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool bias) {
  weight = register_parameter("weight", new_parameter({out_features, in_features}));
  if (bias) this->bias = register_parameter("bias", new_parameter({out_features}));
  if (!DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    const double bound = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(1, in_features)));
    weight.uniform_(-bound, bound);
    if (bias) this->bias.uniform_(-bound, bound);
  }
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = nn::linear(x, weight, bias);
  if (lora_a.defined()) y = y + nn::linear(nn::linear(x, lora_a), lora_b) * lora_scale;
  return y;
}

void LinearImpl::add_lora(int64_t rank, double alpha) {
  TORCH_CHECK(!lora_a.defined(), "Linear already has a LoRA adapter");
  TORCH_CHECK(rank > 0, "LoRA rank must be > 0, got ", rank);
  lora_a = register_parameter("lora_a", new_parameter({rank, weight.size(1)}));
  lora_b = register_parameter("lora_b", new_parameter({weight.size(0), rank}));
  lora_scale = alpha / static_cast<double>(rank);
  if (!DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    lora_a.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(weight.size(1))));
    lora_b.zero_();
  }
}

std::vector<std::string> apply_lora(torch::nn::Module& root, const LoraOptions& options) {
  std::vector<std::string> adapted, linears;
  std::vector<bool> target_used(options.targets.size(), false);
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    auto* linear = dynamic_cast<LinearImpl*>(item.value().get());
    if (linear == nullptr) continue;
    const std::string& name = item.key();
    const std::string last = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
    linears.push_back(last);
    for (size_t t = 0; t < options.targets.size(); ++t) {
      // A target without a dot names the last component ("wq"); one with dots names the last
      // components ("ffn.0": a Linear registered as "0" inside "ffn").
      const std::string& target = options.targets[t];
      const bool matches = target.find('.') == std::string::npos
                               ? last == target
                               : (name == target || util::ends_with(name, "." + target));
      if (!matches) continue;
      target_used[t] = true;
      linear->add_lora(options.rank, options.alpha);
      adapted.push_back(name);
    }
  }
  for (size_t t = 0; t < options.targets.size(); ++t) {
    if (target_used[t]) continue;
    std::sort(linears.begin(), linears.end());
    linears.erase(std::unique(linears.begin(), linears.end()), linears.end());
    std::string names;
    for (const auto& l : linears) names += (names.empty() ? "" : ", ") + l;
    throw std::invalid_argument("lora.targets: '" + options.targets[t] + "' names no Linear of the model; it has: " +
                                names);
  }
  for (auto& p : root.named_parameters(/*recurse=*/true)) p.value().set_requires_grad(is_lora_parameter(p.key()));
  return adapted;
}

using util::ends_with;

bool is_lora_parameter(const std::string& name) { return ends_with(name, ".lora_a") || ends_with(name, ".lora_b"); }

double active_lora_parameters(const torch::nn::Module& model, int64_t top_k, int64_t n_experts) {
  double adapters = 0.0;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    if (!is_lora_parameter(p.key())) continue;
    const bool expert = p.key().find(".experts.") != std::string::npos;
    adapters += static_cast<double>(p.value().numel()) *
                (expert ? static_cast<double>(top_k) / static_cast<double>(n_experts) : 1.0);
  }
  return adapters;
}

void lora_init(uint64_t seed, const std::string& name, at::Tensor& param) {
  if (ends_with(name, ".lora_b")) {
    init_constant(param, 0.0);
  } else {
    init_normal(param, seed, name, 1.0 / std::sqrt(static_cast<double>(param.size(1))));
  }
}

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t hidden) {
  w1 = register_module("w1", Linear(dim, hidden));
  w2 = register_module("w2", Linear(hidden, dim));
  w3 = register_module("w3", Linear(dim, hidden));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) { return w2(swiglu(w1(x), w3(x))); }

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t dim) {
  weight = register_parameter("weight", new_parameter({num_embeddings, dim}));
  if (!DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    weight.normal_();
  }
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) {
  return torch::embedding(weight, ids, /*padding_idx=*/-1, /*scale_grad_by_freq=*/false, sparse_grad);
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", new_parameter({dim}));
  if (!DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    weight.fill_(1.0);
  }
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  return rms_norm(x, weight, eps_);  // nn/rms_norm.h
}

RopeTables RopeTables::make(int64_t max_seq_len, int64_t head_dim, double theta) {
  TORCH_CHECK(head_dim % 2 == 0, "RoPE needs an even head_dim, got ", head_dim);
  auto j = torch::arange(0, head_dim / 2, torch::kFloat);
  auto inv_freq = 1.0 / torch::pow(torch::tensor(theta, torch::kFloat), 2.0 * j / static_cast<double>(head_dim));
  auto t = torch::arange(0, max_seq_len, torch::kFloat);
  auto angles = torch::outer(t, inv_freq);
  RopeTables r;
  r.cos = torch::cat({angles.cos(), angles.cos()}, -1);
  r.sin = torch::cat({angles.sin(), angles.sin()}, -1);
  return r;
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope, int64_t offset) {
  const int64_t T = x.size(2), D = x.size(3);
  TORCH_CHECK(offset + T <= rope.cos.size(0), "sequence length ", offset + T, " exceeds the RoPE table (max_seq_len ",
              rope.cos.size(0), ")");
  auto cos = rope.cos.narrow(0, offset, T).to(x.scalar_type());
  auto sin = rope.sin.narrow(0, offset, T).to(x.scalar_type());
  auto x1 = x.narrow(-1, 0, D / 2), x2 = x.narrow(-1, D / 2, D / 2);
  auto rotated = torch::cat({-x2, x1}, -1);
  return x * cos + rotated * sin;
}

torch::Tensor full_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  if (k.size(2) > kPlainAttentionMaxKeys) return nn::attention(q, k, v);
  auto scores = nn::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  auto probs = torch::softmax(scores.to(torch::kFloat), -1).to(q.scalar_type());
  return nn::matmul(probs, v);
}

torch::Tensor apply_rope_axes(const torch::Tensor& x, const std::vector<torch::Tensor>& positions, double theta) {
  const int64_t D = x.size(3), axes = static_cast<int64_t>(positions.size()), part = D / axes;
  TORCH_CHECK(part * axes == D && part % 2 == 0, "rotary positions over ", axes, " axes need head_dim divisible by ",
              2 * axes, ", got ", D);
  std::vector<torch::Tensor> parts;
  for (int64_t a = 0; a < axes; ++a) {
    const torch::Tensor u = x.narrow(-1, a * part, part);
    auto j = torch::arange(0, part / 2, torch::kFloat);
    auto inv_freq = 1.0 / torch::pow(torch::tensor(theta, torch::kFloat), 2.0 * j / static_cast<double>(part));
    auto angles = torch::outer(positions[static_cast<size_t>(a)].to(torch::kFloat), inv_freq);  // [N, part / 2]
    auto cos = torch::cat({angles.cos(), angles.cos()}, -1).to(u.scalar_type());
    auto sin = torch::cat({angles.sin(), angles.sin()}, -1).to(u.scalar_type());
    auto u1 = u.narrow(-1, 0, part / 2), u2 = u.narrow(-1, part / 2, part / 2);
    parts.push_back(u * cos + torch::cat({-u2, u1}, -1) * sin);
  }
  return torch::cat(parts, -1);
}

torch::Tensor layer_norm_no_affine(const torch::Tensor& x, double eps) {
  return torch::layer_norm(x.to(torch::kFloat), {x.size(-1)}, {}, {}, eps).to(x.scalar_type());
}

torch::Tensor timestep_embedding(const torch::Tensor& sigma) {
  const int64_t half = 128;
  const torch::Tensor freqs = torch::exp(-std::log(10000.0) * torch::arange(half, torch::kDouble) / half);
  const torch::Tensor args = (sigma.to(torch::kDouble) * 1000.0).unsqueeze(1) * freqs.unsqueeze(0);
  return torch::cat({args.cos(), args.sin()}, -1).to(torch::kFloat);
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t H = q.size(1), Hkv = k.size(1), Tq = q.size(2), Tk = k.size(2), D = q.size(3);
  TORCH_CHECK(H % Hkv == 0, "n_heads ", H, " must be a multiple of n_kv_heads ", Hkv);
  TORCH_CHECK(Tk >= Tq, "causal_attention: ", Tk, " keys for ", Tq, " queries");
  if (Tk > kPlainAttentionMaxKeys) {
    AttentionOptions o;
    o.causal = true;
    return nn::attention(q, k, v, o);
  }
  auto kk = H == Hkv ? k : k.repeat_interleave(H / Hkv, 1);
  auto vv = H == Hkv ? v : v.repeat_interleave(H / Hkv, 1);
  auto scores = nn::matmul(q, kk.transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
  // Query i sits at position Tk - Tq + i and sees keys 0 .. Tk - Tq + i.
  auto mask = torch::ones({Tq, Tk}, torch::kBool).triu(Tk - Tq + 1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  auto probs = torch::softmax(scores.to(torch::kFloat), -1).to(q.scalar_type());
  return nn::matmul(probs, vv);
}

}  // namespace zeroshard::nn
