#include "models/t5/reference.h"

#include "models/t5/t5.h"

namespace zeroshard::models::t5 {

namespace {

reference::ReferenceModel build(const reference::ReferenceCase& c, bool hf_names) {
  const T5Config config = T5Config::from_wan_json(c.config, c.dir + "/config.json");
  reference::ReferenceModel m;
  auto model = T5Encoder(config);
  m.module = model.ptr();
  if (hf_names) {
    const nn::NameMap map = hf_t5_name_map(config.shared_pos);
    m.released_name = [map](const std::string& name) { return map.their_name(name); };
  }
  m.run = [model](reference::ReferenceCase& rc) mutable {
    const at::Tensor mask = rc.inputs.count("mask") ? rc.input("mask") : at::Tensor();
    return std::map<std::string, at::Tensor>{{"output", model->forward(rc.input("ids"), mask)}};
  };
  return m;
}

}  // namespace

std::vector<reference::ReferenceKind> reference_kinds() {
  return {
      {"wan21_umt5_encoder", "Wan 2.1 umT5 text encoder (wan/modules/t5.py T5Encoder, a position table per layer)",
       [](const reference::ReferenceCase& c) { return build(c, false); }},
      {"t5_encoder", "T5 v1.1 encoder as FLUX.1's text_encoder_2 (transformers T5EncoderModel names, one shared table)",
       [](const reference::ReferenceCase& c) { return build(c, true); }},
  };
}

}  // namespace zeroshard::models::t5
