// The Wan VAE's original names (Wan2.1_VAE.pth) <-> diffusers' AutoencoderKLWan names.
#include "models/wan/vae.h"

namespace zeroshard::models::wan {

namespace {
// A residual block: residual.{0, 2, 3, 6} / shortcut -> norm1, conv1, norm2, conv2, conv_shortcut.
void residual_rules(nn::NameMap& m, const std::string& ours, const std::string& theirs) {
  m.rename(ours + ".residual.0.gamma", theirs + ".norm1.gamma");
  m.rename(ours + ".residual.2.**", theirs + ".conv1.**");
  m.rename(ours + ".residual.3.gamma", theirs + ".norm2.gamma");
  m.rename(ours + ".residual.6.**", theirs + ".conv2.**");
  m.rename(ours + ".shortcut.**", theirs + ".conv_shortcut.**");
}
}  // namespace

nn::NameMap vae_diffusers_name_map(const WanVaeConfig& c) {
  c.validate();
  nn::NameMap m;
  m.rename("conv1.**", "quant_conv.**");
  m.rename("conv2.**", "post_quant_conv.**");
  for (const std::string side : {"encoder", "decoder"}) {
    m.rename(side + ".conv1.**", side + ".conv_in.**");
    m.rename(side + ".head.0.gamma", side + ".norm_out.gamma");
    m.rename(side + ".head.2.**", side + ".conv_out.**");
    residual_rules(m, side + ".middle.0", side + ".mid_block.resnets.0");
    m.rename(side + ".middle.1.**", side + ".mid_block.attentions.0.**");
    residual_rules(m, side + ".middle.2", side + ".mid_block.resnets.1");
  }
  // The encoder keeps upstream's flat list (down_blocks.N = downsamples.N).
  residual_rules(m, "encoder.downsamples.*", "encoder.down_blocks.*");
  m.rename("encoder.downsamples.*.**", "encoder.down_blocks.*.**");  // resample.1, time_conv
  // The decoder groups each level's num_res_blocks + 1 residual blocks and its upsampler:
  // upsamples.N -> up_blocks.level.resnets.j / up_blocks.level.upsamplers.0.
  int64_t flat = 0;
  const size_t levels = c.dim_mult.size();
  for (size_t level = 0; level < levels; ++level) {
    const std::string up = "decoder.up_blocks." + std::to_string(level);
    for (int64_t j = 0; j <= c.num_res_blocks; ++j) {
      residual_rules(m, "decoder.upsamples." + std::to_string(flat++), up + ".resnets." + std::to_string(j));
    }
    if (level + 1 < levels) m.rename("decoder.upsamples." + std::to_string(flat++) + ".**", up + ".upsamplers.0.**");
  }
  return m;
}

}  // namespace zeroshard::models::wan
