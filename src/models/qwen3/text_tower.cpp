#include "io/safetensors.h"
#include "models/qwen3/model.h"
#include "nn/name_map.h"

namespace zeroshard::models::qwen3 {

std::shared_ptr<ParamSource> text_tower_source(const std::string& path) {
  bool nested = false;  // transformers >= 4.52: model.language_model.* and model.visual.*
  {
    const io::SafetensorsSet set(path);
    for (const auto& [name, w] : set.tensors()) {
      (void)w;
      if (name.rfind("model.language_model.", 0) == 0) nested = true;
    }
  }
  nn::NameMap map;
  const std::string vision = "the vision tower of Qwen2.5-VL: the pipeline encodes text only";
  if (nested) {
    map.ignore("model.visual.**", vision);
    map.rename("model.**", "model.language_model.**");
  } else {
    map.ignore("visual.**", vision);
  }
  map.ignore("lm_head.weight", "the output head: the pipeline reads hidden states, not logits");
  return nn::name_mapped_param_source(path, std::move(map));
}

}  // namespace zeroshard::models::qwen3
