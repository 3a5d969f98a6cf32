// SIGINT/SIGTERM during training: the first one asks the run to stop after the current
// step (ranks agree on it through the per-step metrics gather, optionally save, and exit
// 130 for SIGINT, 0 for SIGTERM); a second one ends the process at once. The handler only
// records the signal (async-signal-safe); the training loop polls it.
#pragma once

namespace zeroshard::train {

class StopSignal {
 public:
  StopSignal();   // installs the handlers (process-wide, whichever thread receives it)
  ~StopSignal();  // restores the previous ones
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;
  // 0, or the first signal received.
  static int pending();
};

}  // namespace zeroshard::train
