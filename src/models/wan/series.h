// Registration of the look-alike `wan` series (src/models/wan/series.cpp).
#pragma once

#include "models/series.h"
#include "models/vae/series.h"
#include "models/wan/wan.h"

namespace zeroshard::models {

// wan.* (the DiT and its text tower), vae.* (its video VAE tower), the clip data keys.
struct WanSeriesConfig : train::SeriesConfigBase<WanSeriesConfig> {
  void register_keys(train::ConfigKeys& keys) override;
  void validate(const train::TrainConfig& c) const override;
  WanConfig wan;
  VaeConfig vae;
  ShapesData data;
  std::string vae_from, text_encoder_from;  // wan.vae_from, wan.text_encoder_from
};

Series wan_series();

}  // namespace zeroshard::models
