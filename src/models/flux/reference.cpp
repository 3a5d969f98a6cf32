#include "models/flux/reference.h"

#include "models/flux/clip_text.h"
#include "models/flux/flux1_dit.h"
#include "models/flux/flux1_vae.h"

#include <stdexcept>

namespace zeroshard::models::flux {

at::Tensor call_input(const reference::ReferenceCase& c, const std::string& arg) {
  if (c.config.contains("_call") && c.config["_call"].contains("args")) {
    for (const auto& a : c.config["_call"]["args"]) {
      std::string name;
      nlohmann::json value;
      if (a.is_object() && a.contains("name")) {
        name = a["name"].get<std::string>();
        value = a.contains("value") ? a["value"] : nlohmann::json();
      } else if (a.is_array() && a.size() == 2) {
        name = a[0].get<std::string>();
        value = a[1];
      } else {
        continue;
      }
      if (name != arg) continue;
      if (value.is_null()) return {};
      if (!value.is_string()) {
        throw std::invalid_argument(c.dir + "/config.json: _call argument '" + arg + "' is not an input name");
      }
      std::string input = value.get<std::string>();
      if (input.rfind("inputs:", 0) == 0) input = input.substr(7);
      return c.input(input);
    }
  }
  return c.input(arg);
}

namespace {

reference::ReferenceModel flux1_dit(const reference::ReferenceCase& c) {
  const auto config = Flux1Config::from_json(c.config, c.dir + "/config.json");
  auto model = Flux1DiT(config);
  reference::ReferenceModel m;
  m.module = model.ptr();
  m.run = [model, config](reference::ReferenceCase& rc) mutable {
    // Without guidance_embed (schnell) upstream ignores guidance: a case need not ship one.
    const at::Tensor guidance = config.guidance_embed ? call_input(rc, "guidance") : at::Tensor();
    return std::map<std::string, at::Tensor>{
        {"output", model->forward(call_input(rc, "img"), call_input(rc, "img_ids"), call_input(rc, "txt"),
                                  call_input(rc, "txt_ids"), call_input(rc, "timesteps"), call_input(rc, "y"),
                                  guidance)}};
  };
  return m;
}

reference::ReferenceModel flux1_vae(const reference::ReferenceCase& c, bool encode) {
  const auto config = Flux1VaeConfig::from_json(c.config, c.dir + "/config.json");
  auto model = Flux1AutoEncoder(config, encode, !encode);
  reference::ReferenceModel m;
  m.module = model.ptr();
  m.run = [model, encode](reference::ReferenceCase& rc) mutable {
    return std::map<std::string, at::Tensor>{
        {"output", encode ? model->encode(call_input(rc, "x")) : model->decode(call_input(rc, "z"))}};
  };
  return m;
}

// CLIPTextModel(input_ids[, attention_mask]): "output" = last_hidden_state, "pooled" = pooler_output.
reference::ReferenceModel clip_text(const reference::ReferenceCase& c) {
  auto model = ClipTextModel(ClipTextConfig::from_hf_json(c.config, c.dir + "/config.json"));
  reference::ReferenceModel m;
  m.module = model.ptr();
  m.run = [model](reference::ReferenceCase& rc) mutable {
    const at::Tensor mask = rc.inputs.count("attention_mask") ? rc.input("attention_mask") : at::Tensor();
    const ClipTextOutput out = model->forward(call_input(rc, "input_ids"), mask);
    return std::map<std::string, at::Tensor>{{"output", out.last_hidden_state}, {"pooled", out.pooled}};
  };
  return m;
}

}  // namespace

std::vector<reference::ReferenceKind> reference_kinds() {
  return {
      {"flux1_dit", "FLUX.1 transformer (BFL Flux, dev/schnell), released names", flux1_dit},
      {"flux1_vae_encode", "FLUX.1 VAE encode: scale * (latent mean - shift), encoder.* only",
       [](const reference::ReferenceCase& c) { return flux1_vae(c, true); }},
      {"flux1_vae_decode", "FLUX.1 VAE decode: decoder(z / scale + shift), decoder.* only",
       [](const reference::ReferenceCase& c) { return flux1_vae(c, false); }},
      {"clip_text_encoder", "CLIP text model as FLUX.1's text_encoder (transformers CLIPTextModel): states + pooled",
       clip_text},
  };
}

}  // namespace zeroshard::models::flux
