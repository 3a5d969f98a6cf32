// The training loop of one rank: model, engine, optimizer, data, metrics.
#pragma once

#include "train/config.h"
#include "zeroshard/comm.h"

namespace zeroshard::train {

// Runs the job on this rank; returns the process exit code. Throws on errors (the caller
// prints them with the rank).
int run_training(const TrainConfig& config, const RendezvousInfo& rendezvous);

// runs/<config file stem>-<YYYYmmdd-HHMMSS>
std::string default_run_dir(const TrainConfig& config);

}  // namespace zeroshard::train
