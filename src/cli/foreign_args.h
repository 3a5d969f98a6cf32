// The command-line side of foreign configs (src/train/foreign_config.h): `--deepspeed FILE`,
// `--accelerate-config FILE` and the ms-swift / Megatron flag names, on `train` and
// `config show`. Their settings become config overrides placed after the --config file and
// before the user's --set (which wins), each labelled with its source.
#pragma once

#include "train/config.h"
#include "train/foreign_config.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zeroshard::cli {

class ForeignArgs {
 public:
  // Adds the options to `sub` (the object must outlive the parse).
  void add_to(CLI::App* sub);
  // The settings of every file and flag given (merged: one key from two places must agree).
  train::ForeignConfig read() const;
  // read() as overrides: the foreign ones, then --resume (when given) and the user's --set.
  static std::vector<train::ConfigOverride> overrides(const train::ForeignConfig& foreign,
                                                      const std::vector<std::string>& user_sets);
  bool any() const;

 private:
  std::string deepspeed_, accelerate_;
  std::vector<std::pair<std::string, CLI::Option*>> megatron_;  // canonical name, its option
};

// accelerate's num_processes against the world size: with --nproc not given (and no launcher),
// it becomes --nproc; otherwise it must agree with --nproc or the launcher's world size.
// Returns the --nproc to use.
int nproc_with_foreign(const train::ForeignConfig& foreign, int nproc, bool nproc_given);

}  // namespace zeroshard::cli
