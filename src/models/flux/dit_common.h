// Pieces shared by the FLUX.1 and FLUX.2 transformers (namespace zeroshard::models::flux; the
// flux2 family links this one): the timestep sinusoid as BFL and diffusers build it, per-head
// RMS norms with their released parameter names, adaLN modulation and the joint attention with
// interleaved RoPE.
#pragma once

#include "nn/layers.h"
#include "nn/rope.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace zeroshard::models::flux {

// Sinusoidal embedding of t * scale, as both FLUX generations compute it:
//   freq_i = exp(-ln(max_period) * i / half), i < half = dim / 2, computed in FLOAT32 (BFL's
//   timestep_embedding and diffusers' get_timestep_embedding build the frequency table with
//   torch.arange(dtype=float32) and exp in float32 whatever the model dtype; a float64 table
//   differs by up to 6e-8 relative, i.e. 4e-5 rad at t*1000 = 730, which shows in a float64
//   check), then args = (t * scale) * freq in float64 and [cos, sin] (cos_first) or [sin, cos].
// Gradients flow to t. Returns [B, dim] in `dtype`.
at::Tensor timestep_embedding_f32_freqs(const at::Tensor& t, int64_t dim, double scale, bool cos_first,
                                        at::ScalarType dtype, double max_period = 10000.0);

// RMS norm over the last dimension (the per-head QK norm of both FLUX generations): x *
// rsqrt(mean(x^2) + eps) * weight, statistics in float32 (float64 stays float64). The parameter
// name differs between checkpoints: BFL calls it "scale", diffusers "weight".
class HeadRMSNormImpl : public torch::nn::Module {
 public:
  HeadRMSNormImpl(int64_t dim, double eps, const std::string& param_name);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(HeadRMSNorm);

// (1 + scale) * LayerNorm(x) + shift, LayerNorm without affine parameters (eps as given);
// shift/scale [B, 1, D] broadcast over the tokens.
at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps);

// Joint attention of FLUX: q, k, v [B, H, L, D] (already QK-normed), rotated by interleaved RoPE
// (pairs (2i, 2i+1)) with `angles` ([L, D/2] shared by the batch or [B, L, D/2] per sample),
// softmax(q k^T / sqrt(D)) v with no mask; returns [B, L, H*D] (head-major features).
at::Tensor rope_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const nn::RopeAngles& angles);

// [B, L, H*D] -> [B, H, L, D].
at::Tensor split_heads(const at::Tensor& x, int64_t heads);

// The value of a required config field; throws std::invalid_argument naming `source` and `key`.
const nlohmann::json& require(const nlohmann::json& config, const std::string& key, const std::string& source);

}  // namespace zeroshard::models::flux
