// The `zeroshard` command line: one file per subcommand (src/cli/cmd_<name>.cpp), each adding
// itself to the CLI11 app and returning what runs when it is chosen. main.cpp lists them.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>

namespace zeroshard::cli {

struct Command {
  CLI::App* app = nullptr;      // the subcommand (parsed() when chosen)
  std::function<int()> run;     // its work; returns the exit code; throws on errors
};

// The path of this executable (the launcher starts ranks with it).
std::string self_exe();

// Each subcommand's registration (src/cli/cmd_*.cpp).
Command add_train(CLI::App& app);
Command add_sample(CLI::App& app);
Command add_export(CLI::App& app);
Command add_inspect(CLI::App& app);
Command add_config(CLI::App& app);
Command add_report(CLI::App& app);
Command add_reference_check(CLI::App& app);
Command add_prepare(CLI::App& app);
Command add_plan(CLI::App& app);
Command add_tokenize(CLI::App& app);
Command add_seed_weights(CLI::App& app);

}  // namespace zeroshard::cli
