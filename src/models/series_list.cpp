// The registered model series: one line each (a series is its folder, src/models/<series>/).
#include "models/flux/series.h"
#include "models/llama/series.h"
#include "models/series.h"
#include "models/vae/series.h"
#include "models/wan/series.h"

#include <stdexcept>

namespace zeroshard::models {

const std::vector<Series>& all_series() {
  static const std::vector<Series> series = {
      llama_series(),
      moe_series(),
      vae_series(),
      flux_series(),
      wan_series(),
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

// reference-check knows the kinds of every series.
const std::vector<ReferenceKind>& reference_kinds() {
  static const std::vector<ReferenceKind> kinds = [] {
    std::vector<ReferenceKind> all;
    for (const auto& s : models::all_series()) all.insert(all.end(), s.reference_kinds.begin(), s.reference_kinds.end());
    return all;
  }();
  return kinds;
}

}  // namespace zeroshard::reference
