// The `wan` series: a text-to-video DiT in the Wan style, trained with flow matching on the
// latents of the frozen causal video VAE and the states of a frozen text encoder.
//
//   3-D patches (1 x p x p latent voxels) -> tokens in (frame, row, column) order;
//   each block: self-attention with 3-D rotary positions, cross-attention to the text, FFN;
//   timestep modulation (shift, scale, gate for attention and FFN) from a learned per-block
//   table plus a projection of the time embedding.
//
// WanPipeline is the trained root: frozen text encoder + frozen video VAE + the DiT.
#pragma once

#include "models/flux/flux.h"
#include "models/text/text_encoder.h"
#include "models/vae/vae.h"
#include "nn/layers.h"
#include "zeroshard/nn/hookable.h"

#include <torch/torch.h>

namespace zeroshard::models {

struct WanConfig {
  int64_t dim = 96;
  int64_t n_heads = 4;      // head size dim / n_heads, a multiple of 6 (3-D RoPE: three even thirds)
  int64_t layers = 2;
  int64_t ffn_hidden = 192;
  int64_t patch_size = 2;   // spatial; one latent frame per patch
  double rope_theta = 10000.0;
  double latent_scale = 1.0;
  TextEncoderConfig text;   // the frozen text tower

  int64_t head_dim() const { return dim / n_heads; }
  void validate(int64_t latent_size) const;  // throws std::invalid_argument naming the wan.* key
};

class WanAttentionImpl : public torch::nn::Module {  // q, k, v, o with RMS-normed q and k (over dim)
 public:
  explicit WanAttentionImpl(int64_t dim);
  nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  nn::RMSNorm norm_q{nullptr}, norm_k{nullptr};
};
TORCH_MODULE(WanAttention);

// Layer norm over the last dimension with a learned gain and bias (eps 1e-6), in fp32.
class AffineLayerNormImpl : public torch::nn::Module {
 public:
  explicit AffineLayerNormImpl(int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
};
TORCH_MODULE(AffineLayerNorm);

// Positions of the video tokens for 3-D RoPE: float [N] frame, row, column.
struct VideoPositions {
  torch::Tensor t, r, c;
};

class WanBlockImpl : public nn::HookableModule {
 public:
  explicit WanBlockImpl(const WanConfig& c);
  // x [B, N, D] video tokens, context [B, L, D] text, e0 [B, 6, D] projected time embedding.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context, const torch::Tensor& e0,
                        const VideoPositions& pos);
  torch::Tensor modulation;  // [1, 6, D]
  WanAttention self_attn{nullptr}, cross_attn{nullptr};
  AffineLayerNorm norm3{nullptr};  // before cross-attention
  Mlp ffn{nullptr};

 private:
  WanConfig config_;
};
TORCH_MODULE(WanBlock);

class WanHeadImpl : public torch::nn::Module {
 public:
  WanHeadImpl(int64_t dim, int64_t out);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& e);
  torch::Tensor modulation;  // [1, 2, D]
  nn::Linear head{nullptr};
};
TORCH_MODULE(WanHead);

class WanDiTImpl : public torch::nn::Module {
 public:
  WanDiTImpl(const WanConfig& c, int64_t latent_channels);
  // x [B, C, T, h, w] noisy latent clip, sigma [B], txt [B, L, text.dim] -> velocity, x's shape.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& txt);
  nn::Linear patch_embedding{nullptr}, time_projection{nullptr};
  Mlp text_embedding{nullptr}, time_embedding{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  WanHead head{nullptr};

 private:
  WanConfig config_;
};
TORCH_MODULE(WanDiT);

class WanPipelineImpl : public nn::HookableModule {
 public:
  WanPipelineImpl(const WanConfig& c, const VaeConfig& vae_config);
  // clips [B, 3, T, H, W] in [-1, 1], tokens [B, L], noise like the latent, sigma [B] -> loss.
  torch::Tensor forward(const torch::Tensor& clips, const torch::Tensor& tokens, const torch::Tensor& noise,
                        const torch::Tensor& sigma);
  // Euler sampling from pure noise, then the VAE decoder (chunked as the VAE's chunk_frames).
  torch::Tensor generate(const torch::Tensor& tokens, const torch::Tensor& noise, int64_t steps);

  TextEncoder text_encoder{nullptr};
  VideoVae vae{nullptr};
  // Seconds forward() spent in the frozen towers (gathers included), summed until reset: what
  // the trainer's step costs beyond the DiT.
  double towers_seconds = 0.0;
  WanDiT dit{nullptr};

 private:
  WanConfig config_;
};
TORCH_MODULE(WanPipeline);

// Sharding units: as flux_unit (every HookableModule but the VAE as a whole).
bool wan_unit(const std::string& qualified_name);

// Seeded initial values: towers as in flux_init; DiT Linear weights N(0, 0.02), biases 0,
// norm gains 1, modulation tables N(0, 1/sqrt(D)) (as Wan), the time projection and the
// head's output projection zero.
void wan_init(const WanConfig& c, const VaeConfig& vae, uint64_t seed, const std::string& name, at::Tensor& param);

}  // namespace zeroshard::models
