// Registration of the `vae` series (src/models/vae/series.cpp), and the VAE keys the look-alike
// diffusion pipelines (flux, wan) register for their VAE tower.
#pragma once

#include "models/series.h"
#include "models/vae/vae.h"
#include "train/config.h"

namespace zeroshard::models {

// vae.* (model-describing) into `keys`, bound to `vae`.
void register_vae_keys(train::ConfigKeys& keys, VaeConfig& vae);

// The generated-shapes data keys: data.source (shapes), data.image_size and, for clips,
// data.frames.
struct ShapesData {
  std::string source = "shapes";
  int64_t frames = 8;
  int64_t image_size = 32;
  void register_keys(train::ConfigKeys& keys, bool clips);
};

struct VaeSeriesConfig : train::SeriesConfigBase<VaeSeriesConfig> {
  void register_keys(train::ConfigKeys& keys) override;
  void validate(const train::TrainConfig& c) const override;
  VaeConfig vae;
  ShapesData data;
};

Series vae_series();

}  // namespace zeroshard::models
