#include "shard/prefetch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace zeroshard::shard {

PrefetchScheduler::PrefetchScheduler(bool enabled, int max_live_units) : enabled_(enabled), max_live_(max_live_units) {
  if (max_live_units < 1) {
    throw std::invalid_argument("fully_shard: max_live_units must be >= 1 (the running unit), got " +
                                std::to_string(max_live_units));
  }
}

long PrefetchScheduler::record_call(int unit) {
  recording_.push_back(unit);
  return static_cast<long>(recording_.size()) - 1;
}

bool PrefetchScheduler::keep_at_forward_start(int unit) const {
  const size_t first = enabled_ ? std::min(static_cast<size_t>(max_live_), order_.size()) : 0;
  return std::find(order_.begin(), order_.begin() + static_cast<long>(first), unit) != order_.begin() + static_cast<long>(first);
}

long PrefetchScheduler::locate_backward_call(int unit) {
  for (long i = std::min(cursor_, static_cast<long>(order_.size())) - 1; i >= 0; --i) {
    if (order_[static_cast<size_t>(i)] == unit) {
      cursor_ = i;
      return i;
    }
  }
  return -1;
}

std::vector<int> PrefetchScheduler::choose(long from, int step, int live,
                                           const std::function<bool(int)>& can_start) const {
  std::vector<int> chosen;
  if (!enabled_) return chosen;
  const long size = static_cast<long>(order_.size());
  for (long i = from, looked = 0; i >= 0 && i < size && looked < max_live_; i += step, ++looked) {
    if (live >= max_live_) break;
    const int u = order_[static_cast<size_t>(i)];
    if (!can_start(u) || std::find(chosen.begin(), chosen.end(), u) != chosen.end()) continue;
    chosen.push_back(u);
    ++live;
  }
  return chosen;
}

}  // namespace zeroshard::shard
