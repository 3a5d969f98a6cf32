#include "models/z_image/reference.h"

#include <stdexcept>

#include "models/z_image/z_image_dit.h"

namespace zeroshard::models::z_image {

namespace {

// A literal argument of the case's `_call` (e.g. patch_size).
int64_t call_int(const reference::ReferenceCase& c, const std::string& name) {
  const nlohmann::json& call = c.field("_call");
  if (call.contains("args")) {
    for (const auto& arg : call["args"]) {
      if (arg.is_array() && arg.size() == 2 && arg[0] == name && arg[1].is_number_integer())
        return arg[1].get<int64_t>();
    }
  }
  throw std::invalid_argument(c.dir + "/config.json: _call.args has no integer '" + name + "'");
}

reference::ReferenceModel build(const reference::ReferenceCase& c) {
  const ZImageDitConfig config = config_from_json(c.config, c.dir + "/config.json");
  const int64_t patch = call_int(c, "patch_size"), f_patch = call_int(c, "f_patch_size");
  auto model = ZImageDit(config);
  reference::ReferenceModel m;
  m.module = model.ptr();
  m.run = [model, patch, f_patch](reference::ReferenceCase& rc) mutable {
    // Per-sample lists x.0, x.1, ... and cap_feats.0, cap_feats.1, ...
    std::vector<torch::Tensor> x, cap;
    for (size_t i = 0; rc.inputs.count("x." + std::to_string(i)) > 0; ++i) {
      x.push_back(rc.input("x." + std::to_string(i)));
      cap.push_back(rc.input("cap_feats." + std::to_string(i)));
    }
    if (x.empty()) throw std::invalid_argument(rc.dir + "/inputs.safetensors: no x.0");
    const std::vector<torch::Tensor> out = model->forward(x, rc.input("t"), cap, patch, f_patch);
    std::map<std::string, at::Tensor> named;
    for (size_t i = 0; i < out.size(); ++i) named["output." + std::to_string(i)] = out[i];
    return named;
  };
  return m;
}

}  // namespace

std::vector<reference::ReferenceKind> reference_kinds() {
  return {{"z_image_dit", "Z-Image single-stream DiT (Tongyi-MAI ZImageTransformer2DModel), per-sample lists", build}};
}

}  // namespace zeroshard::models::z_image
