// Wan 2.1's text-to-video diffusion transformer as released (Wan-Video/Wan2.1
// wan/modules/model.py, WanModel with model_type "t2v"), with the original checkpoint's
// parameter names (diffusion_pytorch_model*.safetensors); dit_diffusers_name_map() reads and
// writes the -Diffusers layout (WanTransformer3DModel).
//
// Conventions, each implemented in one place (dit.cpp):
//  - patchify: a Conv3d with kernel = stride = patch_size; tokens in (frame, row, col) order;
//  - text: each prompt's states zero-padded to text_len rows, then the text MLP (Linear, GELU
//    tanh, Linear) on every row; cross-attention has no key mask;
//  - time: sinusoid of t (0..1000 scale, unscaled; cos half then sin, freqs 10000^(-i/half),
//    float64) -> MLP (Linear, SiLU, Linear) = e; SiLU + Linear on e -> e0 [B, 6, dim];
//  - block: e0 + its own modulation -> (shift, scale, gate) x 2; LayerNorms without affine
//    parameters except norm3 (cross-attention input, affine), eps from the config;
//    x += gate * self_attn(norm1(x) * (1 + scale) + shift); x += cross_attn(norm3(x));
//    x += gate * ffn(norm2(x) * (1 + scale) + shift);
//  - q and k: RMSNorm over the full width (all heads at once) before the head split;
//  - RoPE: interleaved pairs; the head_dim/2 pairs split d - 4*floor(d/6) / 2*floor(d/6) /
//    2*floor(d/6) features over (frame, row, col), each axis with theta^(-2j/axis_dim);
//    integer grid positions from 0;
//  - head: its modulation [1, 2, dim] + e (not e0): shift = chunk 0, scale = chunk 1;
//  - unpatchify: per token a vector laid out (pt, ph, pw, C), C fastest;
//  - seq_len: samples are zero-padded to seq_len tokens; padded tokens are never attended to
//    as keys and are dropped from the output.
// Blocks are HookableModules (the sharding units); the root holds the embeddings and the head.
#pragma once

#include "nn/layers.h"
#include "nn/name_map.h"
#include "nn/norms.h"
#include "zeroshard/nn/hookable.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::models::wan {

struct WanDiTConfig {
  std::string model_type = "t2v";
  std::array<int64_t, 3> patch_size = {1, 2, 2};
  int64_t text_len = 512;
  int64_t in_dim = 16;
  int64_t dim = 2048;
  int64_t ffn_dim = 8192;
  int64_t freq_dim = 256;
  int64_t text_dim = 4096;
  int64_t out_dim = 16;
  int64_t num_heads = 16;
  int64_t num_layers = 32;
  std::array<int64_t, 2> window_size = {-1, -1};
  bool qk_norm = true;
  bool cross_attn_norm = true;
  double eps = 1e-6;

  int64_t head_dim() const { return dim / num_heads; }
  // Features per RoPE axis (frame, row, col): {d - 4*(d/6), 2*(d/6), 2*(d/6)}.
  std::vector<int64_t> rope_axes_dim() const;
  // Throws std::invalid_argument naming the field (model_type other than "t2v" included: the
  // i2v/flf2v/vace variants need an image encoder and extra projections this model lacks).
  void validate() const;
  int64_t num_params() const;  // counted on a model built inside nn::DeferredInit
  // WanModel's constructor arguments (config.json of a Wan 2.1 checkpoint); missing keys keep
  // WanModel's defaults.
  static WanDiTConfig from_json(const nlohmann::json& j, const std::string& source);
  // diffusers' WanTransformer3DModel config.json (num_attention_heads, attention_head_dim,
  // in_channels, out_channels, ...; qk_norm "rms_norm_across_heads"); image_dim /
  // added_kv_proj_dim (i2v) are refused. text_len: the pipelines' max_sequence_length, 512.
  static WanDiTConfig from_diffusers_json(const nlohmann::json& j, const std::string& source);
};

// Published sizes (the Wan2.1 repository's wan/configs/wan_t2v_1_3B.py and wan_t2v_14B.py).
WanDiTConfig wan21_t2v_1_3b();  // 1,418,996,800 parameters
WanDiTConfig wan21_t2v_14b();   // 14,288,491,584 parameters

// x * rsqrt(mean(x^2) + eps) * weight (statistics in float32 for reduced precision, float64 for
// float64). Parameter "weight".
class WanRMSNormImpl : public torch::nn::Module {
 public:
  WanRMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(WanRMSNorm);

// q, k, v, o with biases; norm_q, norm_k over the full width (absent without qk_norm).
class WanAttentionImpl : public torch::nn::Module {
 public:
  WanAttentionImpl(int64_t dim, int64_t num_heads, bool qk_norm, double eps);
  // Self-attention: x [B, N, dim]; rope angles for the N tokens ([N, d/2] or [B, N, d/2]);
  // key_padding [B, N] bool (true = real) or undefined.
  torch::Tensor self_attention(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                               const torch::Tensor& key_padding);
  // Cross-attention to context [B, L, dim] (no mask, no RoPE).
  torch::Tensor cross_attention(const torch::Tensor& x, const torch::Tensor& context);
  nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  WanRMSNorm norm_q{nullptr}, norm_k{nullptr};

 private:
  torch::Tensor heads(const torch::Tensor& t) const;  // [B, N, dim] -> [B, H, N, d]
  int64_t num_heads_;
};
TORCH_MODULE(WanAttention);

class WanAttentionBlockImpl : public nn::HookableModule {
 public:
  explicit WanAttentionBlockImpl(const WanDiTConfig& c);
  // x [B, N, dim]; e0 [B, 6, dim]; context [B, text_len, dim] (embedded); cos/sin RoPE
  // angles; key_padding as in WanAttention (undefined: every token real).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& e0, const torch::Tensor& context,
                        const torch::Tensor& cos, const torch::Tensor& sin, const torch::Tensor& key_padding);
  WanAttention self_attn{nullptr}, cross_attn{nullptr};
  nn::LayerNorm norm3{nullptr};  // null without cross_attn_norm
  nn::Linear ffn0{nullptr}, ffn2{nullptr};  // "ffn.0", "ffn.2"
  torch::Tensor modulation;                 // [1, 6, dim]

 private:
  torch::Tensor body(const torch::Tensor& x, const torch::Tensor& e0, const torch::Tensor& context,
                     const torch::Tensor& cos, const torch::Tensor& sin, const torch::Tensor& key_padding);
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(WanAttentionBlock);

class WanHeadImpl : public torch::nn::Module {
 public:
  WanHeadImpl(int64_t dim, int64_t out_features, double eps);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& e);  // e [B, dim]
  nn::Linear head{nullptr};
  torch::Tensor modulation;  // [1, 2, dim]

 private:
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(WanHead);

class WanModelImpl : public nn::HookableModule {
 public:
  explicit WanModelImpl(const WanDiTConfig& c);

  // The upstream call: x per sample [in_dim, F, H, W] (grids may differ), t [B] on the 0..1000
  // scale (gradients flow to it), context per sample [L_i, text_dim] with L_i <= text_len,
  // seq_len >= every sample's token count (0: the largest count). Returns per sample
  // [out_dim, F, H, W].
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& x, const torch::Tensor& t,
                                     const std::vector<torch::Tensor>& context, int64_t seq_len = 0);
  // Batched: x [B, in_dim, F, H, W], context [B, L, text_dim] (L <= text_len; zero-padded to
  // text_len here) -> [B, out_dim, F, H, W].
  torch::Tensor forward_batched(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& context);

  // Seeded initialization as upstream's init_weights (Linear: Xavier uniform, zero bias; the
  // patch embedding Xavier uniform over its flattened kernel; text/time embeddings N(0, 0.02);
  // head.head.weight zero; modulations N(0, 1/dim); norms 1, biases 0).
  void reset_parameters(uint64_t seed);
  const WanDiTConfig& config() const { return config_; }

  std::shared_ptr<torch::nn::Module> patch_embedding;  // Conv3d: "weight" [dim, in_dim, pt, ph, pw], "bias"
  torch::Tensor patch_weight, patch_bias;
  nn::Linear text0{nullptr}, text2{nullptr};  // "text_embedding.0", "text_embedding.2"
  nn::Linear time0{nullptr}, time2{nullptr};  // "time_embedding.0", "time_embedding.2"
  nn::Linear time_proj{nullptr};              // "time_projection.1"
  torch::nn::ModuleList blocks{nullptr};
  WanHead head{nullptr};

 private:
  std::vector<torch::Tensor> body(const std::vector<torch::Tensor>& in, size_t batch, int64_t seq_len);
  WanDiTConfig config_;
};
TORCH_MODULE(WanModel);

// The initial value of parameter `name` (see reset_parameters), keyed by (seed, name).
void wan_dit_init(const WanDiTConfig& c, uint64_t seed, const std::string& name, at::Tensor& param);

// Original Wan 2.1 names (ours) <-> diffusers WanTransformer3DModel names (theirs), after
// diffusers' scripts/convert_wan_to_diffusers.py: text/time embeddings under condition_embedder,
// modulation -> scale_shift_table, self_attn/cross_attn -> attn1/attn2 with to_q/to_k/to_v/
// to_out.0, ffn.0/ffn.2 -> ffn.net.0.proj/ffn.net.2, norm3 -> norm2, head.head -> proj_out,
// head.modulation -> scale_shift_table. Every rule is a rename.
nn::NameMap dit_diffusers_name_map();

}  // namespace zeroshard::models::wan
