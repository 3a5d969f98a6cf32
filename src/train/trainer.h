// The training loop of one rank: model, engine, optimizer, data, metrics.
#pragma once

#include "train/config.h"
#include "zeroshard/comm.h"

namespace zeroshard::train {

// Runs the job on this rank; returns the process exit code. Throws on errors (the caller
// prints them with the rank).
int run_training(const TrainConfig& config, const RendezvousInfo& rendezvous);

// For train.resume: the checkpoint folder it resolves to, after checking that the checkpoint
// describes the same model (every model.* key) and is not past train.steps. Throws naming
// the checkpoint and each differing key.
std::string checked_resume_checkpoint(const TrainConfig& config);

// runs/<config file stem>-<YYYYmmdd-HHMMSS>
std::string default_run_dir(const TrainConfig& config);

}  // namespace zeroshard::train
