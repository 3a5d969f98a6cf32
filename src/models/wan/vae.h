// Wan 2.1's video VAE as released (Wan-Video/Wan2.1 wan/modules/vae.py, WanVAE_), with the
// Wan2.1_VAE.pth parameter names:
//  - causal 3x3x3 convolutions: 2 zero frames before the clip, none after, 1 pixel each side in
//    space (nn::CausalConv3d, whose per-conv cache carries the last 2 input frames between
//    chunks: exactly upstream's feature cache);
//  - RMS_norm: F.normalize over channels (x / max(||x||_2, 1e-12)) * sqrt(C) * gamma (+ bias);
//  - residual blocks (norm, SiLU, conv, norm, SiLU, conv; a 1x1x1 shortcut when the width
//    changes), a single-head attention over each frame's h*w positions in the middle blocks,
//    1x1x1 convs conv1 / conv2 around the latent;
//  - Resample: downsampling zero-pads right and bottom by 1, then a stride-2 3x3 conv; temporal
//    downsampling keeps frame 0 as is and runs an unpadded stride-2 (3,1,1) conv over the frames
//    (the first chunk's last frame carried into the next); upsampling is nearest 2x then a 3x3
//    conv to C/2; temporal upsampling keeps frame 0 and runs a causal (3,1,1) conv to 2C over
//    frames 1.. (zero-padded before frame 1), its (2, C) outputs interleaved in time;
//  - chunking as upstream: encode frame 0 alone, then 4 frames at a time (clips of 1 + 4k
//    frames); decode one latent frame at a time; chunked equals the whole clip in one pass
//    (chunk_mode Whole, for tests);
//  - latent normalization: encode returns (mu - mean) * inv_std, decode starts from
//    z / inv_std + mean (inv_std = 1/std in float32, as the WanVAE wrapper stores it).
// The residual, attention and resample blocks are HookableModules (sharding units, also when
// frozen); each chunk's cache frames go in and out of them as tensors, so a unit called once
// per chunk, sharded or recomputed, sees exactly what it saw in forward.
#pragma once

#include "nn/causal_conv.h"
#include "nn/name_map.h"
#include "zeroshard/nn/hookable.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace zeroshard::models::wan {

struct WanVaeConfig {
  int64_t dim = 96;
  int64_t z_dim = 16;
  std::vector<int64_t> dim_mult = {1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  std::vector<double> attn_scales;                           // must stay empty (see validate)
  std::vector<bool> temperal_downsample = {false, true, true};  // upstream's spelling
  std::vector<double> latent_mean, latent_std;               // per latent channel (z_dim each)

  int64_t spatial_factor() const { return int64_t{1} << (dim_mult.size() - 1); }
  int64_t time_factor() const;
  void validate() const;       // throws std::invalid_argument naming the field
  int64_t num_params() const;  // counted on a model built inside nn::DeferredInit
  // WanVAE_'s arguments (dim, z_dim, dim_mult, num_res_blocks, attn_scales,
  // temperal_downsample) and, when present, `_latent_mean` / `_latent_std`; absent ones keep
  // the released values.
  static WanVaeConfig from_json(const nlohmann::json& j, const std::string& source);
};

// The released Wan2.1_VAE.pth (126,892,531 parameters) with its latent mean and std.
WanVaeConfig wan21_vae();

// upstream RMS_norm: gamma [C, 1, 1, 1] ("images=False") or [C, 1, 1] ("images=True"), optional
// bias of the same shape; applied over dim 1 of [B, C, T, H, W].
class VaeRMSNormImpl : public torch::nn::Module {
 public:
  VaeRMSNormImpl(int64_t channels, bool images, bool bias = false);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor gamma, bias;

 private:
  double scale_;
};
TORCH_MODULE(VaeRMSNorm);

// A 2-D convolution's parameters ("weight" [O, I, k, k], "bias" [O]), applied per frame.
class Conv2dParamsImpl : public torch::nn::Module {
 public:
  Conv2dParamsImpl(int64_t in_channels, int64_t out_channels, int64_t kernel);
  // x [B, I, T, H, W] -> [B, O, T, H', W'] (a (1, k, k) 3-D convolution).
  torch::Tensor forward(const torch::Tensor& x, int64_t stride, int64_t padding);
  torch::Tensor weight, bias;
};
TORCH_MODULE(Conv2dParams);

// A VAE sharding unit: runs on a whole clip (cache null) or on one chunk, taking and leaving
// `slots()` entries of the clip's feature cache through its hooks as tensors.
class VaeUnit : public nn::HookableModule {
 public:
  torch::Tensor forward(const torch::Tensor& x, nn::FeatureCache* cache);
  virtual int64_t slots() const = 0;

 protected:
  // cache: this unit's own slots (empty on the first chunk), or null for a whole clip.
  virtual torch::Tensor run(const torch::Tensor& x, nn::FeatureCache* cache) = 0;
};

class ResidualBlockImpl : public VaeUnit {
 public:
  ResidualBlockImpl(int64_t in_dim, int64_t out_dim);
  int64_t slots() const override { return 2; }
  VaeRMSNorm norm1{nullptr}, norm2{nullptr};               // residual.0, residual.3
  nn::CausalConv3d conv1{nullptr}, conv2{nullptr};          // residual.2, residual.6
  nn::CausalConv3d shortcut{nullptr};                       // null when in_dim == out_dim

 protected:
  torch::Tensor run(const torch::Tensor& x, nn::FeatureCache* cache) override;
};
TORCH_MODULE(ResidualBlock);

class AttentionBlockImpl : public VaeUnit {
 public:
  explicit AttentionBlockImpl(int64_t dim);
  int64_t slots() const override { return 0; }
  VaeRMSNorm norm{nullptr};
  Conv2dParams to_qkv{nullptr}, proj{nullptr};

 protected:
  torch::Tensor run(const torch::Tensor& x, nn::FeatureCache* cache) override;
};
TORCH_MODULE(AttentionBlock);

class ResampleImpl : public VaeUnit {
 public:
  enum class Mode { Downsample2d, Downsample3d, Upsample2d, Upsample3d };
  ResampleImpl(int64_t dim, Mode mode);
  int64_t slots() const override { return mode_ == Mode::Downsample3d || mode_ == Mode::Upsample3d ? 1 : 0; }
  Conv2dParams conv{nullptr};           // resample.1
  nn::CausalConv3d time_conv{nullptr};  // 3-D modes only

 protected:
  torch::Tensor run(const torch::Tensor& x, nn::FeatureCache* cache) override;

 private:
  Mode mode_;
};
TORCH_MODULE(Resample);

// Encoder3d / Decoder3d: conv1, the unit lists, head (norm "head.0", conv "head.2").
class VaeCoderImpl : public torch::nn::Module {
 public:
  VaeCoderImpl(const WanVaeConfig& c, bool decoder);
  torch::Tensor forward(const torch::Tensor& x, nn::FeatureCache* cache);
  nn::CausalConv3d conv1{nullptr}, head_conv{nullptr};
  VaeRMSNorm head_norm{nullptr};
  torch::nn::ModuleList middle{nullptr};
  torch::nn::ModuleList stages{nullptr};  // "downsamples" (encoder) / "upsamples" (decoder)

 private:
  bool decoder_;
};
TORCH_MODULE(VaeCoder);

class WanVaeImpl : public nn::HookableModule {
 public:
  enum class ChunkMode { Upstream, Whole };
  explicit WanVaeImpl(const WanVaeConfig& c);

  // video [B, 3, 1 + 4k, H, W] in [-1, 1] (H, W multiples of the spatial factor) ->
  // normalized latent mean [B, z_dim, 1 + k', H/8, W/8]; mean / inv_std [z_dim] (gradients flow).
  // chunks (Upstream mode): the encoder passes to run, at least the clip's own (encode_chunks);
  // the extra ones run on zero frames after the clip and are dropped, so ranks whose clips
  // differ in length gather their sharded units in step. The result is the clip's alone.
  torch::Tensor encode(const torch::Tensor& video, const torch::Tensor& mean, const torch::Tensor& inv_std,
                       ChunkMode mode = ChunkMode::Upstream, int64_t chunks = 0);
  torch::Tensor encode(const torch::Tensor& video, int64_t chunks = 0);  // with the config's mean and 1/std
  // Upstream's encoder passes for a clip of `frames` = 1 + 4k frames: 1 + k.
  static int64_t encode_chunks(int64_t frames) { return 1 + (frames - 1) / 4; }
  // z [B, z_dim, T, h, w] (normalized) -> video [B, 3, 1 + 4(T-1), 8h, 8w], not clamped.
  torch::Tensor decode(const torch::Tensor& z, const torch::Tensor& mean, const torch::Tensor& inv_std,
                       ChunkMode mode = ChunkMode::Upstream);
  torch::Tensor decode(const torch::Tensor& z);
  // The config's latent mean and 1/std (float32 reciprocal, as upstream) in `dtype`.
  std::pair<torch::Tensor, torch::Tensor> latent_scale(at::ScalarType dtype) const;
  // wan_vae_init for every parameter (a frozen tower normally loads Wan2.1_VAE.pth instead).
  void reset_parameters(uint64_t seed);
  const WanVaeConfig& config() const { return config_; }

  VaeCoder encoder{nullptr}, decoder{nullptr};
  nn::CausalConv3d conv1{nullptr}, conv2{nullptr};

 private:
  torch::Tensor encode_body(const torch::Tensor& video, const torch::Tensor& mean, const torch::Tensor& inv_std,
                            ChunkMode mode, int64_t chunks);
  torch::Tensor decode_body(const torch::Tensor& z, const torch::Tensor& mean, const torch::Tensor& inv_std,
                            ChunkMode mode);
  WanVaeConfig config_;
};
TORCH_MODULE(WanVae);

// Original names (ours, Wan2.1_VAE.pth) <-> diffusers AutoencoderKLWan names (theirs; also
// Qwen-Image's vae/), after diffusers' scripts/convert_wan_to_diffusers.py: conv1 / conv2 ->
// quant_conv / post_quant_conv; encoder/decoder conv1 -> conv_in, head.0 / head.2 -> norm_out /
// conv_out, middle.{0, 1, 2} -> mid_block.{resnets.0, attentions.0, resnets.1}; residual.{0, 2, 3,
// 6} / shortcut -> norm1, conv1, norm2, conv2, conv_shortcut; encoder.downsamples.N ->
// encoder.down_blocks.N; decoder.upsamples.N -> decoder.up_blocks.<level>.resnets.<j> or
// .upsamplers.0 (num_res_blocks + 1 blocks and one upsampler per level). Renames only.
nn::NameMap vae_diffusers_name_map(const WanVaeConfig& c);

// The initial value of parameter `name`, keyed by (seed, name): gammas 1, biases 0, conv weights
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch's default bound for convolutions).
void wan_vae_init(uint64_t seed, const std::string& name, at::Tensor& param);

}  // namespace zeroshard::models::wan
