// The FLUX.2 transformer (dev and klein) in its released layout: the diffusers /
// DiffSynth-Studio `Flux2DiT` names, which the released transformer files use as they are.
//
//   x_embedder, context_embedder            Linear, no bias (no biases anywhere in the model)
//   time_guidance_embed.timestep_embedder   linear_1, SiLU, linear_2; guidance_embedder only with
//                                           guidance_embeds (dev; klein has none)
//   double_stream_modulation_img / _txt     ONE Linear(SiLU(temb)) per stream, shared by every
//   single_stream_modulation                double (2 x (shift, scale, gate)) / single (1 x) block
//   transformer_blocks.N                    attn.{to_q, to_k, to_v, norm_q, norm_k, to_out.0,
//                                           add_{q,k,v}_proj, norm_added_{q,k}, to_add_out},
//                                           ff / ff_context.{linear_in, linear_out} (SwiGLU)
//   single_transformer_blocks.N             attn.{to_qkv_mlp_proj = [q | k | v | mlp_in (2 x
//                                           mlp_hidden)], norm_q, norm_k, to_out = [attn | mlp]}
//   norm_out.linear (scale, shift), proj_out
//
// Blocks are HookableModules (the sharding units). Every size comes from the config (Flux2DiT's
// constructor arguments).
#pragma once

#include "models/flux/dit_common.h"
#include "nn/layers.h"
#include "zeroshard/nn/hookable.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace zeroshard::models::flux2 {

struct Flux2Config {
  int64_t patch_size = 1;
  int64_t in_channels = 128;
  int64_t out_channels = 128;  // null in the config: in_channels
  int64_t num_layers = 8;
  int64_t num_single_layers = 48;
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 48;
  int64_t joint_attention_dim = 15360;
  int64_t timestep_guidance_channels = 256;
  double mlp_ratio = 3.0;
  std::vector<int64_t> axes_dims_rope = {32, 32, 32, 32};
  double rope_theta = 2000.0;
  double eps = 1e-6;
  bool guidance_embeds = true;

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t mlp_hidden() const { return static_cast<int64_t>(static_cast<double>(inner_dim()) * mlp_ratio); }
  int64_t out_features() const { return patch_size * patch_size * out_channels; }
  static Flux2Config from_json(const nlohmann::json& j, const std::string& source);
  void validate(const std::string& source) const;
};

// linear_1 -> SiLU -> linear_2, no biases.
class Flux2TimestepEmbedderImpl : public torch::nn::Module {
 public:
  Flux2TimestepEmbedderImpl(int64_t in, int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear linear_1{nullptr}, linear_2{nullptr};
};
TORCH_MODULE(Flux2TimestepEmbedder);

// SwiGLU feed-forward: linear_in -> (a, b) halves -> silu(a) * b -> linear_out.
class Flux2FeedForwardImpl : public torch::nn::Module {
 public:
  Flux2FeedForwardImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear linear_in{nullptr}, linear_out{nullptr};
};
TORCH_MODULE(Flux2FeedForward);

// The double block's attention weights (names as listed above).
class Flux2AttentionImpl : public torch::nn::Module {
 public:
  Flux2AttentionImpl(int64_t dim, int64_t heads, int64_t head_dim, double eps);
  nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, to_out{nullptr};
  nn::Linear add_q_proj{nullptr}, add_k_proj{nullptr}, add_v_proj{nullptr}, to_add_out{nullptr};
  flux::HeadRMSNorm norm_q{nullptr}, norm_k{nullptr}, norm_added_q{nullptr}, norm_added_k{nullptr};
};
TORCH_MODULE(Flux2Attention);

class Flux2DoubleBlockImpl : public nn::HookableModule {
 public:
  explicit Flux2DoubleBlockImpl(const Flux2Config& c);
  // img [B, Li, D], txt [B, Lt, D]; mod_img / mod_txt: the shared (shift, scale, gate) x 2, each
  // [B, 1, D]; rope for the (text, image) sequence. Returns {img, txt}.
  std::vector<torch::Tensor> forward(const torch::Tensor& img, const torch::Tensor& txt,
                                     const std::vector<torch::Tensor>& mod_img,
                                     const std::vector<torch::Tensor>& mod_txt, const nn::RopeAngles& pe);
  Flux2Attention attn{nullptr};
  Flux2FeedForward ff{nullptr}, ff_context{nullptr};

 private:
  int64_t heads_;
  double eps_;
};
TORCH_MODULE(Flux2DoubleBlock);

// The single block's fused attention + MLP ("attn").
class Flux2ParallelAttentionImpl : public torch::nn::Module {
 public:
  Flux2ParallelAttentionImpl(int64_t dim, int64_t heads, int64_t head_dim, int64_t mlp_hidden, double eps);
  nn::Linear to_qkv_mlp_proj{nullptr}, to_out{nullptr};
  flux::HeadRMSNorm norm_q{nullptr}, norm_k{nullptr};
};
TORCH_MODULE(Flux2ParallelAttention);

class Flux2SingleBlockImpl : public nn::HookableModule {
 public:
  explicit Flux2SingleBlockImpl(const Flux2Config& c);
  // x [B, Lt + Li, D] (text first); mod: the shared (shift, scale, gate).
  torch::Tensor forward(const torch::Tensor& x, const std::vector<torch::Tensor>& mod, const nn::RopeAngles& pe);
  Flux2ParallelAttention attn{nullptr};

 private:
  int64_t inner_, mlp_hidden_, heads_;
  double eps_;
};
TORCH_MODULE(Flux2SingleBlock);

class Flux2DiTImpl : public torch::nn::Module {
 public:
  explicit Flux2DiTImpl(const Flux2Config& c);
  // hidden_states [B, Li, in_channels] latent tokens; encoder_hidden_states [B, Lt,
  // joint_attention_dim]; timestep [B] = sigma in [0, 1]; img_ids [B or 1, Li, A], txt_ids
  // [B or 1, Lt, A] integer positions (A = axes_dims_rope.size(); FLUX.2 uses (t, h, w, l): the
  // image on (0, row, col, 0), text on (0, 0, 0, index)); as upstream, the FIRST sample's ids serve
  // the whole batch. guidance [B] (used only with guidance_embeds). Returns [B, Li, out_features].
  torch::Tensor forward(const torch::Tensor& hidden_states, const torch::Tensor& encoder_hidden_states,
                        const torch::Tensor& timestep, const torch::Tensor& img_ids, const torch::Tensor& txt_ids,
                        const torch::Tensor& guidance = {});
  const Flux2Config& config() const { return config_; }

  std::shared_ptr<torch::nn::Module> time_guidance_embed;
  Flux2TimestepEmbedder timestep_embedder{nullptr}, guidance_embedder{nullptr};
  nn::Linear mod_img{nullptr}, mod_txt{nullptr}, mod_single{nullptr};
  nn::Linear x_embedder{nullptr}, context_embedder{nullptr};
  torch::nn::ModuleList transformer_blocks{nullptr}, single_transformer_blocks{nullptr};
  nn::Linear norm_out{nullptr}, proj_out{nullptr};

 private:
  Flux2Config config_;
};
TORCH_MODULE(Flux2DiT);

int64_t flux2_param_count(const Flux2Config& c);

}  // namespace zeroshard::models::flux2
