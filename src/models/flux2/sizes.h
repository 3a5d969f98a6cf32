// The released FLUX.2 configurations (DiffSynth-Studio diffsynth/configs/model_configs.py: Flux2DiT's
// defaults are FLUX.2-dev; klein 4B / 9B pass extra_kwargs), for full-size deferred models and
// their exact parameter counts (tests/models/flux2/test_flux2_sizes.cpp).
#pragma once

#include "models/flux2/flux2_dit.h"
#include "models/flux2/flux2_vae.h"

namespace zeroshard::models::flux2 {

Flux2Config flux2_dev();       // 32,223,281,152 parameters
Flux2Config flux2_klein_4b();  //  3,875,544,576
Flux2Config flux2_klein_9b();  //  9,078,581,248
Flux2VaeConfig flux2_vae();    // 84,046,115 parameters (+ 256 BatchNorm running-stat values)

int64_t flux2_vae_param_count(const Flux2VaeConfig& c, bool encoder = true, bool decoder = true);

}  // namespace zeroshard::models::flux2
