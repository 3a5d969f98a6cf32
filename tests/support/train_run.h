// Runs the `zeroshard train` binary (its own launcher) on a small model and reads back what
// the run wrote: exit code, output, metrics.jsonl.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zeroshard::testing {

// A small Llama on generated text, fast enough for 30-50 steps per run.
extern const char* const kSmallModel;

struct TrainRun {
  int exit_code = -1;
  std::string output, dir;
  std::vector<nlohmann::json> metrics;
};

// `zeroshard train --nproc N <kSmallModel> --set run.dir=<fresh dir> <args>`; dir may be given.
TrainRun train(const std::string& args, int nproc, const std::string& tag, const std::string& dir = "");

// "loss grad_norm" per step, as printed in metrics.jsonl (exact floats).
std::vector<std::string> loss_texts(const TrainRun& r);

}  // namespace zeroshard::testing
