// `zeroshard prepare --config C [--nproc N]`: the series' preprocessing of its dataset, sharded
// across ranks like training (models::Series::prepare): e.g. tokenizing a text corpus into an
// indexed token dataset, or running a pipeline's frozen towers once into a conditioning cache.
#include "cli/command.h"
#include "cli/launch_or_run.h"
#include "models/series.h"
#include "train/config.h"
#include "util/threads.h"

#include <algorithm>
#include <cstdio>

namespace zeroshard::cli {

Command add_prepare(CLI::App& app) {
  struct Args {
    std::string config_path;
    std::vector<std::string> overrides;
    int nproc = 1;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("prepare",
                                 "Preprocess the config's dataset once (tokenize a corpus, or cache a pipeline's tower "
                                 "outputs), sharded across ranks");
  sub->add_option("-c,--config", a->config_path, "YAML config")->check(CLI::ExistingFile);
  sub->add_option("--set", a->overrides, "Override a config key (repeatable)");
  sub->add_option("--nproc", a->nproc, "Start this many local ranks")->check(CLI::Range(1, 1024));
  return {sub, [a] {
            const train::TrainConfig cfg = train::load_config(a->config_path, a->overrides);
            const models::Series& series = models::find_series(cfg.series);
            if (!series.prepare) {
              throw std::invalid_argument("model.series " + cfg.series + " has nothing to prepare (it trains on data "
                                          "it reads or generates itself)");
            }
            if (series.check_prepare) series.check_prepare(cfg);
            return launch_or_run(a->nproc, {}, [&](const RendezvousInfo& rdv) {
              // parallel.threads as training takes it: the towers' results depend on the threads per rank.
              util::set_compute_threads(cfg.parallel.threads > 0 ? static_cast<int>(cfg.parallel.threads)
                                                                  : util::default_compute_threads(rdv.local_world_size));
              const std::string text = series.prepare(cfg, rdv);
              if (rdv.rank == 0) std::printf("%s\n", text.c_str());
              return 0;
            });
          }};
}

}  // namespace zeroshard::cli
