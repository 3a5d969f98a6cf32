// `zeroshard train`: validates the config before any rank starts, then trains (src/train/trainer.h).
#include "cli/command.h"
#include "cli/foreign_args.h"
#include "cli/launch_or_run.h"
#include "train/config.h"
#include "train/trainer.h"

namespace zeroshard::cli {

Command add_train(CLI::App& app) {
  struct Args {
    std::string config_path, resume;
    std::vector<std::string> overrides;
    int nproc = 1;
    CLI::Option* nproc_option = nullptr;
    ForeignArgs foreign;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("train", "Train a model (the default job when no --config is given)");
  sub->add_option("-c,--config", a->config_path, "YAML config (see configs/); `base:` chains to a parent file")
      ->check(CLI::ExistingFile);
  sub->add_option("--set", a->overrides, "Override a config key: --set train.steps=100 (repeatable)");
  a->nproc_option = sub->add_option("--nproc", a->nproc,
                                    "Start this many local ranks (a launcher's job is joined instead: torchrun-style "
                                    "variables, srun, mpirun)")
                        ->check(CLI::Range(1, 1024));
  sub->add_option("--resume", a->resume,
                  "Continue from a checkpoint: its folder, a checkpoints folder or a run folder (uses `latest`); "
                  "same as --set train.resume=PATH");
  a->foreign.add_to(sub);
  return {sub, [a] {
            const train::ForeignConfig foreign = a->foreign.read();
            const int nproc = nproc_with_foreign(foreign, a->nproc, a->nproc_option->count() > 0);
            // Foreign settings after the --config file, then --resume, then the user's --set
            // (so a --set train.resume, the launcher's resolved folder, wins).
            std::vector<std::string> sets;
            if (!a->resume.empty()) sets.push_back("train.resume=" + a->resume);
            sets.insert(sets.end(), a->overrides.begin(), a->overrides.end());
            std::vector<train::ConfigOverride> overrides = ForeignArgs::overrides(foreign, sets);
            const bool joined = joins_job(nproc);
            // Validate everything before any rank starts.
            train::TrainConfig cfg = train::load_config_sourced(a->config_path, overrides);
            {
              train::TrainConfig sized = cfg;  // the ranks apply it again
              train::apply_world_size(sized, job_world_size(nproc), job_local_world_size(nproc));
            }
            std::vector<std::string> extra;  // what the launched ranks must agree on
            if (!joined && !cfg.train.resume.empty()) {
              // Fails now if there is no checkpoint or it is another model's; and every rank
              // loads the same one even if `latest` moves while they start.
              const std::string dir = train::checked_resume_checkpoint(cfg);
              overrides.push_back({"train.resume=" + dir, "--set", false});
              extra = {"--set", "train.resume=" + dir};
              cfg = train::load_config_sourced(a->config_path, overrides);
            }
            if (!joined && nproc > 1 && cfg.run.dir.empty() && cfg.train.resume.empty()) {
              extra.insert(extra.end(), {"--set", "run.dir=" + train::default_run_dir(cfg)});
            }
            return launch_or_run(nproc, extra,
                                 [&cfg](const RendezvousInfo& rdv) { return train::Trainer(cfg, rdv).run(); });
          }};
}

}  // namespace zeroshard::cli
