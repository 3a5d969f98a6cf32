// Commands that run on ranks (train, sample, prepare): started alone they spawn --nproc local
// ranks running the same command line; inside a job (a launcher set RANK, ...) they join it.
#pragma once

#include "zeroshard/comm.h"

#include <functional>
#include <string>
#include <vector>

namespace zeroshard::cli {

// The command line main() was given (argv[1..]), for re-launching it on local ranks.
void set_command_line(int argc, char** argv);

// Inside a job: body(rendezvous). Otherwise with nproc > 1: this command line (plus
// extra_args) on nproc local ranks. Throws when --nproc contradicts the surrounding job.
int launch_or_run(int nproc, const std::vector<std::string>& extra_args,
                  const std::function<int(const RendezvousInfo&)>& body);

// True when a launcher started this process as one rank of a job.
bool inside_job();

}  // namespace zeroshard::cli
