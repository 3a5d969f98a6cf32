#include "models/qwen_image/reference.h"

#include <stdexcept>

#include "models/qwen_image/qwen_image_dit.h"

namespace zeroshard::models::qwen_image {

namespace {

// The `img_shapes` argument of the case's `_call`: per sample, a list of (frame, height, width)
// in patches. Upstream builds the RoPE table from the first sample's list alone (it warns when
// samples differ and is then wrong for the others), so differing samples are refused here.
std::vector<ImageShape> case_img_shapes(const reference::ReferenceCase& c) {
  const std::string where = c.dir + "/config.json: _call.args img_shapes";
  const nlohmann::json& call = c.field("_call");
  if (!call.contains("args")) throw std::invalid_argument(c.dir + "/config.json: _call has no args");
  for (const auto& arg : call["args"]) {
    if (!arg.is_array() || arg.size() != 2 || arg[0] != "img_shapes") continue;
    const nlohmann::json& samples = arg[1];
    if (!samples.is_array() || samples.empty()) throw std::invalid_argument(where + ": expected a list per sample");
    std::vector<ImageShape> first;
    for (size_t i = 0; i < samples.size(); ++i) {
      std::vector<ImageShape> shapes;
      for (const auto& s : samples[i]) {
        if (!s.is_array() || s.size() != 3)
          throw std::invalid_argument(where + ": each shape is [frame, height, width]");
        shapes.push_back({s[0].get<int64_t>(), s[1].get<int64_t>(), s[2].get<int64_t>()});
      }
      if (shapes.empty()) throw std::invalid_argument(where + ": sample " + std::to_string(i) + " has no image");
      if (i == 0) {
        first = shapes;
      } else {
        bool same = shapes.size() == first.size();
        for (size_t k = 0; same && k < shapes.size(); ++k) {
          same = shapes[k].frames == first[k].frames && shapes[k].height == first[k].height &&
                 shapes[k].width == first[k].width;
        }
        if (!same) {
          throw std::invalid_argument(where + ": sample " + std::to_string(i) +
                                      " differs from sample 0 (upstream's RoPE supports one layout per batch)");
        }
      }
    }
    return first;
  }
  throw std::invalid_argument(where + ": not found");
}

reference::ReferenceModel build(const reference::ReferenceCase& c) {
  const QwenImageDitConfig config = config_from_json(c.config, c.dir + "/config.json");
  const std::vector<ImageShape> shapes = case_img_shapes(c);
  auto model = QwenImageDit(config);
  reference::ReferenceModel m;
  m.module = model.ptr();
  m.run = [model, shapes](reference::ReferenceCase& rc) mutable {
    const auto mask = rc.inputs.find("encoder_hidden_states_mask");
    const torch::Tensor out =
        model->forward(rc.input("hidden_states"), rc.input("encoder_hidden_states"),
                       mask == rc.inputs.end() ? torch::Tensor() : mask->second, rc.input("timestep"), shapes);
    return std::map<std::string, at::Tensor>{{"output", out}};
  };
  return m;
}

}  // namespace

std::vector<reference::ReferenceKind> reference_kinds() {
  return {
      {"qwen_image_dit", "Qwen-Image MMDiT (diffusers QwenImageTransformer2DModel), packed 2x2 latent tokens", build}};
}

}  // namespace zeroshard::models::qwen_image
