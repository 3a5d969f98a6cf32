// Commands that run on ranks (train, sample, prepare): started alone they spawn --nproc local
// ranks running the same command line; started by a launcher (torchrun-style variables, srun,
// mpirun: src/comm/launch_env.h) they join its job. Several processes of a launcher zeroshard
// cannot join are refused before anything runs.
#pragma once

#include "comm/launch_env.h"
#include "zeroshard/comm.h"

#include <functional>
#include <string>
#include <vector>

namespace zeroshard::cli {

// The command line main() was given (argv[1..]), for re-launching it on local ranks.
void set_command_line(int argc, char** argv);

// The program as main() was invoked (argv[0]), for printing a command the user can run.
const std::string& program_name();

// Before this process computes: re-executes main's command line under the compute threads'
// environment (thread_env.h) unless that was done. Commands that compute much outside
// launch_or_run call it first; launch_or_run calls it where it runs the body in this process.
void prepare_compute_process();

// How this process was started (resolved once; throws std::invalid_argument for a launcher
// whose several processes zeroshard cannot join, naming its variables).
const comm::LaunchEnv& launch_env();

// True when this process runs as one rank of a launcher's job and will not start local ranks
// itself: a launcher started it, and not as a single task asking for --nproc > 1 (`srun -n 1
// zeroshard train --nproc 2` starts two local ranks).
bool joins_job(int nproc);

// The world size and ranks per host the job will have: the launcher's when joining, else nproc.
int job_world_size(int nproc);
int job_local_world_size(int nproc);

// Joining a job: body(its rendezvous). Otherwise with nproc > 1: this command line (plus
// extra_args) on nproc local ranks. Throws when --nproc contradicts the surrounding job.
int launch_or_run(int nproc, const std::vector<std::string>& extra_args,
                  const std::function<int(const RendezvousInfo&)>& body);

}  // namespace zeroshard::cli
