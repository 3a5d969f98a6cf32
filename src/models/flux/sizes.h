// The released FLUX.1 configurations (BFL src/flux/util.py configs "flux-dev", "flux-schnell",
// and their autoencoder), for building the full-size models (inside nn::DeferredInit: no bytes)
// and their exact parameter counts (tests/models/flux/test_flux_sizes.cpp checks them against
// the published totals).
#pragma once

#include "models/flux/flux1_dit.h"
#include "models/flux/flux1_vae.h"

namespace zeroshard::models::flux {

Flux1Config flux1_dev();      // 11,901,408,320 parameters (guidance_in)
Flux1Config flux1_schnell();  // 11,891,178,560 (no guidance_in)
Flux1VaeConfig flux1_vae();   // ae.safetensors: 83,819,683 (encoder 34,274,208 + decoder 49,545,475)

int64_t flux1_vae_param_count(const Flux1VaeConfig& c, bool encoder = true, bool decoder = true);

}  // namespace zeroshard::models::flux
