#include "models/wan/reference.h"

#include "models/wan/dit.h"
#include "models/wan/vae.h"

#include <stdexcept>

namespace zeroshard::models::wan {

namespace {

// A literal argument of the case's `_call` (e.g. seq_len), or `fallback` when it lists none.
int64_t call_literal(const reference::ReferenceCase& c, const std::string& name, int64_t fallback) {
  if (!c.config.contains("_call") || !c.config["_call"].contains("args")) return fallback;
  for (const auto& a : c.config["_call"]["args"]) {
    if (a.value("name", std::string()) != name) continue;
    if (!a.contains("value") || !a["value"].is_number_integer()) {
      throw std::invalid_argument(c.dir + "/config.json: _call argument '" + name + "' is not an integer literal");
    }
    return a["value"].get<int64_t>();
  }
  return fallback;
}

reference::ReferenceModel build_dit(const reference::ReferenceCase& c) {
  const WanDiTConfig config = WanDiTConfig::from_json(c.config, c.dir + "/config.json");
  const int64_t seq_len = call_literal(c, "seq_len", 0);
  auto model = WanModel(config);
  reference::ReferenceModel m;
  m.module = model.ptr();
  m.run = [model, seq_len](reference::ReferenceCase& rc) mutable {
    // Upstream takes lists: one sample is x [C, F, H, W], t [1], context [L, text_dim]; a batch
    // stored stacked (x [B, C, F, H, W], context [B, L, text_dim]) is the list of its rows.
    const at::Tensor& x = rc.input("x");
    const at::Tensor& context = rc.input("context");
    if (x.dim() == 4) {
      const auto out = model->forward({x}, rc.input("t"), {context}, seq_len);
      return std::map<std::string, at::Tensor>{{"output", out.at(0)}};
    }
    std::vector<at::Tensor> xs, cs;
    for (int64_t i = 0; i < x.size(0); ++i) {
      xs.push_back(x[i]);
      cs.push_back(context[i]);
    }
    return std::map<std::string, at::Tensor>{{"output", at::stack(model->forward(xs, rc.input("t"), cs, seq_len), 0)}};
  };
  return m;
}

reference::ReferenceModel build_vae(const reference::ReferenceCase& c, bool encode) {
  const WanVaeConfig config = WanVaeConfig::from_json(c.config, c.dir + "/config.json");
  auto model = WanVae(config);
  reference::ReferenceModel m;
  m.module = model.ptr();
  m.run = [model, encode](reference::ReferenceCase& rc) mutable {
    const at::Tensor& mean = rc.input("scale_mean");
    const at::Tensor& inv_std = rc.input("scale_inv_std");
    const at::Tensor out = encode ? model->encode(rc.input("x"), mean, inv_std) : model->decode(rc.input("z"), mean, inv_std);
    return std::map<std::string, at::Tensor>{{"output", out}};
  };
  return m;
}

}  // namespace

std::vector<reference::ReferenceKind> reference_kinds() {
  return {
      {"wan21_dit_t2v", "Wan 2.1 text-to-video DiT (wan/modules/model.py WanModel, t2v, original names)", build_dit},
      {"wan21_vae_encode", "Wan 2.1 video VAE encode (WanVAE_.encode: 1+4+4... chunks, normalized mean)",
       [](const reference::ReferenceCase& c) { return build_vae(c, true); }},
      {"wan21_vae_decode", "Wan 2.1 video VAE decode (WanVAE_.decode: one latent frame per chunk)",
       [](const reference::ReferenceCase& c) { return build_vae(c, false); }},
  };
}

}  // namespace zeroshard::models::wan
