#include "models/diffusion/flow_match.h"

#include "nn/init.h"

#include <stdexcept>
#include <string>

namespace zeroshard::models::diffusion {

FlowMatchSchedule flow_match_schedule(int64_t steps, double shift, bool training) {
  if (steps < 1) throw std::invalid_argument("flow_match_schedule: steps must be >= 1, got " + std::to_string(steps));
  if (!(shift > 0)) throw std::invalid_argument("flow_match_schedule: shift must be > 0, got " + std::to_string(shift));
  FlowMatchSchedule s;
  // torch.linspace(sigma_start=1, sigma_min=0, steps + 1)[:-1] in float32 (DiffSynth's default dtype).
  const at::Tensor base = at::linspace(1.0, 0.0, steps + 1, at::kFloat).narrow(0, 0, steps);
  // Python-float shift times a float32 tensor stays float32, as upstream.
  s.sigmas = base * shift / (1 + (shift - 1) * base);
  s.timesteps = s.sigmas * 1000;
  if (training) s.weights = training_weights(s.timesteps);
  return s;
}

at::Tensor training_weights(const at::Tensor& timesteps) {
  const double steps = 1000;
  const at::Tensor y = at::exp(-2 * ((timesteps - steps / 2) / steps).pow(2));
  const at::Tensor shifted = y - y.min();
  // `steps / y_shifted.sum()`: Python's number / tensor is Tensor.__rtruediv__, reciprocal() *
  // number — rounded unlike a float32 division (C++'s Scalar / Tensor divides).
  at::Tensor w = shifted * (shifted.sum().reciprocal() * steps);
  const int64_t n = timesteps.size(0);
  if (n != 1000) {
    w = w * (static_cast<double>(n) / steps);
    w = w + w[n > 1 ? 1 : 0];
  }
  return w;
}

at::Tensor TrainingDraws::add(uint64_t seed, const std::string& key, at::IntArrayRef latent_shape) {
  auto gen = nn::generator_for(seed, key);
  at::Tensor noise = at::randn(latent_shape, gen, at::kFloat);  // first: the draws' order is part of the data
  const int64_t id = at::randint(0, schedule_.sigmas.size(0), {1}, gen, at::kLong).item<int64_t>();
  sigmas_.push_back(schedule_.sigmas[id].item<float>());
  timesteps_.push_back(schedule_.timesteps[id].item<float>());
  weights_.push_back(weighting_ ? schedule_.weights[id].item<float>() : 1.0f);
  return noise;
}

}  // namespace zeroshard::models::diffusion
