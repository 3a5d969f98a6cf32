// Registration of the look-alike `flux` series (src/models/flux/series.cpp).
#pragma once

#include "models/flux/flux.h"
#include "models/series.h"
#include "models/vae/series.h"

namespace zeroshard::models {

// flux.* (the DiT and its text tower), vae.* (its VAE tower), the image data keys.
struct FluxSeriesConfig : train::SeriesConfigBase<FluxSeriesConfig> {
  FluxSeriesConfig() { data.image_size = 32; }
  void register_keys(train::ConfigKeys& keys) override;
  void validate(const train::TrainConfig& c) const override;
  FluxConfig flux;
  VaeConfig vae;
  ShapesData data;
  std::string vae_from, text_encoder_from;  // flux.vae_from, flux.text_encoder_from
};

Series flux_series();

}  // namespace zeroshard::models
