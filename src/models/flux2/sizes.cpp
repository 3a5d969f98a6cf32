#include "models/flux2/sizes.h"

namespace zeroshard::models::flux2 {

Flux2Config flux2_dev() { return Flux2Config{}; }  // Flux2DiT's constructor defaults

Flux2Config flux2_klein_4b() {
  Flux2Config c;  // extra_kwargs of FLUX.2-klein-4B transformer
  c.guidance_embeds = false;
  c.joint_attention_dim = 7680;
  c.num_attention_heads = 24;
  c.num_layers = 5;
  c.num_single_layers = 20;
  return c;
}

Flux2Config flux2_klein_9b() {
  Flux2Config c;  // extra_kwargs of FLUX.2-klein-9B transformer
  c.guidance_embeds = false;
  c.joint_attention_dim = 12288;
  c.num_attention_heads = 32;
  c.num_layers = 8;
  c.num_single_layers = 24;
  return c;
}

Flux2VaeConfig flux2_vae() {
  Flux2VaeConfig c;  // Flux2VAE's constructor defaults = FLUX.2-dev vae/config.json
  c.kl.naming = flux::VaeNaming::Diffusers;
  c.kl.in_channels = 3;
  c.kl.out_channels = 3;
  c.kl.block_channels = {128, 256, 512, 512};
  c.kl.stem_channels = 128;
  c.kl.layers = 2;
  c.kl.latent_channels = 32;
  c.kl.groups = 32;
  c.kl.eps = 1e-6;
  c.kl.mid_attention = true;
  c.use_quant_conv = true;
  c.use_post_quant_conv = true;
  c.batch_norm_eps = 1e-4;
  c.patch_h = c.patch_w = 2;
  return c;
}

int64_t flux2_vae_param_count(const Flux2VaeConfig& c, bool encoder, bool decoder) {
  const int64_t z = c.kl.latent_channels;
  int64_t n = 0;
  if (encoder) n += flux::kl_encoder_param_count(c.kl) + (c.use_quant_conv ? 2 * z * 2 * z + 2 * z : 0);
  if (decoder) n += flux::kl_decoder_param_count(c.kl) + (c.use_post_quant_conv ? z * z + z : 0);
  return n;
}

}  // namespace zeroshard::models::flux2
