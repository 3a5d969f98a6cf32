// The `flux` series: a text-to-image MMDiT in the FLUX / Qwen-Image style, trained with flow
// matching on the latents of a frozen VAE and the states of a frozen text encoder.
//
//   double-stream blocks: image and text tokens keep separate weights (adaLN modulation, QK
//     norm, MLP) and meet in one joint attention (text first);
//   single-stream blocks: one sequence, attention and MLP in parallel from one linear;
//   modulation from vec = time embedding + pooled text; 2-D rotary positions over the patches.
//
// FluxPipeline is the trained root: frozen text encoder + frozen VAE + the DiT. Plain
// torch::nn — the blocks, encoder layers and VAE stages are HookableModules (sharding units).
#pragma once

#include "models/text/text_encoder.h"
#include "models/vae/vae.h"
#include "nn/layers.h"
#include "zeroshard/nn/hookable.h"

#include <torch/torch.h>

namespace zeroshard::models {

struct FluxConfig {
  int64_t dim = 128;
  int64_t n_heads = 4;        // head size dim / n_heads, a multiple of 4 (2-D RoPE)
  int64_t double_blocks = 2;
  int64_t single_blocks = 2;
  int64_t mlp_ratio = 2;      // MLP hidden = mlp_ratio * dim
  int64_t patch_size = 2;     // latent patches of patch_size x patch_size
  double rope_theta = 10000.0;
  double latent_scale = 1.0;  // the VAE mean is multiplied by this before diffusion
  TextEncoderConfig text;     // the frozen text tower

  int64_t head_dim() const { return dim / n_heads; }
  // Throws std::invalid_argument naming the flux.* key; latent_size = image size / VAE factor.
  void validate(int64_t latent_size) const;
};

// adaLN modulation: Linear(silu(vec)) split into n sets of (shift, scale, gate), each [B, 1, D].
class ModulationImpl : public torch::nn::Module {
 public:
  ModulationImpl(int64_t dim, int64_t sets);
  std::vector<torch::Tensor> forward(const torch::Tensor& vec);
  nn::Linear lin{nullptr};

 private:
  int64_t sets_;
};
TORCH_MODULE(Modulation);

class MlpImpl : public torch::nn::Module {  // fc2(act(fc1(x))), act = tanh-GELU or SiLU
 public:
  MlpImpl(int64_t in, int64_t hidden, int64_t out, bool silu = false);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear fc1{nullptr}, fc2{nullptr};

 private:
  bool silu_;
};
TORCH_MODULE(Mlp);

class JointAttentionImpl : public torch::nn::Module {  // one stream's projections and QK norms
 public:
  JointAttentionImpl(int64_t dim, int64_t n_heads);
  nn::Linear qkv{nullptr}, proj{nullptr};
  nn::RMSNorm norm_q{nullptr}, norm_k{nullptr};
};
TORCH_MODULE(JointAttention);

// Positions of the joint sequence: float [N] rows and cols (text (0, 0), patch (r, c)).
struct TokenPositions {
  torch::Tensor rows, cols;
};

class DoubleStreamBlockImpl : public nn::HookableModule {
 public:
  DoubleStreamBlockImpl(const FluxConfig& c);
  // Returns {img, txt}.
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& img, const torch::Tensor& txt,
                                                  const torch::Tensor& vec, const TokenPositions& pos);
  Modulation img_mod{nullptr}, txt_mod{nullptr};
  JointAttention img_attn{nullptr}, txt_attn{nullptr};
  Mlp img_mlp{nullptr}, txt_mlp{nullptr};

 private:
  FluxConfig config_;
};
TORCH_MODULE(DoubleStreamBlock);

class SingleStreamBlockImpl : public nn::HookableModule {
 public:
  SingleStreamBlockImpl(const FluxConfig& c);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& vec, const TokenPositions& pos);
  Modulation mod{nullptr};
  nn::Linear linear1{nullptr}, linear2{nullptr};
  nn::RMSNorm norm_q{nullptr}, norm_k{nullptr};

 private:
  FluxConfig config_;
};
TORCH_MODULE(SingleStreamBlock);

class FinalLayerImpl : public torch::nn::Module {  // adaLN (shift, scale), then the patch projection
 public:
  FinalLayerImpl(int64_t dim, int64_t out);
  torch::Tensor forward(const torch::Tensor& img, const torch::Tensor& vec);
  nn::Linear adaLN{nullptr}, linear{nullptr};
};
TORCH_MODULE(FinalLayer);

class FluxDiTImpl : public torch::nn::Module {
 public:
  FluxDiTImpl(const FluxConfig& c, int64_t latent_channels);
  // x [B, C, h, w] (noisy latent), sigma [B] in [0, 1], txt [B, L, text.dim], pooled [B, text.dim]
  // -> the predicted velocity (noise - clean latent), [B, C, h, w].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& txt,
                        const torch::Tensor& pooled);
  nn::Linear img_in{nullptr}, txt_in{nullptr};
  Mlp time_in{nullptr}, vector_in{nullptr};
  torch::nn::ModuleList double_blocks{nullptr}, single_blocks{nullptr};
  FinalLayer final_layer{nullptr};  // registered as "final"

 private:
  FluxConfig config_;
  int64_t channels_;
};
TORCH_MODULE(FluxDiT);

// Flow matching (rectified flow): x_t = (1 - sigma) x0 + sigma noise; target noise - x0.
torch::Tensor flow_matching_loss(FluxDiT& dit, const torch::Tensor& x0, const torch::Tensor& noise,
                                 const torch::Tensor& sigma, const torch::Tensor& txt, const torch::Tensor& pooled);

// The training root: the frozen towers run without autograd; only the DiT learns.
class FluxPipelineImpl : public nn::HookableModule {
 public:
  FluxPipelineImpl(const FluxConfig& c, const VaeConfig& vae_config);
  // images [B, 3, H, W] in [-1, 1], tokens [B, L], noise like the latent, sigma [B] -> loss.
  torch::Tensor forward(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& noise,
                        const torch::Tensor& sigma);
  torch::Tensor encode_images(const torch::Tensor& images);  // scaled VAE means [B, Z, h, w]
  // Euler sampling of the flow from pure noise (sigma 1 -> 0 in `steps` steps), then decoding.
  torch::Tensor generate(const torch::Tensor& tokens, const torch::Tensor& noise, int64_t steps);

  TextEncoder text_encoder{nullptr};
  VideoVae vae{nullptr};
  // Seconds forward() spent in the frozen towers (gathers included), summed until reset: what
  // the trainer's step costs beyond the DiT.
  double towers_seconds = 0.0;
  FluxDiT dit{nullptr};

 private:
  FluxConfig config_;
};
TORCH_MODULE(FluxPipeline);

// Which HookableModules of the pipeline should be sharding units: all but the VAE as a whole,
// so its stages (like the encoder layers and DiT blocks) are gathered one at a time.
bool flux_unit(const std::string& qualified_name);

// Seeded initial values, keyed by (seed, name): text encoder N(0, 0.02) with norm gains 1; VAE
// as vae_init; DiT Linear weights N(0, 0.02), biases 0, QK-norm gains 1, and the modulation and
// final projections zero (adaLN-Zero: every block starts as the identity).
void flux_init(const FluxConfig& c, const VaeConfig& vae, uint64_t seed, const std::string& name, at::Tensor& param);

}  // namespace zeroshard::models
