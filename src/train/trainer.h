// The training job of one rank, as a Trainer of parts: setup (communicator, run folder, the
// series' task, the sharded model, the optimizer, resume), step (micro-batches, gradient
// finish, optimizer, the step's metrics), evaluate (a hook after each step), save (a sharded
// checkpoint) and finish (final save, summary). run() strings them together.
#pragma once

#include "train/config.h"
#include "zeroshard/comm.h"

#include <memory>
#include <string>

namespace zeroshard::train {

class Trainer {
 public:
  Trainer(const TrainConfig& config, const RendezvousInfo& rendezvous);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The whole job; returns the process exit code (0, or 130 after SIGINT). Throws on errors
  // (the caller prints them with the rank).
  int run();

  void setup();
  // Optimizer step `step` (1-based). Returns false when every rank agreed to stop after it
  // (SIGINT/SIGTERM).
  bool step(int64_t step);
  // After each step: the series' evaluation hook (train.eval_every, when a series has one).
  void evaluate(int64_t step);
  void save(int64_t step);
  // The final save (or the save on a signal), summary.json; returns the exit code.
  int finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// For train.resume: the checkpoint folder it resolves to, after checking that the checkpoint
// describes the same model (every model-describing key) and is not past train.steps. Throws
// naming the checkpoint and each differing key.
std::string checked_resume_checkpoint(const TrainConfig& config);

// runs/<config file stem>-<YYYYmmdd-HHMMSS>
std::string default_run_dir(const TrainConfig& config);

}  // namespace zeroshard::train
