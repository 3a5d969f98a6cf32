#include "models/flux/flux1_vae.h"

#include "models/flux/dit_common.h"

#include <stdexcept>

namespace zeroshard::models::flux {

Flux1VaeConfig Flux1VaeConfig::from_json(const nlohmann::json& j, const std::string& source) {
  Flux1VaeConfig c;
  c.in_channels = require(j, "in_channels", source).get<int64_t>();
  c.out_ch = require(j, "out_ch", source).get<int64_t>();
  c.ch = require(j, "ch", source).get<int64_t>();
  c.ch_mult = require(j, "ch_mult", source).get<std::vector<int64_t>>();
  c.num_res_blocks = require(j, "num_res_blocks", source).get<int64_t>();
  c.z_channels = require(j, "z_channels", source).get<int64_t>();
  c.scale_factor = require(j, "scale_factor", source).get<double>();
  c.shift_factor = require(j, "shift_factor", source).get<double>();
  if (c.ch_mult.empty()) throw std::invalid_argument(source + ": ch_mult is empty");
  c.kl().validate(source);
  return c;
}

KlVaeConfig Flux1VaeConfig::kl() const {
  KlVaeConfig k;
  k.naming = VaeNaming::Bfl;
  k.in_channels = in_channels;
  k.out_channels = out_ch;
  k.stem_channels = ch;  // BFL's conv_in gives ch; level i takes ch * (1, ch_mult...)[i]
  k.block_channels.clear();
  for (int64_t m : ch_mult) k.block_channels.push_back(ch * m);
  k.layers = num_res_blocks;
  k.latent_channels = z_channels;
  k.groups = 32;  // BFL hard-codes GroupNorm(32, eps 1e-6)
  k.eps = 1e-6;
  k.mid_attention = true;
  return k;
}

Flux1AutoEncoderImpl::Flux1AutoEncoderImpl(const Flux1VaeConfig& c, bool with_encoder, bool with_decoder)
    : config_(c) {
  if (with_encoder) encoder = register_module("encoder", KlEncoder(c.kl()));
  if (with_decoder) decoder = register_module("decoder", KlDecoder(c.kl()));
}

torch::Tensor Flux1AutoEncoderImpl::encode(const torch::Tensor& x) {
  TORCH_CHECK(encoder, "Flux1AutoEncoder: built without its encoder");
  const torch::Tensor mean = encoder(x).narrow(1, 0, config_.z_channels);  // (mean | logvar): the mean
  return config_.scale_factor * (mean - config_.shift_factor);
}

torch::Tensor Flux1AutoEncoderImpl::decode(const torch::Tensor& z) {
  TORCH_CHECK(decoder, "Flux1AutoEncoder: built without its decoder");
  return decoder(z / config_.scale_factor + config_.shift_factor);
}

}  // namespace zeroshard::models::flux
