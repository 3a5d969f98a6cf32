// `zeroshard config show` (the resolved config and where each value came from, and what each
// key of a DeepSpeed / accelerate file or Megatron flag became) and `zeroshard config keys`
// (every key of a series: type, allowed values, help).
#include "cli/command.h"
#include "cli/foreign_args.h"
#include "models/series.h"
#include "train/config.h"

#include <cstdio>

namespace zeroshard::cli {

Command add_config(CLI::App& app) {
  struct Args {
    std::string path;
    std::vector<std::string> overrides;
    std::string series;
    ForeignArgs foreign;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("config", "Inspect configurations");
  auto* show = sub->add_subcommand("show", "Print the fully resolved config and where each value came from");
  show->add_option("-c,--config", a->path, "YAML config")->check(CLI::ExistingFile);
  show->add_option("--set", a->overrides, "Override a config key (repeatable)");
  a->foreign.add_to(show);
  auto* keys = sub->add_subcommand("keys", "List every key (of the config's series): type, allowed values, help");
  keys->add_option("-c,--config", a->path, "YAML config (its model.series decides the series' keys)")
      ->check(CLI::ExistingFile);
  keys->add_option("--set", a->overrides, "Override a config key (repeatable)");
  keys->add_option("--series", a->series, "The series whose keys to list (model.series; default: the config's)");
  sub->require_subcommand(1);
  return {sub, [a, show] {
            train::Provenance prov;
            const train::ForeignConfig foreign = show->parsed() ? a->foreign.read() : train::ForeignConfig{};
            std::vector<std::string> overrides = a->overrides;
            if (!a->series.empty()) overrides.insert(overrides.begin(), "model.series=" + a->series);
            // Inspecting a config needs no data: a series' dataset or cache may still be unset.
            train::TrainConfig cfg = train::load_config_sourced(a->path, ForeignArgs::overrides(foreign, overrides), &prov,
                                                                /*needs_data=*/false);
            if (show->parsed()) {
              for (const auto& [k, v] : train::config_items(cfg)) {
                std::printf("%-34s %-24s # %s\n", k.c_str(), v.c_str(), prov[k].c_str());
              }
              if (a->foreign.any()) {
                // Every key of the foreign inputs: mapped (and to what), kept automatic, or
                // honoured as it is (refused keys stopped load above, naming themselves).
                std::printf("\nforeign settings (a later --set wins over a mapped value):\n");
                for (const auto& line : foreign.describe()) std::printf("  %s\n", line.c_str());
              }
              return 0;
            }
            std::printf("model.series %s: %s\n\n", cfg.series.c_str(), models::find_series(cfg.series).summary.c_str());
            const train::ConfigKeys all = train::config_keys(cfg);
            for (const auto& k : all.all()) {
              std::printf("%-34s %-7s %s%s\n    %s\n", k.name.c_str(), k.type.c_str(), k.allowed.c_str(),
                          k.describes_model ? " (describes the model)" : "", k.help.c_str());
            }
            return 0;
          }};
}

}  // namespace zeroshard::cli
