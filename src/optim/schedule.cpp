#include "zeroshard/optim.h"

#include <algorithm>
#include <cmath>

namespace zeroshard {

double LrSchedule::at(int64_t step) const {
  if (warmup_steps > 0 && step <= warmup_steps) {
    return max_lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  }
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
  return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace zeroshard
