// The FLUX.2 VAE as the pipeline uses it (DiffSynth `Flux2VAE` = diffusers AutoencoderKLFlux2 +
// what Flux2Pipeline does around it), diffusers names: encoder.*, quant_conv, decoder.*,
// post_quant_conv, bn.running_mean / bn.running_var (buffers; BatchNorm2d without affine).
// The autoencoder is the shared KL VAE (models/flux/kl_vae.h, Diffusers layout).
//
//   encode(x): moments = quant_conv(encoder(x)) [B, 2 * latent, H/f, W/f]; patchify P x Q:
//              out[b, c*P*Q + p*Q + q, i, j] = in[b, c, P*i + p, Q*j + q]; keep the first
//              P*Q*latent channels (= the mean's: the log-variance is dropped, no sampling);
//              then (h - running_mean) / sqrt(running_var + batch_norm_eps) per channel.
//   decode(z): z * sqrt(running_var + eps) + running_mean, unpatchify, post_quant_conv, decoder
//              (not clamped).
// DiffSynth writes the 128 channels and the eps 1e-4 as literals; they equal P*Q*latent_channels
// and batch_norm_eps of every released config, which is what is read here.
#pragma once

#include "models/flux/kl_vae.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace zeroshard::models::flux2 {

struct Flux2VaeConfig {
  flux::KlVaeConfig kl;
  bool use_quant_conv = true, use_post_quant_conv = true;
  double batch_norm_eps = 1e-4;
  int64_t patch_h = 2, patch_w = 2;

  int64_t normalized_channels() const { return patch_h * patch_w * kl.latent_channels; }
  // Reads AutoencoderKLFlux2's fields (diffusers names); throws naming `source` and the field.
  static Flux2VaeConfig from_json(const nlohmann::json& j, const std::string& source);
};

class Flux2VaeImpl : public torch::nn::Module {
 public:
  // Holds the halves asked for (a reference case of one method ships only its half).
  // stats_as_parameters: bn.running_mean / bn.running_var registered as frozen parameters
  // (requires_grad false) instead of buffers, under the same names: the sharding engine holds,
  // initializes and loads parameters only, so a pipeline trained under it keeps them there (the
  // flux2 series); the reference cases load them as buffers.
  Flux2VaeImpl(const Flux2VaeConfig& c, bool with_encoder, bool with_decoder, bool stats_as_parameters = false);
  torch::Tensor encode(const torch::Tensor& x);  // [B, 3, H, W] -> [B, P*Q*latent, H/(f P), W/(f Q)]
  torch::Tensor decode(const torch::Tensor& z);  // the inverse shape
  flux::KlEncoder encoder{nullptr};
  flux::KlDecoder decoder{nullptr};
  flux::Conv2d quant_conv{nullptr}, post_quant_conv{nullptr};
  torch::Tensor running_mean, running_var;  // registered as bn.running_mean / bn.running_var

 private:
  torch::Tensor bn_std(const torch::Tensor& like) const;
  Flux2VaeConfig config_;
};
TORCH_MODULE(Flux2Vae);

// [B, C, H*P, W*Q] -> [B, C*P*Q, H, W] and back.
torch::Tensor patchify(const torch::Tensor& x, int64_t p, int64_t q);
torch::Tensor unpatchify(const torch::Tensor& x, int64_t p, int64_t q);

}  // namespace zeroshard::models::flux2
