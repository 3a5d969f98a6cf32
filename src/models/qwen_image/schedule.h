// Qwen-Image's flow-matching schedule as DiffSynth-Studio trains and samples it
// (diffsynth/diffusion/flow_match.py, FlowMatchScheduler("Qwen-Image"), set_timesteps_qwen_image),
// recomputed in float32 as torch computes it there. models/diffusion/flow_match.h has the plain
// shifted schedule (Wan, Z-Image); Qwen-Image adds the exponential shift by mu and the stretch to
// a terminal sigma, so the variant lives here:
//  - sigmas: linspace(1, 0, steps + 1)[:-1];
//  - exponential shift: sigma' = e^mu / (e^mu + (1 / sigma - 1)), which is the plain shift
//    s sigma / (1 + (s - 1) sigma) with s = e^mu: here `shift` = e^mu (training: mu = 0.8, the
//    template's default without dynamic_shift_len);
//  - shift_terminal: with z = 1 - sigma', sigma'' = 1 - z / (z_last / (1 - shift_terminal)), so the
//    first sigma stays 1 and the last becomes shift_terminal (0.02);
//  - timesteps = 1000 sigma''; training weights (steps = 1000): y = exp(-2 ((t - 500) / 1000)^2),
//    y - min(y) scaled to sum 1000 (set_training_weight);
//  - sampling: mu = calculate_shift(image tokens) (dynamic_shift_mu), Euler steps x += v (sigma_next
//    - sigma), the last step to sigma 0. QwenImagePipeline (diffusers) gives the same sigmas: its
//    linspace(1, 1/N, N) is this linspace, and its scheduler config (exponential time shift,
//    shift_terminal 0.02, base/max shift 0.5/0.9 over 256/8192 tokens) is this template.
#pragma once

#include "models/diffusion/flow_match.h"

#include <cstdint>

namespace zeroshard::models::qwen_image {

// steps >= 1, shift > 0, shift_terminal in [0, 1). training: also the weights.
diffusion::FlowMatchSchedule qwen_image_schedule(int64_t steps, double shift, double shift_terminal, bool training);

// DiffSynth's _calculate_shift_qwen_image (diffusers' calculate_shift with Qwen-Image's scheduler
// config): mu linear in the image token count, 0.5 at 256 tokens and 0.9 at 8192.
double dynamic_shift_mu(int64_t image_tokens);

// DiffSynth's training mu (set_timesteps(1000, training=True) of the "Qwen-Image" template).
constexpr double kTrainingMu = 0.8;

}  // namespace zeroshard::models::qwen_image
