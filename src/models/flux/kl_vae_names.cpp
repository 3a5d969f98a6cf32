// The KL VAE's two checkpoint layouts (kl_vae.h): BFL's (FLUX.1 ae.safetensors) and diffusers'
// (every diffusers-format vae/ folder: FLUX.1, Z-Image, FLUX.2).
#include "io/safetensors.h"
#include "io/torch_pth.h"
#include "models/flux/kl_vae.h"

#include <stdexcept>

namespace zeroshard::models::flux {

namespace {

// One rule with our / their patterns in the map's orientation: `bfl` and `diffusers` are the two
// layouts' patterns, ours is c.naming's.
class Rules {
 public:
  explicit Rules(bool ours_bfl) : ours_bfl_(ours_bfl) {}
  void rename(const std::string& bfl, const std::string& diffusers) {
    ours_bfl_ ? map_.rename(bfl, diffusers) : map_.rename(diffusers, bfl);
  }
  // BFL's 1x1 conv [C, C, 1, 1] <-> diffusers' Linear [C, C].
  void conv_linear(const std::string& bfl, const std::string& diffusers) {
    const nn::ShapeFn to_linear = [](const std::vector<int64_t>& s) { return std::vector<int64_t>{s.at(0), s.at(1)}; };
    const nn::ShapeFn to_conv = [](const std::vector<int64_t>& s) { return std::vector<int64_t>{s.at(0), s.at(1), 1, 1}; };
    ours_bfl_ ? map_.reshape(bfl, diffusers, to_linear, to_conv) : map_.reshape(diffusers, bfl, to_conv, to_linear);
  }
  nn::NameMap take() { return std::move(map_); }

 private:
  bool ours_bfl_;
  nn::NameMap map_;
};

}  // namespace

nn::NameMap kl_vae_name_map(const KlVaeConfig& c) {
  Rules r(c.naming == VaeNaming::Bfl);
  // First match wins: the shortcut convs before the resnets that hold them.
  r.rename("encoder.down.*.block.*.nin_shortcut.**", "encoder.down_blocks.*.resnets.*.conv_shortcut.**");
  r.rename("encoder.down.*.block.**", "encoder.down_blocks.*.resnets.**");
  r.rename("encoder.down.*.downsample.conv.**", "encoder.down_blocks.*.downsamplers.0.conv.**");
  const int64_t L = c.levels();
  for (int64_t level = 0; level < L; ++level) {
    const std::string bfl = "decoder.up." + std::to_string(level);
    const std::string diffusers = "decoder.up_blocks." + std::to_string(L - 1 - level);
    r.rename(bfl + ".block.*.nin_shortcut.**", diffusers + ".resnets.*.conv_shortcut.**");
    r.rename(bfl + ".block.**", diffusers + ".resnets.**");
    r.rename(bfl + ".upsample.conv.**", diffusers + ".upsamplers.0.conv.**");
  }
  for (const std::string half : {"encoder", "decoder"}) {
    r.rename(half + ".mid.block_1.**", half + ".mid_block.resnets.0.**");
    r.rename(half + ".mid.block_2.**", half + ".mid_block.resnets.1.**");
    const std::string bfl = half + ".mid.attn_1.", diffusers = half + ".mid_block.attentions.0.";
    r.rename(bfl + "norm.**", diffusers + "group_norm.**");
    const char* bfl_proj[4] = {"q", "k", "v", "proj_out"};
    const char* diffusers_proj[4] = {"to_q", "to_k", "to_v", "to_out.0"};
    for (int i = 0; i < 4; ++i) {
      r.conv_linear(bfl + bfl_proj[i] + ".weight", diffusers + diffusers_proj[i] + ".weight");
      r.rename(bfl + bfl_proj[i] + ".bias", diffusers + diffusers_proj[i] + ".bias");
    }
    r.rename(half + ".norm_out.**", half + ".conv_norm_out.**");
  }
  return r.take();
}

VaeNaming kl_vae_file_naming(const std::string& path) {
  const io::SafetensorsSet set(path);
  for (const auto& [name, w] : set.tensors()) {
    (void)w;
    for (const std::string half : {"encoder.", "decoder."}) {
      if (name.rfind(half + "conv_norm_out.", 0) == 0) return VaeNaming::Diffusers;
      if (name.rfind(half + "norm_out.", 0) == 0) return VaeNaming::Bfl;
    }
  }
  throw std::invalid_argument(set.path() + ": not a KL VAE's weights in BFL's or diffusers' names (no "
                              "encoder/decoder norm_out or conv_norm_out tensor among its " +
                              std::to_string(set.tensors().size()) + ")");
}

std::shared_ptr<ParamSource> kl_vae_file_source(const std::string& path, const KlVaeConfig& c, const nn::NameMap& extra) {
  if (io::is_torch_save_file(path)) return io::checkpoint_param_source(path);  // a torch.save of our names
  nn::NameMap map = extra;
  if (kl_vae_file_naming(path) != c.naming) {
    const nn::NameMap layouts = kl_vae_name_map(c);
    for (const auto& rule : layouts.rules()) map.add(rule);
  }
  return nn::name_mapped_param_source(path, std::move(map));
}

}  // namespace zeroshard::models::flux
