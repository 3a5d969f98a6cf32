// `zeroshard plan --config C --nproc N [--strategy S]`: per-rank bytes of parameters, gradients
// and optimizer state, the largest gathered unit, what is gathered at once, and the bytes each
// rank sends per step, for each strategy (src/shard/plan.h), from the model built without
// parameter bytes. No ranks start; nothing of the model's size is allocated.
#include "cli/command.h"
#include "models/series.h"
#include "shard/plan.h"
#include "train/config.h"
#include "train/task.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace zeroshard::cli {

namespace {

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

Command add_plan(CLI::App& app) {
  struct Args {
    std::string config_path, strategy;
    std::vector<std::string> overrides;
    int nproc = 1, nproc_per_host = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("plan",
                                 "Per-rank model-state bytes, largest gathered unit and bytes sent per step of a config "
                                 "under each strategy, computed on the model without allocating it");
  sub->add_option("-c,--config", a->config_path, "YAML config")->check(CLI::ExistingFile);
  sub->add_option("--set", a->overrides, "Override a config key (repeatable)");
  sub->add_option("--nproc", a->nproc, "World size to plan for")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--nproc-per-host", a->nproc_per_host,
                  "Ranks per host (hybrid sharding's default group); 0: all on one host")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--strategy", a->strategy, "Only this strategy (a name or zero stage 0-3); default: all four");
  sub->add_flag("--json", a->json, "One JSON object (exact bytes) instead of the table");
  return {sub, [a] {
            train::TrainConfig cfg = train::load_config(a->config_path, a->overrides);
            train::apply_world_size(cfg, a->nproc, a->nproc_per_host > 0 ? a->nproc_per_host : a->nproc);
            // Rank 0's task: the model inside nn::DeferredInit (shapes only) and the batch shape.
            const std::unique_ptr<train::Task> task = models::find_series(cfg.series).make_task(cfg, 0, a->nproc);
            std::vector<Strategy> strategies = {Strategy::NoShard, Strategy::Optim, Strategy::OptimGrads,
                                                Strategy::OptimGradsParams};
            if (!a->strategy.empty()) strategies = {parse_strategy(a->strategy)};
            nlohmann::json j = {{"world_size", a->nproc}, {"micro_batches", cfg.train.grad_accum},
                                {"param_dtype", cfg.mixed_precision.param_dtype == train::DType::BF16 ? "bf16" : "fp32"},
                                {"reduce_dtype", cfg.mixed_precision.reduce_dtype == train::DType::BF16 ? "bf16" : "fp32"},
                                {"strategies", nlohmann::json::array()}};
            // model.frozen_storage=file: which frozen parameters lie in files (headers only).
            const std::shared_ptr<ParamSource> source =
                cfg.frozen_storage == FrozenStorage::File ? train::initial_param_source(cfg, *task) : nullptr;
            shard::ModelPlan first;
            for (size_t i = 0; i < strategies.size(); ++i) {
              ShardOptions o = train::shard_options(cfg);
              if (cfg.frozen_storage == FrozenStorage::File && cfg.frozen_converted == "copy" &&
                  o.converted_copy_dir.empty()) {
                o.converted_copy_dir = "<run folder>/frozen_converted";  // the plan only asks whether there is one
              }
              o.strategy = strategies[i];
              o.param_source = source;
              const shard::ModelPlan p = shard::plan_model(task->module(), o, a->nproc, cfg.train.grad_accum);
              if (i == 0) first = p;
              const shard::StrategyCost& c = p.cost;
              j["strategies"].push_back({{"strategy", strategy_name(c.strategy)},
                                         {"shard_ranks", c.shard_ranks},
                                         {"replicas", c.replicas},
                                         {"params_bytes", c.params_bytes},
                                         {"grads_bytes", c.grads_bytes},
                                         {"optim_bytes", c.optim_bytes},
                                         {"model_state_bytes", c.model_state_bytes()},
                                         {"largest_unit_bytes", c.largest_unit_bytes},
                                         {"gathered_peak_bytes", c.gathered_peak_bytes},
                                         {"comm_bytes_per_step", c.comm_bytes()},
                                         {"comm_param_gather_bytes", c.comm_param_gather_bytes},
                                         {"comm_reduce_bytes", c.comm_reduce_bytes},
                                         {"comm_grad_gather_bytes", c.comm_grad_gather_bytes},
                                         {"comm_publish_bytes", c.comm_publish_bytes},
                                         {"comm_scalar_bytes", c.comm_scalar_bytes},
                                         {"comm_deferred_bytes", c.comm_deferred_bytes},
                                         {"comm_deferred_chunk_bytes", c.comm_deferred_chunk_bytes},
                                         {"mapped_bytes", c.mapped_bytes},
                                         {"converted_bytes", c.converted_bytes},
                                         {"file_bytes_per_pass", c.file_bytes_per_pass}});
            }
            j["num_params"] = first.num_params;
            j["num_trainable"] = first.num_trainable;
            j["units"] = static_cast<int64_t>(first.units.size());
            j["frozen_storage"] = cfg.frozen_storage == FrozenStorage::File ? "file" : "memory";
            if (a->json) {
              std::printf("%s\n", j.dump(2).c_str());
              return 0;
            }
            std::printf("model.series %s: %lld parameters (%lld trainable) in %zu units; %d ranks, %s compute, %s "
                        "reductions, %lld micro-batch%s per step\n",
                        cfg.series.c_str(), static_cast<long long>(first.num_params),
                        static_cast<long long>(first.num_trainable), first.units.size(), a->nproc,
                        j["param_dtype"].get<std::string>().c_str(), j["reduce_dtype"].get<std::string>().c_str(),
                        static_cast<long long>(cfg.train.grad_accum), cfg.train.grad_accum == 1 ? "" : "es");
            std::printf("per rank:\n%-20s %12s %12s %12s %12s %14s %14s %14s\n", "strategy", "params", "grads",
                        "optim", "model state", "largest unit", "gathered peak", "sent/step");
            for (const auto& s : j["strategies"]) {
              std::printf("%-20s %12s %12s %12s %12s %14s %14s %14s\n", s["strategy"].get<std::string>().c_str(),
                          mib(s["params_bytes"]).c_str(), mib(s["grads_bytes"]).c_str(), mib(s["optim_bytes"]).c_str(),
                          mib(s["model_state_bytes"]).c_str(), mib(s["largest_unit_bytes"]).c_str(),
                          mib(s["gathered_peak_bytes"]).c_str(), mib(s["comm_bytes_per_step"]).c_str());
            }
            if (source) {
              const shard::StrategyCost& c = first.cost;
              std::printf("model.frozen_storage=file: %s of frozen weights used in place from the mapped files (page "
                          "cache, shared by a host's ranks; not in params), %s converted into their unit's buffer at "
                          "each use; one forward reads %s of the files (from storage when the page cache cannot "
                          "keep them)\n",
                          mib(c.mapped_bytes).c_str(), mib(c.converted_bytes).c_str(),
                          mib(c.file_bytes_per_pass).c_str());
            }
            return 0;
          }};
}

}  // namespace zeroshard::cli
