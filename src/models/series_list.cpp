// The registered model series: one line each (a series is its folder, src/models/<series>/).
#include "models/flux/flux1_series.h"
#include "models/flux/reference.h"
#include "models/flux/series.h"
#include "models/flux2/reference.h"
#include "models/flux2/series.h"
#include "models/llama/series.h"
#include "models/qwen3/series.h"
#include "models/qwen_image/reference.h"
#include "models/qwen_image/series.h"
#include "models/series.h"
#include "models/t5/reference.h"
#include "models/vae/series.h"
#include "models/wan/reference.h"
#include "models/wan/series.h"
#include "models/z_image/reference.h"
#include "models/z_image/series.h"

#include <stdexcept>

namespace zeroshard::models {

const std::vector<Series>& all_series() {
  static const std::vector<Series> series = {
      llama_series(),
      moe_series(),
      vae_series(),
      flux_series(),
      wan_series(),
      qwen3::qwen3_series(),
      qwen3::qwen3_moe_series(),
      z_image::z_image_series(),
      flux2::flux2_series(),
      qwen_image::qwen_image_series(),
      flux::flux1_series(),
  };
  return series;
}

const Series& find_series(const std::string& name) {
  std::string names;
  for (const auto& s : all_series()) {
    if (s.name == name) return s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  throw std::invalid_argument("'" + name + "' is not a model series (registered: " + names + ")");
}

}  // namespace zeroshard::models

namespace zeroshard::reference {

// reference-check knows the kinds of every series, and of the released models that are not (yet)
// a series of their own: one line per model family.
const std::vector<ReferenceKind>& reference_kinds() {
  static const std::vector<ReferenceKind> kinds = [] {
    std::vector<ReferenceKind> all;
    auto add = [&all](const std::vector<ReferenceKind>& more) { all.insert(all.end(), more.begin(), more.end()); };
    for (const auto& s : models::all_series()) add(s.reference_kinds);
    add(models::t5::reference_kinds());
    add(models::wan::reference_kinds());
    add(models::flux::reference_kinds());
    add(models::flux2::reference_kinds());
    add(models::qwen_image::reference_kinds());
    add(models::z_image::reference_kinds());
    return all;
  }();
  return kinds;
}

}  // namespace zeroshard::reference
