// The FLUX.1 autoencoder (BFL src/flux/modules/autoencoder.py `AutoEncoder`, ae.safetensors
// names) on the shared KL VAE (kl_vae.h, Bfl layout): encode gives the latent MEAN (sample_z
// False, util.load_ae's setting; the log-variance half of conv_out is dropped, no sampling)
// mapped to the diffusion space as scale_factor * (mean - shift_factor); decode undoes that
// (z / scale_factor + shift_factor) and runs the decoder, not clamped. Z-Image uses it too.
#pragma once

#include "models/flux/kl_vae.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>

namespace zeroshard::models::flux {

struct Flux1VaeConfig {
  int64_t in_channels = 3;
  int64_t out_ch = 3;
  int64_t ch = 128;
  std::vector<int64_t> ch_mult = {1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  int64_t z_channels = 16;
  double scale_factor = 0.3611;
  double shift_factor = 0.1159;

  // Reads AutoEncoderParams' fields (`resolution` is unused by the computation).
  static Flux1VaeConfig from_json(const nlohmann::json& j, const std::string& source);
  KlVaeConfig kl() const;
};

// Holds the halves asked for ("encoder", "decoder"): a reference case of one method ships only
// that half, and a training pipeline that encodes a cache needs only the encoder.
class Flux1AutoEncoderImpl : public torch::nn::Module {
 public:
  Flux1AutoEncoderImpl(const Flux1VaeConfig& c, bool with_encoder, bool with_decoder);
  torch::Tensor encode(const torch::Tensor& x);  // [B, 3, H, W] in [-1, 1] -> [B, z, H/f, W/f]
  torch::Tensor decode(const torch::Tensor& z);  // -> [B, 3, h*f, w*f]
  KlEncoder encoder{nullptr};
  KlDecoder decoder{nullptr};

 private:
  Flux1VaeConfig config_;
};
TORCH_MODULE(Flux1AutoEncoder);

}  // namespace zeroshard::models::flux
