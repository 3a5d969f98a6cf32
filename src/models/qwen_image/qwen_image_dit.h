// Qwen-Image's diffusion transformer (diffusers QwenImageTransformer2DModel, the released
// Qwen/Qwen-Image transformer): an MMDiT of double-stream blocks only — image tokens and text
// tokens keep separate weights (q/k/v with biases, output projections, MLPs, modulations) and
// meet in one joint attention. Parameter names are the released checkpoint's.
//
//   packed latent tokens [B, N, in_channels]  -> img_in
//   text states [B, L, joint_attention_dim]   -> txt_norm (RMSNorm) -> txt_in
//   timestep [B] (sigma in [0, 1])            -> time_text_embed (sinusoid of 1000 t, MLP) = temb
//   transformer_blocks.{i}                     (both streams; the last block's text output is unused)
//   norm_out (AdaLayerNormContinuous: (scale, shift)) -> proj_out -> [B, N, p*p*out_channels]
//
// Conventions (diffusers, pipeline_qwenimage.py):
//  - Packing: a latent [B, C, H, W] becomes tokens in row-major order over the (H/2) x (W/2) patch
//    grid, features ordered (c, dy, dx) (pack_latents below).
//  - Time: the model takes sigma (the pipeline passes t / 1000) and predicts the flow velocity
//    noise - x0 (the scheduler steps x += (sigma_next - sigma) * output).
//  - Text padding: encoder_hidden_states_mask removes padded text *keys* only.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/layers.h"
#include "nn/norms.h"
#include "nn/rope.h"
#include "zeroshard/nn/hookable.h"

namespace zeroshard::models::qwen_image {

struct QwenImageDitConfig {
  int64_t patch_size = 2;
  int64_t in_channels = 64;  // packed: out_channels * patch_size^2
  int64_t out_channels = 16;
  int64_t num_layers = 60;
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  int64_t joint_attention_dim = 3584;               // Qwen2.5-VL-7B's hidden size
  std::vector<int64_t> axes_dims_rope{16, 56, 56};  // (frame, height, width) features per head

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  // Throws std::invalid_argument naming the field (prefixed by `where`).
  void validate(const std::string& where = "qwen_image") const;
};

// Reads the diffusers config fields (patch_size, in_channels, out_channels, num_layers,
// attention_head_dim, num_attention_heads, joint_attention_dim, axes_dims_rope). Variants this
// port does not implement (guidance_embeds, zero_cond_t, use_additional_t_cond,
// use_layer3d_rope set to true) are rejected by name. `where` prefixes error messages.
QwenImageDitConfig config_from_json(const nlohmann::json& j, const std::string& where);

// The released Qwen/Qwen-Image transformer (transformer/config.json): 60 blocks, 24 heads x 128,
// text dim 3584; 20,430,401,088 parameters.
QwenImageDitConfig qwen_image_20b();
// Parameters of a model of `c`, from the layer shapes (no model is built).
int64_t parameter_count(const QwenImageDitConfig& c);

// One image of a sample in patches: frames x height x width. A sample may hold several (the edit
// models append condition images; image k takes frame positions k, k+1, ...).
struct ImageShape {
  int64_t frames = 1, height = 0, width = 0;
};

// Qwen-Image's MLP (diffusers FeedForward, "gelu-approximate"): net.0.proj -> GELU(tanh) -> net.2.
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::ModuleList net{nullptr};
  nn::Linear proj{nullptr}, out{nullptr};  // net.0.proj, net.2
};
TORCH_MODULE(Mlp);

// The joint attention's projections (diffusers Attention with added_kv_proj_dim): to_q/k/v and
// to_out.0 for the image stream, add_q/k/v_proj and to_add_out for the text stream, all with
// biases; per-head RMSNorm of q and k for both streams (norm_q/k, norm_added_q/k, eps 1e-6).
class JointAttentionImpl : public torch::nn::Module {
 public:
  JointAttentionImpl(int64_t dim, int64_t heads, int64_t head_dim);
  nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, add_q_proj{nullptr}, add_k_proj{nullptr}, add_v_proj{nullptr},
      to_add_out{nullptr};
  torch::nn::ModuleList to_out{nullptr};  // [0]: the image output projection
  nn::RMSNorm norm_q{nullptr}, norm_k{nullptr}, norm_added_q{nullptr}, norm_added_k{nullptr};
};
TORCH_MODULE(JointAttention);

// What every block needs besides its inputs: the text key mask and the rotary angles.
struct BlockContext {
  at::Tensor text_keys;       // [B, L] bool, true where the text token is real; undefined: all real
  nn::RopeAngles image_rope;  // [N, head_dim / 2]
  nn::RopeAngles text_rope;   // [L, head_dim / 2]
};

// One double-stream block (a sharding unit).
class BlockImpl : public nn::HookableModule {
 public:
  BlockImpl(int64_t dim, int64_t heads, int64_t head_dim);
  // img [B, N, D], txt [B, L, D], temb [B, D] -> (img, txt).
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& img, const torch::Tensor& txt,
                                                  const torch::Tensor& temb, const BlockContext& ctx);
  torch::nn::ModuleList img_mod{nullptr}, txt_mod{nullptr};  // [SiLU, Linear(D, 6D)]
  nn::LayerNorm img_norm1{nullptr}, img_norm2{nullptr}, txt_norm1{nullptr}, txt_norm2{nullptr};
  JointAttention attn{nullptr};
  Mlp img_mlp{nullptr}, txt_mlp{nullptr};

 private:
  int64_t heads_, head_dim_;
};
TORCH_MODULE(Block);

class TimestepEmbeddingImpl : public torch::nn::Module {  // linear_1 -> SiLU -> linear_2
 public:
  TimestepEmbeddingImpl(int64_t in, int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear linear_1{nullptr}, linear_2{nullptr};
};
TORCH_MODULE(TimestepEmbedding);

class TimeTextEmbedImpl : public torch::nn::Module {  // time_text_embed: sinusoid + timestep_embedder
 public:
  explicit TimeTextEmbedImpl(int64_t dim);
  torch::Tensor forward(const torch::Tensor& timestep, at::ScalarType dtype);
  TimestepEmbedding timestep_embedder{nullptr};
};
TORCH_MODULE(TimeTextEmbed);

class AdaNormOutImpl : public torch::nn::Module {  // norm_out: AdaLayerNormContinuous, (scale, shift)
 public:
  explicit AdaNormOutImpl(int64_t dim);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& temb);
  nn::Linear linear{nullptr};
  nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(AdaNormOut);

class QwenImageDitImpl : public torch::nn::Module {
 public:
  explicit QwenImageDitImpl(const QwenImageDitConfig& c);
  // hidden_states [B, N, in_channels] packed latent tokens; encoder_hidden_states [B, L, joint];
  // text_mask [B, L] (nonzero = real token) or undefined; timestep [B] = sigma; img_shapes: the
  // images of every sample (the same for all samples; their token counts sum to N).
  // Returns [B, N, patch_size^2 * out_channels].
  torch::Tensor forward(const torch::Tensor& hidden_states, const torch::Tensor& encoder_hidden_states,
                        const torch::Tensor& text_mask, const torch::Tensor& timestep,
                        const std::vector<ImageShape>& img_shapes);
  const QwenImageDitConfig& config() const { return config_; }

  TimeTextEmbed time_text_embed{nullptr};
  nn::RMSNorm txt_norm{nullptr};
  nn::Linear img_in{nullptr}, txt_in{nullptr}, proj_out{nullptr};
  torch::nn::ModuleList transformer_blocks{nullptr};
  AdaNormOut norm_out{nullptr};

 private:
  QwenImageDitConfig config_;
};
TORCH_MODULE(QwenImageDit);

// The rotary positions (frame, height, width) of the image tokens and of L text tokens, as
// QwenEmbedRope with scale_rope: [N, 3] and [L, 3] float64.
std::pair<at::Tensor, at::Tensor> rope_positions(const std::vector<ImageShape>& images, int64_t text_len);

// latent [B, C, H, W] -> tokens [B, (H/2)(W/2), 4C] and back (the pipeline's _pack_latents).
torch::Tensor pack_latents(const torch::Tensor& latent);
torch::Tensor unpack_latents(const torch::Tensor& tokens, int64_t height, int64_t width);

// Qwen-Image's true classifier-free guidance: comb = uncond + scale * (cond - uncond), rescaled per
// token to the norm of cond (over the feature dimension), as pipeline_qwenimage.py does.
torch::Tensor true_cfg(const torch::Tensor& cond, const torch::Tensor& uncond, double scale);

}  // namespace zeroshard::models::qwen_image
