#include "models/flux/dit_common.h"

#include "nn/attention.h"
#include "nn/norms.h"
#include "nn/rms_norm.h"

#include <cmath>
#include <stdexcept>

namespace zeroshard::models::flux {

at::Tensor timestep_embedding_f32_freqs(const at::Tensor& t, int64_t dim, double scale, bool cos_first,
                                        at::ScalarType dtype, double max_period) {
  TORCH_CHECK(t.dim() == 1, "FLUX timestep embedding: t must be [B], got ", t.sizes());
  const int64_t half = dim / 2;
  // The float32 table, op for op as upstream: (-ln(max_period) * i) / half, then exp.
  const at::Tensor freqs = (at::arange(0, half, at::kFloat) * (-std::log(max_period)) / static_cast<double>(half))
                               .exp()
                               .to(at::kDouble);
  const at::Tensor args = (t.to(at::kDouble) * scale).unsqueeze(1) * freqs.unsqueeze(0);
  at::Tensor emb = cos_first ? at::cat({args.cos(), args.sin()}, -1) : at::cat({args.sin(), args.cos()}, -1);
  if (dim % 2 == 1) emb = at::constant_pad_nd(emb, {0, 1});
  return emb.to(dtype);
}

HeadRMSNormImpl::HeadRMSNormImpl(int64_t dim, double eps, const std::string& param_name) : eps_(eps) {
  weight = register_parameter(param_name, nn::new_parameter({dim}));
  if (!nn::DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    weight.fill_(1.0);
  }
}

torch::Tensor HeadRMSNormImpl::forward(const torch::Tensor& x) {
  return nn::rms_norm(x, weight, eps_);
}

at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps) {
  const auto dt = nn::norm_dtype(x);
  const at::Tensor normed = at::layer_norm(x.to(dt), {x.size(-1)}, {}, {}, eps).to(x.scalar_type());
  return (1 + scale) * normed + shift;
}

at::Tensor split_heads(const at::Tensor& x, int64_t heads) {
  return x.unflatten(-1, {heads, x.size(-1) / heads}).transpose(1, 2);
}

at::Tensor rope_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const nn::RopeAngles& angles) {
  const at::Tensor qr = nn::apply_rope(q, angles, nn::RopePairing::Interleaved);
  const at::Tensor kr = nn::apply_rope(k, angles, nn::RopePairing::Interleaved);
  const at::Tensor out = nn::attention(qr, kr, v);  // scale 1/sqrt(head_dim), no mask
  return out.transpose(1, 2).flatten(2);
}

const nlohmann::json& require(const nlohmann::json& config, const std::string& key, const std::string& source) {
  if (!config.contains(key) || config[key].is_null()) {
    throw std::invalid_argument(source + ": no field '" + key + "'");
  }
  return config[key];
}

}  // namespace zeroshard::models::flux
