// The flow-matching schedule DiffSynth-Studio trains and samples its diffusion series with, shared
// by the series here: Wan 2.1 (diffsynth/schedulers/flow_match.py, FlowMatchScheduler(shift=5,
// sigma_min=0, extra_one_step=True)) and Z-Image (diffsynth/diffusion/flow_match.py,
// set_timesteps_z_image: sigma_min 0, linspace(1, 0, steps + 1)[:-1], shift 3; the same
// set_training_weight), recomputed here in float32 as torch computes it:
//  - sigmas: linspace(1, 0, steps + 1) without its last entry (extra_one_step), then shifted,
//    sigma' = shift * sigma / (1 + (shift - 1) * sigma); timesteps = 1000 * sigma';
//  - training (steps = 1000): a timestep id drawn uniformly in [0, 1000); the noisy latent is
//    (1 - sigma) * x0 + sigma * noise, the target noise - x0, and the MSE is multiplied by the
//    id's weight y - min(y), y = exp(-2 ((t - 500) / 1000)^2), scaled to sum 1000 (mean 1);
//  - sampling: Euler steps x += v * (sigma_next - sigma), the last to sigma 0.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace zeroshard::models::diffusion {

struct FlowMatchSchedule {
  at::Tensor sigmas;     // [steps] float32, from near 1 down
  at::Tensor timesteps;  // [steps] float32, 1000 * sigmas
  at::Tensor weights;    // [steps] float32, the training weights (defined for training schedules)
};

// steps >= 1; shift > 0. training: also the weights (DiffSynth computes them for steps = 1000).
FlowMatchSchedule flow_match_schedule(int64_t steps, double shift, bool training);
// DiffSynth's set_training_weight on a schedule's timesteps [steps] float32, as PyTorch rounds it
// (every series' training schedule uses it).
at::Tensor training_weights(const at::Tensor& timesteps);

// A training micro-batch's per-sample draws, sample by sample: the noise (the latent's shape) and
// the timestep id (DiffSynth: uniform in [0, steps)) from one generator keyed by (data seed, key),
// key naming the sample number ("<series>.noise.<n>"), so a sample's draws depend on nothing but
// the seed and its number (not on W, the rank or the micro-batch it lands in).
class TrainingDraws {
 public:
  // weighting: DiffSynth's timestep weights; false: 1 (plain MSE).
  TrainingDraws(const FlowMatchSchedule& schedule, bool weighting) : schedule_(schedule), weighting_(weighting) {}
  // Draws the next sample's timestep and returns its noise [latent_shape] float32.
  at::Tensor add(uint64_t seed, const std::string& key, at::IntArrayRef latent_shape);
  // [B] float32 each, B = the samples added.
  at::Tensor sigmas() const { return at::tensor(sigmas_, at::kFloat); }
  at::Tensor timesteps() const { return at::tensor(timesteps_, at::kFloat); }
  at::Tensor weights() const { return at::tensor(weights_, at::kFloat); }

 private:
  const FlowMatchSchedule& schedule_;
  bool weighting_;
  std::vector<float> sigmas_, timesteps_, weights_;
};

}  // namespace zeroshard::models::diffusion
