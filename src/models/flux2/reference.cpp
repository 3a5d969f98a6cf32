#include "models/flux2/reference.h"

#include "models/flux/reference.h"
#include "models/flux2/flux2_dit.h"
#include "models/flux2/flux2_vae.h"

namespace zeroshard::models::flux2 {

namespace {

using flux::call_input;

reference::ReferenceModel flux2_dit(const reference::ReferenceCase& c) {
  const auto config = Flux2Config::from_json(c.config, c.dir + "/config.json");
  auto model = Flux2DiT(config);
  reference::ReferenceModel m;
  m.module = model.ptr();
  m.run = [model, config](reference::ReferenceCase& rc) mutable {
    // Without guidance_embeds (klein) upstream ignores guidance: a case may pass null or nothing.
    at::Tensor guidance;
    if (config.guidance_embeds) guidance = call_input(rc, "guidance");
    return std::map<std::string, at::Tensor>{
        {"output", model->forward(call_input(rc, "hidden_states"), call_input(rc, "encoder_hidden_states"),
                                  call_input(rc, "timestep"), call_input(rc, "img_ids"), call_input(rc, "txt_ids"),
                                  guidance)}};
  };
  return m;
}

reference::ReferenceModel flux2_vae(const reference::ReferenceCase& c, bool encode) {
  const auto config = Flux2VaeConfig::from_json(c.config, c.dir + "/config.json");
  auto model = Flux2Vae(config, encode, !encode);
  reference::ReferenceModel m;
  m.module = model.ptr();
  m.run = [model, encode](reference::ReferenceCase& rc) mutable {
    return std::map<std::string, at::Tensor>{
        {"output", encode ? model->encode(call_input(rc, "x")) : model->decode(call_input(rc, "z"))}};
  };
  return m;
}

}  // namespace

std::vector<reference::ReferenceKind> reference_kinds() {
  return {
      {"flux2_dit", "FLUX.2 transformer (Flux2DiT, dev/klein), released (diffusers) names", flux2_dit},
      {"flux2_vae_encode", "FLUX.2 VAE encode: BN-normalized 2x2-patchified latent mean",
       [](const reference::ReferenceCase& c) { return flux2_vae(c, true); }},
      {"flux2_vae_decode", "FLUX.2 VAE decode: BN-denormalize, unpatchify, post_quant_conv, decoder",
       [](const reference::ReferenceCase& c) { return flux2_vae(c, false); }},
  };
}

}  // namespace zeroshard::models::flux2
