#include "train/trainer.h"

#include "checkpoint/checkpoint.h"
#include "io/safetensors.h"
#include "nn/matmul.h"
#include "train/metrics.h"
#include "train/stop_signal.h"
#include "train/task.h"
#include "util/tensor_memory.h"
#include "util/threads.h"
#include "zeroshard/optim.h"
#include "zeroshard/shard.h"

#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

namespace zeroshard::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string checked_resume_checkpoint(const TrainConfig& cfg) {
  const ckpt::Checkpoint ck(ckpt::resolve_checkpoint(cfg.resume));
  // Every model.* (vae.*, flux.*) key must agree (shapes alone would miss e.g. rope_theta).
  std::string diffs;
  for (const char* section : {"model", "vae", "flux", "wan"}) {
    const nlohmann::json saved = ck.config().value(section, nlohmann::json::object());
    nlohmann::json now = config_to_json(cfg, 0)[section];
    for (const char* source : {"init_from", "vae_from", "text_encoder_from"}) now.erase(source);
    for (auto it = now.begin(); it != now.end(); ++it) {
      if (saved.contains(it.key()) && saved[it.key()] != it.value()) {
        diffs += std::string("\n  ") + section + "." + it.key() + ": checkpoint " + saved[it.key()].dump() +
                 ", this run " + it.value().dump();
      }
    }
  }
  if (!diffs.empty()) {
    throw std::invalid_argument("train.resume: checkpoint " + ck.dir() + " was saved from another model:" + diffs);
  }
  if (ck.step() > cfg.steps) {
    throw std::invalid_argument("train.resume: checkpoint " + ck.dir() + " is at step " + std::to_string(ck.step()) +
                                ", past train.steps=" + std::to_string(cfg.steps));
  }
  return ck.dir();
}

std::string default_run_dir(const TrainConfig& c) {
  const std::string stem = c.config_path.empty() ? "default" : fs::path(c.config_path).stem().string();
  const std::time_t t = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&t));
  return "runs/" + stem + "-" + stamp;
}

namespace {

// Rank 0 decides, everybody agrees (ranks may start at different seconds).
std::string agree_on_string(Communicator& comm, const std::string& mine) {
  at::Tensor len = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
  comm.broadcast(len, 0);
  at::Tensor bytes = at::zeros({len.item<int64_t>()}, at::kByte);
  if (comm.rank() == 0) std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
  comm.broadcast(bytes, 0);
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
}

std::string human_count(double x) {
  char buf[32];
  if (x >= 1e6) std::snprintf(buf, sizeof(buf), "%.2fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(buf, sizeof(buf), "%.1fk", x / 1e3);
  else std::snprintf(buf, sizeof(buf), "%.0f", x);
  return buf;
}

// Keeps the lines of an earlier metrics.jsonl up to `step` (a resumed run continues it).
void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (nlohmann::json::parse(line).value("step", int64_t{0}) > step) continue;
    } catch (const std::exception&) {
      continue;  // a line cut by a crash
    }
    kept += line + "\n";
  }
  in.close();
  std::ofstream(path, std::ios::trunc) << kept;
}

}  // namespace

int run_training(const TrainConfig& config, const RendezvousInfo& rdv) {
  StopSignal stop_signal;  // SIGINT/SIGTERM: stop after the step on every rank
  TrainConfig cfg = config;
  apply_world_size(cfg, rdv.world_size, rdv.local_world_size);
  const int threads = cfg.threads > 0 ? static_cast<int>(cfg.threads)
                                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                                        std::max(1, rdv.local_world_size));
  util::set_compute_threads(threads);
  util::track_tensor_memory();  // the per-step activation and peak figures below
  nn::set_bf16_matmul(nn::parse_bf16_matmul(cfg.bf16_matmul));

  CommOptions comm_options;
  comm_options.timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.comm_timeout_s * 1000));
  comm_options.rendezvous_timeout = std::max(comm_options.timeout, std::chrono::milliseconds(30000));
  comm_options.check_desync = cfg.check_desync;
  auto comm = make_communicator(rdv, comm_options);
  const int rank = comm->rank(), world = comm->world_size();

  std::unique_ptr<ckpt::Checkpoint> resume;
  if (!cfg.resume.empty()) {
    resume = std::make_unique<ckpt::Checkpoint>(checked_resume_checkpoint(cfg));
  }
  const int64_t start_step = resume ? resume->step() : 0;

  std::string proposed_run_dir = cfg.run_dir;
  if (proposed_run_dir.empty() && resume) {
    // A resumed run continues in the run folder its checkpoint belongs to.
    const fs::path ckdir = fs::absolute(resume->dir());
    if (ckdir.parent_path().filename() == "checkpoints") proposed_run_dir = ckdir.parent_path().parent_path().string();
  }
  if (proposed_run_dir.empty()) proposed_run_dir = default_run_dir(cfg);
  const std::string run_dir = agree_on_string(*comm, proposed_run_dir);
  fs::create_directories(run_dir);
  RankLog log(run_dir + "/rank" + std::to_string(rank) + ".log", rank);
  log.line("start: world_size=" + std::to_string(world) + " strategy=" + cfg.strategy + " threads=" +
           std::to_string(threads) + " backend=" + comm->backend_name() +
           (resume ? " resume_from=" + resume->dir() : std::string()));
  if (cfg.param_dtype == "bf16") {
    log.line(std::string("bf16 matmuls: ") + nn::bf16_matmul_name(nn::resolved_bf16_matmul()) +
             " (mixed_precision.bf16_matmul=" + cfg.bf16_matmul + "; this CPU " +
             (nn::cpu_has_bf16_dot_product() ? "has" : "has no") + " bf16 dot-product instructions)");
  }
  if (rank == 0) {
    std::ofstream(run_dir + "/config.json") << config_to_json(cfg, world).dump(2) << "\n";
    if (resume) truncate_metrics(run_dir + "/metrics.jsonl", start_step);
    else std::ofstream(run_dir + "/metrics.jsonl", std::ios::trunc);  // fresh file for this run
  }

  // Model: built without parameter bytes, then each rank materializes only its shards, from
  // the checkpoint, a safetensors file, or the seeded init (identical for every W).
  std::unique_ptr<Task> task = make_task(cfg, rank, world);
  if (!task->adapted().empty()) {
    log.line("LoRA: rank " + std::to_string(cfg.lora_rank) + " adapters on " + std::to_string(task->adapted().size()) +
             " Linear layers (" + cfg.lora_targets + "); every other parameter frozen");
  }
  ShardOptions shard_options;
  shard_options.strategy = parse_strategy(cfg.strategy);
  shard_options.wrap_policy = task->wrap_policy();
  shard_options.shard_group_size = cfg.hybrid ? static_cast<int>(cfg.shard_group_size) : 0;
  shard_options.activation_checkpointing = cfg.activation_checkpointing;
  shard_options.prefetch = cfg.prefetch;
  shard_options.max_live_units = static_cast<int>(cfg.max_live_units);
  shard_options.persistence_threshold = cfg.persistence_threshold;
  shard_options.reduce_bucket_bytes = cfg.reduce_bucket_bytes;
  shard_options.param_dtype = cfg.param_dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  shard_options.reduce_dtype = cfg.reduce_dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  shard_options.recompute_check = cfg.check_recompute == "bitwise" ? nn::RecomputeCheck::Bitwise
                                  : cfg.check_recompute == "shape" ? nn::RecomputeCheck::Shape
                                                                   : nn::RecomputeCheck::Off;
  const Task* task_ptr = task.get();
  auto seeded =
      param_source_from_init([task_ptr](const std::string& name, at::Tensor& t) { task_ptr->init_parameter(name, t); });
  if (resume) {
    shard_options.param_source = resume->param_source();
  } else if (!cfg.init_from.empty()) {
    // A LoRA run starts from a base model's file; its fresh adapters come from the seeded init.
    shard_options.param_source = io::safetensors_param_source(cfg.init_from);
    if (cfg.lora_rank > 0) {
      shard_options.param_source = combine_param_sources(shard_options.param_source, seeded, nn::is_lora_parameter);
    }
  } else {
    shard_options.param_source = task->initial_source(seeded);
  }
  auto sharded = fully_shard(task->module(), comm, shard_options);
  if (sharded->num_replicas() > 1) {
    log.line("hybrid sharding: " + std::to_string(sharded->num_replicas()) + " copies of the model, each sharded over " +
             std::to_string(sharded->shard_comm().world_size()) + " ranks; this rank is in copy " +
             std::to_string(sharded->replica()));
  }
  if (cfg.dump_init) io::write_full_parameters(*sharded, run_dir + "/init.safetensors");
  AdamWOptions adam;
  adam.lr = cfg.lr;
  adam.beta1 = cfg.beta1;
  adam.beta2 = cfg.beta2;
  adam.eps = cfg.eps;
  adam.weight_decay = cfg.weight_decay;
  ShardedAdamW optim(sharded, adam);
  if (resume) {
    resume->load_optimizer(*sharded, optim);
    resume->restore_rng(rank);
    log.line("resumed from " + resume->dir() + " at step " + std::to_string(start_step) + " (saved by " +
             std::to_string(resume->world_size()) + " ranks, " + resume->strategy() + ")");
    resume.reset();
  }
  // The per-rank memory cap (run.max_rss_mb) is checked against the kernel's high-water mark
  // of this process after each phase, so nothing that happened in between escapes it.
  auto check_memory = [&](const std::string& phase) {
    if (cfg.max_rss_mb <= 0) return;
    const int64_t peak = peak_rss_bytes();
    if (peak > cfg.max_rss_mb * (int64_t{1} << 20)) {
      throw std::runtime_error("rank " + std::to_string(rank) + ": peak RSS " + std::to_string(peak >> 20) +
                               " MiB exceeds run.max_rss_mb=" + std::to_string(cfg.max_rss_mb) + " after " + phase);
    }
  };
  check_memory("initialization");
  log.line("initialized: peak RSS " + std::to_string(peak_rss_bytes() >> 20) + " MiB");
  const std::string checkpoint_root = run_dir + "/checkpoints";
  int64_t last_saved = -1;
  auto save = [&](int64_t step) {
    ckpt::SaveOptions so;
    so.step = step;
    so.config = config_to_json(cfg, world);
    so.keep_last = cfg.keep_last;
    if (cfg.debug_fail_kind == "sigkill_in_save" && cfg.debug_fail_at_step == step) {
      so.kill_rank_midway = static_cast<int>(cfg.debug_fail_rank);
    }
    const auto t0 = Clock::now();
    const std::string dir = ckpt::save_checkpoint(checkpoint_root, *sharded, optim, so);
    last_saved = step;
    log.line("saved " + dir + " in " + std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()) +
             " s; peak RSS " + std::to_string(peak_rss_bytes() >> 20) + " MiB");
    check_memory("saving step " + std::to_string(step));
  };
  LrSchedule schedule{cfg.lr, cfg.min_lr, cfg.warmup_steps, cfg.steps};
  {
    const MemoryStats m = sharded->memory();
    log.line("model: " + std::to_string(m.num_params) + " parameters in " + std::to_string(sharded->num_units()) +
             " units; per-rank bytes params=" + std::to_string(m.params_bytes) + " grads=" +
             std::to_string(m.grads_bytes) + " optim=" + std::to_string(m.optim_bytes));
  }

  if (cfg.dump_batches) task->dump_batches(run_dir + "/batches.rank" + std::to_string(rank) + ".bin", cfg.steps);

  std::unique_ptr<JsonlWriter> metrics;
  if (rank == 0) metrics = std::make_unique<JsonlWriter>(run_dir + "/metrics.jsonl");
  const bool tty = rank == 0 && isatty(STDOUT_FILENO);
  const double items_per_step = task->items_per_step();
  const std::string throughput_key = task->item_name() + "_per_s";  // tokens_per_s, clips_per_s
  std::vector<double> step_times;
  const auto job_start = Clock::now();
  float last_loss = 0.0f;
  int64_t skipped_steps = 0, stopped_at = 0;
  int stop_requested = 0;

  int64_t current_step = start_step;
  try {
    for (int64_t step = start_step + 1; step <= cfg.steps; ++step) {
      current_step = step;
      const auto t0 = Clock::now();
      sharded->reset_gathered_peak();
      sharded->reset_exposed_comm();
      // Tensor bytes of the step beyond what it started with (model states and whatever is
      // kept between steps): its peak, and what the forward keeps for backward (activations).
      util::reset_peak_tensor_bytes();
      const int64_t step_base_bytes = util::live_tensor_bytes();
      const CommStats comm_before = sharded->comm_stats();
      int64_t saved_activation_bytes = 0;
      double loss_sum = 0.0;
      if (cfg.debug_fail_at_step == step && cfg.debug_fail_rank == rank) {
        if (cfg.debug_fail_kind == "exception") {
          throw std::runtime_error("injected failure (debug.fail_at_step=" + std::to_string(step) + ") on rank " +
                                   std::to_string(rank));
        }
        if (cfg.debug_fail_kind == "desync") comm->barrier();  // a collective the other ranks do not call
        if (cfg.debug_fail_kind == "sigkill") {
          std::fprintf(stderr, "rank %d: injected SIGKILL at step %lld\n", rank, static_cast<long long>(step));
          std::fflush(stderr);
          std::raise(SIGKILL);
        }
      }
      for (int64_t micro = 0; micro < cfg.grad_accum; ++micro) {
        const int64_t live_before = util::live_tensor_bytes(), engine_before = sharded->memory().transient_bytes;
        at::Tensor loss = task->loss(step - 1, micro);
        // What the graph holds now, less what the engine's own transients (gathered units,
        // their send copies) grew or shrank by meanwhile.
        saved_activation_bytes =
            std::max(saved_activation_bytes, (util::live_tensor_bytes() - live_before) -
                                                 (sharded->memory().transient_bytes - engine_before));
        if (cfg.debug_fail_kind == "nan" && cfg.debug_fail_at_step == step && cfg.debug_fail_rank == rank) {
          loss = loss * std::numeric_limits<float>::quiet_NaN();
        }
        sharded->backward(loss, /*last_micro_batch=*/micro + 1 == cfg.grad_accum);
        loss_sum += static_cast<double>(loss.item<float>());
      }
      // Every rank sees every rank's loss and the global gradient norm, so all decide alike.
      at::Tensor rank_losses = at::empty({world}, at::kDouble);
      const auto gather_t0 = Clock::now();
      comm->all_gather(at::tensor({loss_sum}, at::kDouble), rank_losses);
      const nlohmann::json series_metrics = task->finish_step(*comm);  // e.g. MoE aux loss, VAE recon/KL
      const double loss_gather_s = std::chrono::duration<double>(Clock::now() - gather_t0).count();
      double total_loss = 0.0;
      std::string bad_ranks;
      for (int r = 0; r < world; ++r) {
        const double l = rank_losses.data_ptr<double>()[r];
        total_loss += l;
        if (!std::isfinite(l)) bad_ranks += (bad_ranks.empty() ? "" : ", ") + std::to_string(r);
      }
      const float loss = static_cast<float>(total_loss / static_cast<double>(world * cfg.grad_accum));
      const double grad_norm = sharded->finish_gradients(cfg.clip_grad_norm);
      const double lr = schedule.at(step);
      const bool finite = std::isfinite(loss) && std::isfinite(grad_norm);
      if (!finite && cfg.on_nonfinite == "abort") {
        throw std::runtime_error("non-finite loss " + exact_float(loss) + " / gradient norm " + std::to_string(grad_norm) +
                                 " at step " + std::to_string(step) +
                                 (bad_ranks.empty() ? std::string() : " (from rank " + bad_ranks + ")") +
                                 "; train.on_nonfinite=abort (skip would drop such steps)");
      }
      double optimizer_s = 0.0;
      if (finite) {
        const auto opt_t0 = Clock::now();
        const double comm_before = sharded->exposed_comm_seconds();
        optim.step(lr);
        // The parameter all-gather of optim / optim_grads inside step() counts as communication.
        optimizer_s = std::chrono::duration<double>(Clock::now() - opt_t0).count() -
                      (sharded->exposed_comm_seconds() - comm_before);
        last_loss = loss;
      } else {
        sharded->discard_gradients();
        ++skipped_steps;
        log.line("step " + std::to_string(step) + " skipped: non-finite loss " + exact_float(loss) + " from rank " +
                 bad_ranks + " (train.on_nonfinite=skip)");
      }
      const double step_time = std::chrono::duration<double>(Clock::now() - t0).count();
      step_times.push_back(step_time);
      // Where the step went on this rank: compute, communication it waited for, optimizer.
      const double comm_exposed_s = sharded->exposed_comm_seconds() + loss_gather_s;
      const double compute_s = std::max(0.0, step_time - comm_exposed_s - optimizer_s);

      const int64_t step_peak_bytes = util::peak_tensor_bytes() - step_base_bytes;
      const CommStats comm_after = sharded->comm_stats();
      // Per-rank memory and time figures, gathered so rank 0 can log all of them (times in ns).
      const MemoryStats m = sharded->memory();
      auto ns = [](double seconds) { return static_cast<int64_t>(seconds * 1e9); };
      // The same gather carries each rank's stop request (SIGINT/SIGTERM): all stop together.
      constexpr int kFields = 13;
      at::Tensor mine = at::tensor({m.params_bytes, m.grads_bytes, m.optim_bytes, m.gathered_peak_bytes, peak_rss_bytes(),
                                    static_cast<int64_t>(StopSignal::pending()), saved_activation_bytes,
                                    step_peak_bytes, ns(compute_s), ns(comm_exposed_s), ns(optimizer_s),
                                    comm_after.bytes_sent - comm_before.bytes_sent,
                                    comm_after.collectives - comm_before.collectives},
                                   at::kLong);
      at::Tensor all = at::empty({world * kFields}, at::kLong);
      comm->all_gather(mine, all);
      const int64_t* a = all.data_ptr<int64_t>();
      for (int r = 0; r < world && stop_requested == 0; ++r) stop_requested = static_cast<int>(a[r * kFields + 5]);
      if (rank == 0) {
        nlohmann::json per_rank = nlohmann::json::array();
        for (int r = 0; r < world; ++r) {
          const int64_t* f = a + r * kFields;
          per_rank.push_back({{"rank", r},
                              {"mem_params_bytes", f[0]},
                              {"mem_grads_bytes", f[1]},
                              {"mem_optim_bytes", f[2]},
                              {"mem_gathered_peak_bytes", f[3]},
                              {"rss_peak_bytes", f[4]},
                              {"mem_saved_activations_bytes", f[6]},
                              {"mem_step_peak_bytes", f[7]},
                              {"compute_s", static_cast<double>(f[8]) * 1e-9},
                              {"comm_exposed_s", static_cast<double>(f[9]) * 1e-9},
                              {"optimizer_s", static_cast<double>(f[10]) * 1e-9},
                              {"comm_bytes_sent", f[11]},
                              {"comm_collectives", f[12]}});
        }
        nlohmann::json line = {{"step", step},
                               {"loss", static_cast<double>(loss)},
                               {"lr", lr},
                               {"grad_norm", grad_norm},
                               {"step_time_s", step_time},
                               {throughput_key, items_per_step / step_time},
                               {"compute_s", compute_s},
                               {"comm_exposed_s", comm_exposed_s},
                               {"optimizer_s", optimizer_s},
                               {"mem_params_bytes", a[0]},
                               {"mem_grads_bytes", a[1]},
                               {"mem_optim_bytes", a[2]},
                               {"mem_gathered_peak_bytes", a[3]},
                               {"rss_peak_bytes", a[4]},
                               {"mem_saved_activations_bytes", a[6]},
                               {"mem_step_peak_bytes", a[7]},
                               {"skipped", !finite},
                               {"ranks", per_rank}};
        for (auto it = series_metrics.begin(); it != series_metrics.end(); ++it) line[it.key()] = it.value();
        metrics->write(line);
        const double elapsed = std::chrono::duration<double>(Clock::now() - job_start).count();
        const double eta = elapsed / static_cast<double>(step - start_step) * static_cast<double>(cfg.steps - step);
        char text[256];
        std::snprintf(text, sizeof(text), "step %lld/%lld | loss %.4f | %s %s/s | %.3f s/step | ETA %.0fs",
                      static_cast<long long>(step), static_cast<long long>(cfg.steps), static_cast<double>(loss),
                      human_count(items_per_step / step_time).c_str(),
                      task->item_name() == "tokens" ? "tok" : task->item_name().c_str(), step_time, eta);
        if (cfg.progress && tty) {
          // A bar on a terminal, redrawn in place.
          const int width = 24;
          const int filled = static_cast<int>(width * step / std::max<int64_t>(1, cfg.steps));
          const std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
          std::printf("\r[%s] %3d%% %-100s", bar.c_str(), static_cast<int>(100 * step / std::max<int64_t>(1, cfg.steps)), text);
          if (step == cfg.steps) std::printf("\n");
          std::fflush(stdout);
        } else if (cfg.progress && (step % cfg.log_every == 0 || step == 1 || step == cfg.steps)) {
          std::printf("%s\n", text);
          std::fflush(stdout);
        }
      }
      if (step % cfg.log_every == 0 || step == cfg.steps) {
        log.line("step " + std::to_string(step) + " loss " + exact_float(loss) + " grad_norm " + std::to_string(grad_norm));
      }
      check_memory("step " + std::to_string(step));
      if (cfg.save_every > 0 && step % cfg.save_every == 0) save(step);
      if (stop_requested != 0) {
        stopped_at = step;
        break;
      }
    }
  } catch (const CommError& e) {
    // A lost or stalled peer: say at which step (the checkpoint to resume from is the last save).
    throw CommError(std::string(e.what()) + " [during step " + std::to_string(current_step) + "; last checkpoint: " +
                    (last_saved >= 0 ? "step " + std::to_string(last_saved) : std::string("none")) + "]");
  }
  if (stopped_at > 0) {
    const std::string name = stop_requested == SIGINT ? "SIGINT" : "SIGTERM";
    log.line(name + ": stopped after step " + std::to_string(stopped_at));
    if (cfg.save_on_signal && last_saved != stopped_at) save(stopped_at);
    if (rank == 0) {
      std::printf("\nstopped by %s after step %lld%s; resume with --resume %s\n", name.c_str(),
                  static_cast<long long>(stopped_at), cfg.save_on_signal ? " (saved)" : "", run_dir.c_str());
    }
    comm->barrier();
    log.line("finished (stopped)");
    return stop_requested == SIGINT ? 130 : 0;
  }
  const int64_t final_step = std::max(start_step, cfg.steps);
  if (cfg.save_final && last_saved != final_step) save(final_step);

  if (cfg.dump_final_shards) {
    std::ofstream out(run_dir + "/final_shard.rank" + std::to_string(rank) + ".bin", std::ios::binary);
    for (const auto& t : sharded->local_shards()) {
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    }
  }
  comm->barrier();
  if (rank == 0) {
    std::vector<double> sorted = step_times;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
    const double per_s = median > 0 ? items_per_step / median : 0.0;
    const MemoryStats m = sharded->memory();
    nlohmann::json summary = {{"run_dir", run_dir},
                              {"world_size", world},
                              {"strategy", cfg.strategy},
                              {"steps", cfg.steps},
                              {"final_loss", static_cast<double>(last_loss)},
                              {"skipped_steps", skipped_steps},
                              {"median_step_time_s", median},
                              {throughput_key, per_s},
                              {"num_params", m.num_params},
                              {"largest_unit_bytes", m.largest_unit_bytes}};
    std::ofstream(run_dir + "/summary.json") << summary.dump(2) << "\n";
    if (step_times.empty()) {
      std::printf("done: nothing to train (resumed at step %lld of %lld); run dir %s\n",
                  static_cast<long long>(start_step), static_cast<long long>(cfg.steps), run_dir.c_str());
    } else {
      std::printf("done: %lld steps, final loss %.4f, median %.3f s/step; run dir %s\n",
                  static_cast<long long>(cfg.steps), static_cast<double>(last_loss), median, run_dir.c_str());
    }
  }
  log.line("finished");
  return 0;
}

}  // namespace zeroshard::train
