#include "models/flux2/reference.h"

#include "models/flux/reference.h"
#include "models/flux2/flux2_dit.h"
#include "models/flux2/flux2_vae.h"
#include "models/qwen3/model.h"

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

// FLUX.2 dev's text tower: Mistral's language model with output_hidden_states, the states named by
// `_call.hidden_states_layers` concatenated on the feature axis (the released names
// "language_model.model.*" are ours with "language_model." in front).
reference::ReferenceModel mistral_text(const reference::ReferenceCase& c) {
  const std::string where = c.dir + "/config.json";
  const auto config = qwen3::QwenConfig::from_hf_config(c.config, where);
  std::vector<int64_t> layers;
  if (c.config.contains("_call") && c.config["_call"].contains("hidden_states_layers")) {
    layers = c.config["_call"]["hidden_states_layers"].get<std::vector<int64_t>>();
  }
  if (layers.empty()) throw std::invalid_argument(where + ": _call.hidden_states_layers is missing or empty");
  auto model = qwen3::QwenForCausalLM(config, /*lm_head=*/false);
  reference::ReferenceModel m;
  m.module = model.ptr();
  m.released_name = [](const std::string& name) { return "language_model." + name; };
  m.run = [model, layers](reference::ReferenceCase& rc) mutable {
    qwen3::Inputs in(call_input(rc, "input_ids"));
    if (rc.inputs.count("attention_mask")) in.attention_mask = rc.input("attention_mask");
    return std::map<std::string, at::Tensor>{{"output", at::cat(model->hidden_states(in, layers), -1)}};
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
      {"mistral_text", "Mistral Small 3.x language model as FLUX.2 dev's text encoder: hidden states stacked",
       mistral_text},
  };
}

}  // namespace zeroshard::models::flux2
