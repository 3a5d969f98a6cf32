#include "models/flux/sizes.h"

namespace zeroshard::models::flux {

Flux1Config flux1_dev() {
  Flux1Config c;  // util.py configs["flux-dev"].params
  c.in_channels = 64;
  c.out_channels = 64;
  c.vec_in_dim = 768;
  c.context_in_dim = 4096;
  c.hidden_size = 3072;
  c.mlp_ratio = 4.0;
  c.num_heads = 24;
  c.depth = 19;
  c.depth_single_blocks = 38;
  c.axes_dim = {16, 56, 56};
  c.theta = 10000;
  c.qkv_bias = true;
  c.guidance_embed = true;
  return c;
}

Flux1Config flux1_schnell() {
  Flux1Config c = flux1_dev();  // configs["flux-schnell"]: the same but guidance_embed False
  c.guidance_embed = false;
  return c;
}

Flux1VaeConfig flux1_vae() {
  Flux1VaeConfig c;  // configs[...].ae_params (the same for dev and schnell)
  c.in_channels = 3;
  c.out_ch = 3;
  c.ch = 128;
  c.ch_mult = {1, 2, 4, 4};
  c.num_res_blocks = 2;
  c.z_channels = 16;
  c.scale_factor = 0.3611;
  c.shift_factor = 0.1159;
  return c;
}

int64_t flux1_vae_param_count(const Flux1VaeConfig& c, bool encoder, bool decoder) {
  return (encoder ? kl_encoder_param_count(c.kl()) : 0) + (decoder ? kl_decoder_param_count(c.kl()) : 0);
}

}  // namespace zeroshard::models::flux
