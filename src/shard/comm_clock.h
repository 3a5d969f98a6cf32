// Seconds the compute thread spent blocked on collectives: the communication that overlap
// did not hide (ShardedModel::exposed_comm_seconds).
#pragma once

#include <chrono>
#include <utility>

namespace zeroshard::shard {

class CommClock {
 public:
  // Runs fn (which blocks on communication) and adds its duration.
  template <class Fn>
  void blocked(Fn&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    std::forward<Fn>(fn)();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double seconds() const { return seconds_; }
  void reset() { seconds_ = 0.0; }

 private:
  double seconds_ = 0.0;
};

}  // namespace zeroshard::shard
