// The 2-D KL autoencoder of the FLUX family (and of Stable Diffusion before it), one
// implementation under two checkpoint layouts with the same numerics:
//
//   Bfl       BFL's src/flux/modules/autoencoder.py (FLUX.1 ae.safetensors): encoder.down.N.
//             block.M, down.N.downsample.conv, mid.{block_1, attn_1, block_2}, attention q/k/v/
//             proj_out as 1x1 convs, norm_out; decoder.up.N indexed by LEVEL (up.{L-1} runs first),
//             up.N.upsample.conv; shortcut "nin_shortcut".
//   Diffusers diffusers' Encoder / Decoder (AutoencoderKL, AutoencoderKLFlux2 — FLUX.2's VAE):
//             down_blocks.N.resnets.M, downsamplers.0.conv, mid_block.{resnets.0, attentions.0,
//             resnets.1}, attention group_norm / to_q / to_k / to_v / to_out.0 as Linear,
//             conv_norm_out; decoder.up_blocks.N in RUN order (up_blocks.0 is the deepest);
//             shortcut "conv_shortcut".
//
// Shared conventions (both upstreams):
//  - GroupNorm(groups, eps 1e-6) everywhere; swish = x * sigmoid(x).
//  - ResnetBlock: norm1, swish, conv1 3x3, norm2, swish, conv2 3x3; a 1x1 shortcut conv on the
//    skip only when channels change; no time embedding, no dropout, output scale 1.
//  - Mid attention: GroupNorm, q/k/v projections with bias over channels at the h*w positions
//    (row-major), ONE head of size C, scale 1/sqrt(C), output projection, residual add.
//  - Downsample: zero-pad right and bottom by one (F.pad (0, 1, 0, 1)), 3x3 conv stride 2 no
//    padding. Upsample: nearest x2 (each pixel repeated 2x2), 3x3 conv padding 1.
//  - Encoder: conv_in, levels (each `layers` resnets, then a downsample except the last), mid
//    (resnet, attention, resnet), norm, swish, conv_out to 2 * latent channels (mean | logvar).
//  - Decoder: conv_in, mid, levels from the deepest (each layers + 1 resnets, then an upsample
//    except the shallowest), norm, swish, conv_out.
// The levels and the mids are HookableModules (the sharding units).
#pragma once

#include "nn/name_map.h"
#include "zeroshard/nn/hookable.h"
#include "zeroshard/param_source.h"

#include <torch/torch.h>

#include <array>
#include <string>
#include <vector>

namespace zeroshard::models::flux {

enum class VaeNaming { Bfl, Diffusers };

struct KlVaeConfig {
  VaeNaming naming = VaeNaming::Bfl;
  int64_t in_channels = 3;     // image channels into the encoder
  int64_t out_channels = 3;    // image channels out of the decoder
  int64_t stem_channels = 128;  // encoder conv_in output (BFL: ch; diffusers: block_out_channels[0])
  std::vector<int64_t> block_channels = {128, 256, 512, 512};  // per level, shallowest first
  int64_t layers = 2;           // encoder resnets per level (the decoder has layers + 1)
  int64_t latent_channels = 16;
  int64_t groups = 32;
  double eps = 1e-6;
  bool mid_attention = true;

  int64_t levels() const { return static_cast<int64_t>(block_channels.size()); }
  int64_t spatial_factor() const { return int64_t{1} << (levels() - 1); }
  // Throws std::invalid_argument naming `source` (channels not divisible by groups, no levels).
  void validate(const std::string& source) const;
};

// Conv2d with torch's parameter names ("weight" [out, in, k, k], "bias"); products through
// nn::conv2d (bf16 routing).
class Conv2dImpl : public torch::nn::Module {
 public:
  Conv2dImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = 0);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;

 private:
  int64_t stride_, padding_;
};
TORCH_MODULE(Conv2d);

class VaeResnetImpl : public torch::nn::Module {
 public:
  VaeResnetImpl(const KlVaeConfig& c, int64_t in, int64_t out);
  torch::Tensor forward(const torch::Tensor& x);
  std::shared_ptr<torch::nn::Module> norm1, norm2;  // nn::GroupNorm
  Conv2d conv1{nullptr}, conv2{nullptr}, shortcut{nullptr};  // shortcut null when in == out

 private:
  int64_t groups_;
  double eps_;
};
TORCH_MODULE(VaeResnet);

class VaeAttentionImpl : public torch::nn::Module {
 public:
  VaeAttentionImpl(const KlVaeConfig& c, int64_t channels);
  torch::Tensor forward(const torch::Tensor& x);
  // Projection weights as [C, C] matrices (BFL stores [C, C, 1, 1] convs: a view of those).
  std::array<torch::Tensor, 4> weights() const;  // q, k, v, out
  std::array<torch::Tensor, 4> biases() const;
  std::shared_ptr<torch::nn::Module> norm;
  std::array<std::shared_ptr<torch::nn::Module>, 4> proj;  // q, k, v, out: Conv2d (Bfl) or nn::Linear

 private:
  VaeNaming naming_;
  int64_t groups_;
  double eps_;
};
TORCH_MODULE(VaeAttention);

// Resnet, attention (optional), resnet.
class VaeMidImpl : public nn::HookableModule {
 public:
  VaeMidImpl(const KlVaeConfig& c, int64_t channels);
  torch::Tensor forward(const torch::Tensor& x);
  VaeResnet block1{nullptr}, block2{nullptr};
  VaeAttention attn{nullptr};  // null without mid attention
};
TORCH_MODULE(VaeMid);

// One resolution level: `blocks` resnets, then an optional resampler (-1 down, +1 up, 0 none).
class VaeLevelImpl : public nn::HookableModule {
 public:
  VaeLevelImpl(const KlVaeConfig& c, int64_t in, int64_t out, int64_t blocks, int resample);
  torch::Tensor forward(const torch::Tensor& x);
  std::vector<VaeResnet> resnets;
  Conv2d resample_conv{nullptr};

 private:
  int resample_;
};
TORCH_MODULE(VaeLevel);

class KlEncoderImpl : public torch::nn::Module {
 public:
  explicit KlEncoderImpl(const KlVaeConfig& c);
  // [B, in_channels, H, W] (H, W even at every level but the last) -> [B, 2 * latent, H/f, W/f].
  torch::Tensor forward(const torch::Tensor& x);
  Conv2d conv_in{nullptr}, conv_out{nullptr};
  std::vector<VaeLevel> levels;  // shallowest first (run order)
  VaeMid mid{nullptr};
  std::shared_ptr<torch::nn::Module> norm_out;

 private:
  KlVaeConfig config_;
};
TORCH_MODULE(KlEncoder);

class KlDecoderImpl : public torch::nn::Module {
 public:
  explicit KlDecoderImpl(const KlVaeConfig& c);
  // [B, latent, h, w] -> [B, out_channels, h*f, w*f].
  torch::Tensor forward(const torch::Tensor& z);
  Conv2d conv_in{nullptr}, conv_out{nullptr};
  VaeMid mid{nullptr};
  std::vector<VaeLevel> levels;  // deepest first (run order)
  std::shared_ptr<torch::nn::Module> norm_out;

 private:
  KlVaeConfig config_;
};
TORCH_MODULE(KlDecoder);

int64_t kl_encoder_param_count(const KlVaeConfig& c);
int64_t kl_decoder_param_count(const KlVaeConfig& c);

// kl_vae_names.cpp: the two layouts of one KL VAE's weights (encoder.* / decoder.* at the root,
// as the FLUX.1, Z-Image and FLUX.2 pipelines hold them). The map's "ours" is c.naming, "theirs"
// the other layout: Bfl encoder.down.N.block.M <-> Diffusers encoder.down_blocks.N.resnets.M,
// nin_shortcut <-> conv_shortcut, downsample.conv <-> downsamplers.0.conv, mid.block_1 / attn_1 /
// block_2 <-> mid_block.resnets.0 / attentions.0 / resnets.1, attention norm <-> group_norm and
// q / k / v / proj_out [C, C, 1, 1] <-> to_q / to_k / to_v / to_out.0 [C, C], norm_out <->
// conv_norm_out, and decoder.up.N (by level) <-> decoder.up_blocks.{L-1-N} (by run order).
// Every other name (conv_in, conv_out, quant convs) is the same in both.
nn::NameMap kl_vae_name_map(const KlVaeConfig& c);
// Which layout a weights file (io::SafetensorsSet path) is in: Diffusers when it holds
// {encoder,decoder}.conv_norm_out.*, Bfl when it holds {encoder,decoder}.norm_out.*; throws
// naming the file when neither.
VaeNaming kl_vae_file_naming(const std::string& path);
// A VAE's weights from a file in either layout (kl_vae_name_map when it is not c.naming's; a
// torch.save file is read as ours),
// `extra` adding the series' own rules (FLUX.2: its BatchNorm's update counter left unread).
std::shared_ptr<ParamSource> kl_vae_file_source(const std::string& path, const KlVaeConfig& c,
                                                const nn::NameMap& extra = {});

}  // namespace zeroshard::models::flux
