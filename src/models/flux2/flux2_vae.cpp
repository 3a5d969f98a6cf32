#include "models/flux2/flux2_vae.h"

#include "models/flux/dit_common.h"
#include "zeroshard/nn/deferred.h"

#include <stdexcept>

namespace zeroshard::models::flux2 {

Flux2VaeConfig Flux2VaeConfig::from_json(const nlohmann::json& j, const std::string& source) {
  using flux::require;
  Flux2VaeConfig c;
  auto& k = c.kl;
  k.naming = flux::VaeNaming::Diffusers;
  k.in_channels = require(j, "in_channels", source).get<int64_t>();
  k.out_channels = require(j, "out_channels", source).get<int64_t>();
  k.block_channels = require(j, "block_out_channels", source).get<std::vector<int64_t>>();
  if (k.block_channels.empty()) throw std::invalid_argument(source + ": block_out_channels is empty");
  k.stem_channels = k.block_channels[0];  // diffusers' conv_in gives block_out_channels[0]
  k.layers = require(j, "layers_per_block", source).get<int64_t>();
  k.latent_channels = require(j, "latent_channels", source).get<int64_t>();
  k.groups = require(j, "norm_num_groups", source).get<int64_t>();
  k.eps = 1e-6;  // diffusers' Encoder / Decoder pass resnet_eps 1e-6 and GroupNorm eps 1e-6 as literals
  k.mid_attention = j.value("mid_block_add_attention", true);
  const std::string act = j.value("act_fn", std::string("silu"));
  if (act != "silu" && act != "swish") throw std::invalid_argument(source + ": act_fn '" + act + "': only silu");
  for (const char* key : {"down_block_types", "up_block_types"}) {
    const auto types = require(j, key, source).get<std::vector<std::string>>();
    const std::string want = key[0] == 'd' ? "DownEncoderBlock2D" : "UpDecoderBlock2D";
    if (types.size() != k.block_channels.size()) {
      throw std::invalid_argument(source + ": " + key + " has " + std::to_string(types.size()) +
                                  " entries, block_out_channels " + std::to_string(k.block_channels.size()));
    }
    for (const auto& t : types) {
      if (t != want) throw std::invalid_argument(source + ": " + key + " entry '" + t + "': only " + want);
    }
  }
  c.use_quant_conv = j.value("use_quant_conv", true);
  c.use_post_quant_conv = j.value("use_post_quant_conv", true);
  c.batch_norm_eps = require(j, "batch_norm_eps", source).get<double>();
  const auto patch = require(j, "patch_size", source).get<std::vector<int64_t>>();
  if (patch.size() != 2) throw std::invalid_argument(source + ": patch_size must be [P, Q]");
  c.patch_h = patch[0];
  c.patch_w = patch[1];
  k.validate(source);
  return c;
}

torch::Tensor patchify(const torch::Tensor& x, int64_t p, int64_t q) {
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2) / p, W = x.size(3) / q;
  TORCH_CHECK(H * p == x.size(2) && W * q == x.size(3), "patchify: ", x.sizes(), " is not divisible by ", p, "x", q);
  return x.reshape({B, C, H, p, W, q}).permute({0, 1, 3, 5, 2, 4}).reshape({B, C * p * q, H, W});
}

torch::Tensor unpatchify(const torch::Tensor& x, int64_t p, int64_t q) {
  const int64_t B = x.size(0), C = x.size(1) / (p * q), H = x.size(2), W = x.size(3);
  TORCH_CHECK(C * p * q == x.size(1), "unpatchify: ", x.size(1), " channels are not divisible by ", p * q);
  return x.reshape({B, C, p, q, H, W}).permute({0, 1, 4, 2, 5, 3}).reshape({B, C, H * p, W * q});
}

Flux2VaeImpl::Flux2VaeImpl(const Flux2VaeConfig& c, bool with_encoder, bool with_decoder, bool stats_as_parameters)
    : config_(c) {
  const int64_t z = c.kl.latent_channels;
  if (with_encoder) {
    encoder = register_module("encoder", flux::KlEncoder(c.kl));
    if (c.use_quant_conv) quant_conv = register_module("quant_conv", flux::Conv2d(2 * z, 2 * z, 1));
  }
  if (with_decoder) {
    decoder = register_module("decoder", flux::KlDecoder(c.kl));
    if (c.use_post_quant_conv) post_quant_conv = register_module("post_quant_conv", flux::Conv2d(z, z, 1));
  }
  // BatchNorm2d(P*Q*latent, affine=False): only its running statistics (buffers; the released
  // file's bn.num_batches_tracked is not used by encode / decode and not kept).
  auto bn = register_module("bn", std::make_shared<torch::nn::Module>());
  if (stats_as_parameters) {
    running_mean = bn->register_parameter("running_mean", nn::new_parameter({c.normalized_channels()}), false);
    running_var = bn->register_parameter("running_var", nn::new_parameter({c.normalized_channels()}), false);
  } else {
    running_mean = bn->register_buffer("running_mean", nn::new_parameter({c.normalized_channels()}));
    running_var = bn->register_buffer("running_var", nn::new_parameter({c.normalized_channels()}));
  }
  if (!nn::DeferredInit::active()) running_var.fill_(1.0);
}

torch::Tensor Flux2VaeImpl::bn_std(const torch::Tensor& like) const {
  return at::sqrt(running_var.to(like.scalar_type()) + config_.batch_norm_eps).view({1, -1, 1, 1});
}

torch::Tensor Flux2VaeImpl::encode(const torch::Tensor& x) {
  TORCH_CHECK(encoder, "Flux2Vae: built without its encoder");
  torch::Tensor h = encoder(x);
  if (quant_conv) h = quant_conv(h);
  h = patchify(h, config_.patch_h, config_.patch_w).narrow(1, 0, config_.normalized_channels());
  return (h - running_mean.to(h.scalar_type()).view({1, -1, 1, 1})) / bn_std(h);
}

torch::Tensor Flux2VaeImpl::decode(const torch::Tensor& z) {
  TORCH_CHECK(decoder, "Flux2Vae: built without its decoder");
  TORCH_CHECK(z.dim() == 4 && z.size(1) == config_.normalized_channels(), "Flux2Vae.decode: expected [B, ",
              config_.normalized_channels(), ", h, w], got ", z.sizes());
  torch::Tensor h = z * bn_std(z) + running_mean.to(z.scalar_type()).view({1, -1, 1, 1});
  h = unpatchify(h, config_.patch_h, config_.patch_w);
  if (post_quant_conv) h = post_quant_conv(h);
  return decoder(h);
}

}  // namespace zeroshard::models::flux2
