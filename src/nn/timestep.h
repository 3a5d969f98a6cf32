// Sinusoidal timestep embeddings in the variants the released DiTs use, computed in float64
// (angles reach ~1000 radians) and returned in `dtype`:
//   freq_i = max_period^(-i / (half - freq_shift)), i = 0 .. half - 1, half = dim / 2
//   args   = t * scale * freq_i;  embedding = [cos(args), sin(args)] (cos_first) or [sin, cos]
// Wan 2.1, FLUX.1 and Z-Image: cos first, freq_shift 0 (FLUX.1 and Z-Image scale t by 1000 first).
// diffusers' get_timestep_embedding: freq_shift = downscale_freq_shift (often 1 or 0), cos first
// when flip_sin_to_cos. An odd dim gets a zero column at the end (as diffusers pads).
#pragma once

#include <ATen/ATen.h>

namespace zeroshard::nn {

struct SinusoidOptions {
  double max_period = 10000.0;
  bool cos_first = true;
  double freq_shift = 0.0;
  double scale = 1.0;
};

// t: [B] (any float dtype; gradients flow to it) -> [B, dim].
at::Tensor timestep_sinusoid(const at::Tensor& t, int64_t dim, const SinusoidOptions& options = {},
                             at::ScalarType dtype = at::kFloat);

}  // namespace zeroshard::nn
