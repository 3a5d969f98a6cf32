// The `vae` series: a causal 3-D-convolution video VAE in the Wan-VAE style. Encoder and
// decoder are stacks of causal Conv3d residual blocks with spatial (and some temporal)
// down/up-sampling; a clip can be encoded and decoded a few frames at a time, each causal
// convolution carrying its last frames to the next chunk (nn::FeatureCache), with the same
// result as the whole clip. Plain torch::nn: the stages are HookableModules (the sharding
// engine's units), and the cache crosses them as explicit tensor inputs and outputs, so a
// stage that runs once per chunk, sharded or recomputed, sees exactly what it saw in forward.
#pragma once

#include "nn/causal_conv.h"
#include "zeroshard/nn/hookable.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace zeroshard::models {

struct VaeConfig {
  int64_t base_channels = 16;
  std::vector<int64_t> channel_mult = {1, 2, 2};  // channels of level i: base_channels * channel_mult[i]
  std::vector<bool> temporal_down = {false, true};  // per downsampling (levels - 1): also halve time
  int64_t z_channels = 4;
  int64_t num_res_blocks = 1;
  double norm_eps = 1e-6;
  double kl_weight = 1e-3;
  int64_t chunk_frames = 4;  // frames per encoder chunk (0: the whole clip at once)

  int64_t levels() const { return static_cast<int64_t>(channel_mult.size()); }
  int64_t spatial_factor() const { return int64_t{1} << (levels() - 1); }
  int64_t time_factor() const;
  int64_t channels(int64_t level) const { return base_channels * channel_mult[static_cast<size_t>(level)]; }
  int64_t num_params() const;
  // Throws std::invalid_argument naming the vae.* key. frames/size: the clips to be coded.
  void validate(int64_t frames, int64_t size) const;
};

// norm → SiLU → causal conv, twice, plus a (1x1x1 conv) shortcut when channels change.
class VaeResBlockImpl : public torch::nn::Module {
 public:
  VaeResBlockImpl(int64_t in_channels, int64_t out_channels, double eps);
  torch::Tensor forward(const torch::Tensor& x, nn::FeatureCache* cache);
  nn::ChannelRMSNorm norm1{nullptr}, norm2{nullptr};
  nn::CausalConv3d conv1{nullptr}, conv2{nullptr}, shortcut{nullptr};  // shortcut null if in == out
};
TORCH_MODULE(VaeResBlock);

// Halves H and W (stride-2 conv), and T too when temporal (stride-2 causal conv over time).
class VaeDownsampleImpl : public torch::nn::Module {
 public:
  VaeDownsampleImpl(int64_t channels, bool temporal);
  torch::Tensor forward(const torch::Tensor& x, nn::FeatureCache* cache);
  nn::CausalConv3d conv{nullptr}, time_conv{nullptr};
};
TORCH_MODULE(VaeDownsample);

// Doubles T when temporal (a causal conv to 2C channels, channel group i → frame 2t+i), then
// H and W (nearest ×2, conv).
class VaeUpsampleImpl : public torch::nn::Module {
 public:
  VaeUpsampleImpl(int64_t channels, bool temporal);
  torch::Tensor forward(const torch::Tensor& x, nn::FeatureCache* cache);
  nn::CausalConv3d time_conv{nullptr}, conv{nullptr};
};
TORCH_MODULE(VaeUpsample);

// One level: residual blocks, then an optional resampler. A sharding unit; called once per chunk.
class VaeStageImpl : public nn::HookableModule {
 public:
  VaeStageImpl(int64_t in_channels, int64_t out_channels, int64_t blocks, double eps, int resample, bool temporal);
  // cache: the clip's feature cache; this stage's slots travel through the hooks as tensors.
  torch::Tensor forward(const torch::Tensor& x, nn::FeatureCache* cache);
  torch::nn::ModuleList blocks{nullptr};
  VaeDownsample down{nullptr};  // resample < 0 (registered as "sample")
  VaeUpsample up{nullptr};      // resample > 0 (registered as "sample")
  int64_t cache_slots() const { return slots_; }

 private:
  torch::Tensor run(const torch::Tensor& x, nn::FeatureCache* cache);
  int64_t slots_ = 0;
};
TORCH_MODULE(VaeStage);

class VaeEncoderImpl : public torch::nn::Module {
 public:
  explicit VaeEncoderImpl(const VaeConfig& c);
  torch::Tensor forward(const torch::Tensor& x, nn::FeatureCache* cache);  // [B, 2Z, T', H', W']
  nn::CausalConv3d conv_in{nullptr}, conv_out{nullptr};
  torch::nn::ModuleList down{nullptr};
  VaeStage mid{nullptr};
  nn::ChannelRMSNorm norm_out{nullptr};
};
TORCH_MODULE(VaeEncoder);

class VaeDecoderImpl : public torch::nn::Module {
 public:
  explicit VaeDecoderImpl(const VaeConfig& c);
  torch::Tensor forward(const torch::Tensor& z, nn::FeatureCache* cache);
  nn::CausalConv3d conv_in{nullptr}, conv_out{nullptr};
  VaeStage mid{nullptr};
  torch::nn::ModuleList up{nullptr};
  nn::ChannelRMSNorm norm_out{nullptr};
};
TORCH_MODULE(VaeDecoder);

struct VaeOutput {
  torch::Tensor recon;            // [B, 3, T, H, W], fp32
  torch::Tensor mean, logvar;     // [B, Z, T / time_factor, H / s, W / s], fp32
  torch::Tensor loss, recon_loss, kl;  // scalars, fp32: loss = recon_loss + kl_weight * kl
};

class VideoVaeImpl : public nn::HookableModule {
 public:
  explicit VideoVaeImpl(const VaeConfig& c);
  // clip [B, 3, T, H, W] in [-1, 1]. noise (same shape as mean): z = mean + exp(logvar / 2) *
  // noise; undefined: z = mean. chunk_frames: frames per chunk (0: the whole clip at once).
  VaeOutput forward(const torch::Tensor& clip, const torch::Tensor& noise, int64_t chunk_frames);
  // mean and logvar of the clip, chunk by chunk ([B, 2Z, ...] split in two). Like forward, these
  // run through the module's hooks: the VAE may itself be a sharding unit (a frozen tower).
  std::pair<torch::Tensor, torch::Tensor> encode(const torch::Tensor& clip, int64_t chunk_frames);
  torch::Tensor decode(const torch::Tensor& z, int64_t chunk_frames);
  void reset_parameters(uint64_t seed);  // vae_init for every parameter (not inside DeferredInit)
  const VaeConfig& config() const { return config_; }

  VaeEncoder encoder{nullptr};
  VaeDecoder decoder{nullptr};

 private:
  std::pair<torch::Tensor, torch::Tensor> encode_body(const torch::Tensor& clip, int64_t chunk_frames);
  torch::Tensor decode_body(const torch::Tensor& z, int64_t chunk_frames);
  VaeConfig config_;
};
TORCH_MODULE(VideoVae);

// The initial value of parameter `name`, keyed by (seed, name): norm weights 1, biases 0,
// convolution weights N(0, 1/fan_in) — with the second conv of each residual block and the
// decoder's output scaled down (0.1×), so the blocks start close to identity.
void vae_init(const VaeConfig& c, uint64_t seed, const std::string& name, at::Tensor& param);

// "1,2,2" <-> {1, 2, 2}; "false,true" <-> {false, true}. Throws naming `key` on bad text.
std::vector<int64_t> parse_int_list(const std::string& key, const std::string& text);
std::vector<bool> parse_bool_list(const std::string& key, const std::string& text);
std::string int_list_text(const std::vector<int64_t>& v);
std::string bool_list_text(const std::vector<bool>& v);

}  // namespace zeroshard::models
