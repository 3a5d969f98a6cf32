#include "models/qwen_image/schedule.h"

#include <stdexcept>
#include <string>

namespace zeroshard::models::qwen_image {

diffusion::FlowMatchSchedule qwen_image_schedule(int64_t steps, double shift, double shift_terminal, bool training) {
  if (steps < 1) throw std::invalid_argument("qwen_image schedule: steps must be >= 1, got " + std::to_string(steps));
  if (!(shift > 0)) throw std::invalid_argument("qwen_image schedule: shift must be > 0, got " + std::to_string(shift));
  if (!(shift_terminal >= 0 && shift_terminal < 1)) {
    throw std::invalid_argument("qwen_image schedule: shift_terminal must be in [0, 1), got " +
                                std::to_string(shift_terminal));
  }
  if (steps < 2 && shift_terminal > 0) {
    // One sigma (1): nothing to stretch (upstream divides 0 by 0 there).
    throw std::invalid_argument("qwen_image schedule: shift_terminal needs at least 2 steps, got " +
                                std::to_string(steps));
  }
  diffusion::FlowMatchSchedule s;
  // float32 throughout, Python floats as scalars (torch keeps the tensor's dtype). Python's
  // `number / tensor` is tensor.reciprocal() * number (torch's __rdiv__): two roundings, kept.
  const at::Tensor base = at::linspace(1.0, 0.0, steps + 1, at::kFloat).narrow(0, 0, steps);
  // math.exp(mu) / (math.exp(mu) + (1 / sigmas - 1))
  const at::Tensor sigmas = ((base.reciprocal() - 1) + shift).reciprocal() * shift;
  if (shift_terminal == 0) {
    s.sigmas = sigmas;  // no stretch
    s.timesteps = s.sigmas * 1000;
    if (training) s.weights = diffusion::training_weights(s.timesteps);
    return s;
  }
  const at::Tensor one_minus_z = 1 - sigmas;
  const at::Tensor scale_factor = one_minus_z[steps - 1] / (1 - shift_terminal);
  s.sigmas = 1 - (one_minus_z / scale_factor);
  s.timesteps = s.sigmas * 1000;
  if (training) s.weights = diffusion::training_weights(s.timesteps);
  return s;
}

double dynamic_shift_mu(int64_t image_tokens) {
  const double base_len = 256, max_len = 8192, base_shift = 0.5, max_shift = 0.9;
  const double m = (max_shift - base_shift) / (max_len - base_len);
  const double b = base_shift - m * base_len;
  return static_cast<double>(image_tokens) * m + b;
}

}  // namespace zeroshard::models::qwen_image
