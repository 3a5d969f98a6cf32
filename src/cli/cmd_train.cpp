// `zeroshard train`: validates the config before any rank starts, then trains (src/train/trainer.h).
#include "cli/command.h"
#include "cli/foreign_args.h"
#include "cli/launch_or_run.h"
#include "models/series.h"
#include "train/config.h"
#include "train/trainer.h"

#include <cstdio>

namespace zeroshard::cli {
namespace {

// `word` as one word of a POSIX shell command line.
std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                              "0123456789_./=:,+-@%") == std::string::npos;
  if (plain) return word;
  std::string out = "'";
  for (char ch : word) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// The `prepare` command that writes what this train command would read: the same config and
// --set values (train.resume aside), the same --nproc.
std::string prepare_command(const std::string& config_path, const std::vector<std::string>& sets, int nproc) {
  std::string cmd = shell_word(program_name()) + " prepare";
  if (!config_path.empty()) cmd += " --config " + shell_word(config_path);
  for (const auto& s : sets) {
    if (s.rfind("train.resume=", 0) != 0) cmd += " --set " + shell_word(s);
  }
  if (nproc > 1) cmd += " --nproc " + std::to_string(nproc);
  return cmd;
}

// `train --dry-run`: the job in one line, then what the series reads (Series::dry_run).
int dry_run(const train::TrainConfig& cfg, int world) {
  const train::TrainSection& t = cfg.train;
  std::printf("dry run: model.series %s, %d rank%s, %s, %lld steps of %lld samples (%lld per micro-batch x %d rank%s x "
              "%lld accumulated)\n",
              cfg.series.c_str(), world, world == 1 ? "" : "s", strategy_name(cfg.parallel.strategy).c_str(),
              static_cast<long long>(t.steps), static_cast<long long>(t.micro_batch_size * world * t.grad_accum),
              static_cast<long long>(t.micro_batch_size), world, world == 1 ? "" : "s", static_cast<long long>(t.grad_accum));
  std::fflush(stdout);  // before the report, which an error prints on stderr
  const models::Series& series = models::find_series(cfg.series);
  const std::string text = series.dry_run ? series.dry_run(cfg)
                                          : "model.series " + cfg.series + " generates its data (nothing to read)";
  std::printf("%s\n", text.c_str());
  return 0;
}

}  // namespace

Command add_train(CLI::App& app) {
  struct Args {
    std::string config_path, resume;
    std::vector<std::string> overrides;
    int nproc = 1;
    bool dry_run = false;
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
  sub->add_flag("--dry-run", a->dry_run,
                "Check the config and read the data as training would, item by item (file, what was read of it, "
                "its bucket, kept or why not); start no rank, train nothing");
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
            if (const auto& unprepared = models::find_series(cfg.series).unprepared) {
              const std::string missing = unprepared(cfg);
              if (!missing.empty()) {
                throw std::invalid_argument(missing + "; write it first with\n  " +
                                            prepare_command(a->config_path, a->overrides, nproc) +
                                            "\nthen run this command again");
              }
            }
            {
              train::TrainConfig sized = cfg;  // the ranks apply it again
              train::apply_world_size(sized, job_world_size(nproc), job_local_world_size(nproc));
              if (a->dry_run) return dry_run(sized, job_world_size(nproc));
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
