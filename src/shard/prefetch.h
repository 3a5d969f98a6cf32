// Prefetch scheduling under optim_grads_params: which units to start gathering ahead of use.
// Pure bookkeeping over unit indices — the engine reports which unit runs and asks what to
// gather next; it does the gathering. Unit tests drive it without any communicator.
//
// Every forward records the order its (non-root) unit calls run in; a unit called several
// times (a VAE stage once per chunk) appears several times. At a unit's pre-forward the
// engine gathers the units that ran after that call in the last recorded forward; at its
// pre-backward, the ones that ran before it (backward runs the calls in reverse order, so the
// call is looked up below the last one found); after the optimizer step, the next forward's
// first units. At most max_live_units non-root units are gathered at once, the running one
// included, so prefetch looks at most max_live_units positions ahead.
#pragma once

#include <functional>
#include <vector>

namespace zeroshard::shard {

class PrefetchScheduler {
 public:
  // enabled = false: choose() returns nothing (the order is still recorded).
  PrefetchScheduler(bool enabled, int max_live_units);

  bool enabled() const { return enabled_; }
  int max_live_units() const { return max_live_; }

  // --- forward ---
  // The root's pre-forward: a new forward starts recording.
  void begin_forward() { recording_.clear(); }
  // A non-root unit's pre-forward: appends the call; returns its position in this forward.
  long record_call(int unit);
  // The root's post-forward: the recording becomes the order the next prefetches follow.
  void end_forward() { order_ = recording_; }
  // At a new forward: whether a unit still gathered may stay so — it is among the first
  // units of the recorded order, which were prefetched after the optimizer step. Any other
  // gathered unit was prefetched for a forward that went another way and is released.
  bool keep_at_forward_start(int unit) const;

  // --- backward ---
  // loss.backward() is about to run: the next lookup starts from the end of the order.
  void begin_backward() { cursor_ = static_cast<long>(order_.size()); }
  // A unit's pre-backward: the position of its call (the last one below the previous lookup),
  // or -1 when the recorded forward has no such call (then the cursor stays).
  long locate_backward_call(int unit);

  // Units to start gathering, in this order: walks the recorded order from position `from`
  // in steps of `step` (+1 in forward and after the step, -1 in backward) over at most
  // max_live_units positions, stopping once `live` (non-root units gathered or in flight)
  // reaches max_live_units. can_start(u): u is sharded and not gathered yet. A unit that
  // appears twice in the window is chosen once.
  std::vector<int> choose(long from, int step, int live, const std::function<bool(int)>& can_start) const;

  // The order recorded by the last complete forward.
  const std::vector<int>& order() const { return order_; }

 private:
  bool enabled_;
  int max_live_;
  std::vector<int> order_;      // non-root unit calls in the order the last forward ran them
  std::vector<int> recording_;  // ... of the forward in progress
  long cursor_ = 0;             // position in order_ of the last pre-backward
};

}  // namespace zeroshard::shard
