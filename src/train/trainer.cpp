#include "train/trainer.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/peft.h"
#include "comm/agree.h"
#include "io/file.h"
#include "io/run_lock.h"
#include "io/safetensors.h"
#include "io/torch_pth.h"
#include "io/tensorboard.h"
#include "models/series.h"
#include "nn/layers.h"
#include "nn/matmul.h"
#include "train/fault_injection.h"
#include "train/metrics.h"
#include "train/op_profile.h"
#include "train/step_metrics.h"
#include "train/stop_signal.h"
#include "train/task.h"
#include "util/heap.h"
#include "util/optional_parts.h"
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
#include <set>

namespace zeroshard::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string checked_resume_checkpoint(const TrainConfig& cfg) {
  const ckpt::Checkpoint ck(ckpt::resolve_checkpoint(cfg.train.resume));
  if (ck.model_only()) {
    throw std::invalid_argument("train.resume: checkpoint " + ck.dir() +
                                " holds the parameters only (saved with train.save_model_only: no AdamW or RNG "
                                "state), so training cannot continue exactly from it. Export it (`zeroshard export " +
                                ck.dir() + " model.safetensors`) and start a new run with model.init_from");
  }
  const auto diffs = model_differences(cfg, ck.config());
  if (!diffs.empty()) {
    std::string text;
    for (const auto& d : diffs) text += "\n  " + d;
    throw std::invalid_argument("train.resume: checkpoint " + ck.dir() + " was saved from another model:" + text);
  }
  if (ck.step() > cfg.train.steps) {
    throw std::invalid_argument("train.resume: checkpoint " + ck.dir() + " is at step " + std::to_string(ck.step()) +
                                ", past train.steps=" + std::to_string(cfg.train.steps));
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

// One rank's matmul throughput in FLOP/s, for the MFU figure when run.peak_tflops is 0: the
// best of a few 1024^3 products in the compute dtype, through the kernels the model uses
// (src/nn/matmul.h), with this rank's threads and while the other ranks measure too (the
// contention a run has). Touches no random generator.
double measured_peak_flops(at::ScalarType dtype) {
  const int64_t n = 1024;
  const at::Tensor a = at::full({n, n}, 0.5, at::kFloat).to(dtype), b = at::full({n, n}, 0.25, at::kFloat).to(dtype);
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = Clock::now();
    const at::Tensor c = nn::matmul(a, b);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i > 0) best = std::min(best, s);  // the first one warms up
  }
  return 2.0 * static_cast<double>(n * n * n) / best;
}

nn::Bf16Matmul bf16_matmul_mode(Bf16Matmul m) {
  return m == Bf16Matmul::Native ? nn::Bf16Matmul::Native : m == Bf16Matmul::ViaFp32 ? nn::Bf16Matmul::ViaFp32
                                                                                     : nn::Bf16Matmul::Auto;
}

}  // namespace

struct Trainer::Impl {
  Impl(const TrainConfig& config, const RendezvousInfo& r) : cfg(config), rdv(r) {}

  TrainConfig cfg;
  RendezvousInfo rdv;
  std::unique_ptr<io::RunLock> run_lock;  // rank 0: held from before anything is written until the end
  std::unique_ptr<io::EventWriter> events;  // rank 0, run.tensorboard
  double flops_per_item = 0, peak_flops = 0;  // model FLOPs per item; one rank's peak FLOP/s
  StopSignal stop_signal;  // SIGINT/SIGTERM: stop after the step on every rank
  std::shared_ptr<Communicator> comm;
  int rank = 0, world = 1, threads = 1;
  std::unique_ptr<ckpt::Checkpoint> resume;
  int64_t start_step = 0;
  std::string run_dir, checkpoint_root;
  std::unique_ptr<RankLog> log;
  std::unique_ptr<FaultInjector> faults;
  std::unique_ptr<Task> task;
  std::shared_ptr<ShardedModel> sharded;
  std::unique_ptr<ShardedAdamW> optim;
  LrSchedule schedule;
  std::unique_ptr<JsonlWriter> metrics;
  bool tty = false;
  double items_per_step = 0;
  std::string throughput_key;
  std::vector<double> step_times;
  Clock::time_point job_start;
  float last_loss = 0.0f;
  StepMetrics pending;  // the step's metrics line, written after evaluate() adds its figures
  nlohmann::json last_eval;
  int64_t skipped_steps = 0, stopped_at = 0, last_saved = -1, current_step = 0;
  int stop_requested = 0;

  // The per-rank memory cap (run.max_rss_mb) is checked against the kernel's high-water mark
  // of this process after each phase, so nothing that happened in between escapes it.
  void check_memory(const std::string& phase) const {
    if (cfg.run.max_rss_mb <= 0) return;
    const int64_t peak = peak_rss_bytes();
    if (peak > cfg.run.max_rss_mb * (int64_t{1} << 20)) {
      throw std::runtime_error("rank " + std::to_string(rank) + ": peak RSS " + std::to_string(peak >> 20) +
                               " MiB exceeds run.max_rss_mb=" + std::to_string(cfg.run.max_rss_mb) + " after " + phase);
    }
  }

  void print_progress(const StepMetrics& m) const {
    const int64_t steps = cfg.train.steps;
    const double elapsed = std::chrono::duration<double>(Clock::now() - job_start).count();
    const double eta = elapsed / static_cast<double>(m.step - start_step) * static_cast<double>(steps - m.step);
    char text[384];
    char val[48] = "";
    if (m.series.is_object() && m.series.contains("val_loss")) {
      std::snprintf(val, sizeof(val), " | val %.4f", m.series["val_loss"].get<double>());
    }
    // As torchtitan logs it: the model's FLOP/s per rank and their share of the peak (MFU).
    char flops[96] = "";
    if (m.tflops_per_rank > 0) {
      std::snprintf(flops, sizeof(flops), " | %.3g TFLOP/s/rank | MFU %.1f%%", m.tflops_per_rank, 100.0 * m.mfu);
    }
    std::snprintf(text, sizeof(text), "step %lld/%lld | loss %.4f%s | %s %s/s%s | %.3f s/step | ETA %.0fs",
                  static_cast<long long>(m.step), static_cast<long long>(steps), static_cast<double>(m.loss), val,
                  human_count(m.throughput).c_str(), task->item_name() == "tokens" ? "tok" : task->item_name().c_str(),
                  flops, m.step_time_s, eta);
    if (cfg.run.progress && tty) {
      // A bar on a terminal, redrawn in place.
      const int width = 24;
      const int filled = static_cast<int>(width * m.step / std::max<int64_t>(1, steps));
      const std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
      std::printf("\r[%s] %3d%% %-100s", bar.c_str(), static_cast<int>(100 * m.step / std::max<int64_t>(1, steps)), text);
      if (m.step == steps) std::printf("\n");
      std::fflush(stdout);
    } else if (cfg.run.progress && (m.step % cfg.train.log_every == 0 || m.step == 1 || m.step == steps)) {
      std::printf("%s\n", text);
      std::fflush(stdout);
    }
  }
};

Trainer::Trainer(const TrainConfig& config, const RendezvousInfo& rdv) : impl_(std::make_unique<Impl>(config, rdv)) {}
Trainer::~Trainer() = default;

void Trainer::setup() {
  Impl& s = *impl_;
  TrainConfig& cfg = s.cfg;
  // Every rank, before any collective or file (rank 0 alone writes the events).
  if (cfg.run.tensorboard) util::require_part(util::OptionalPart::kTensorBoard, "run.tensorboard=true");
  apply_world_size(cfg, s.rdv.world_size, s.rdv.local_world_size);
  s.threads = cfg.parallel.threads > 0
                  ? static_cast<int>(cfg.parallel.threads)
                  : util::default_compute_threads(s.rdv.local_world_size);
  util::set_compute_threads(s.threads);
  util::track_tensor_memory();  // the per-step activation and peak figures
  nn::set_bf16_matmul(bf16_matmul_mode(cfg.mixed_precision.bf16_matmul));

  CommOptions comm_options;
  comm_options.timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.parallel.comm_timeout_s * 1000));
  comm_options.rendezvous_timeout = std::max(comm_options.timeout, std::chrono::milliseconds(30000));
  comm_options.check_desync = cfg.debug.check_desync;
  s.comm = make_communicator(s.rdv, comm_options);
  s.rank = s.comm->rank();
  s.world = s.comm->world_size();
  s.faults = std::make_unique<FaultInjector>(cfg.debug, s.rank);

  if (!cfg.train.resume.empty()) s.resume = std::make_unique<ckpt::Checkpoint>(checked_resume_checkpoint(cfg));
  s.start_step = s.resume ? s.resume->step() : 0;
  s.current_step = s.start_step;

  std::string proposed_run_dir = cfg.run.dir;
  if (proposed_run_dir.empty() && s.resume) {
    // A resumed run continues in the run folder its checkpoint belongs to.
    const fs::path ckdir = fs::absolute(s.resume->dir());
    if (ckdir.parent_path().filename() == "checkpoints") proposed_run_dir = ckdir.parent_path().parent_path().string();
  }
  if (proposed_run_dir.empty()) proposed_run_dir = default_run_dir(cfg);
  s.run_dir = broadcast_string(*s.comm, proposed_run_dir, 0);
  s.checkpoint_root = s.run_dir + "/checkpoints";
  // One run, one folder: rank 0 locks it (for the job's life) and checks what an earlier run
  // left there before any rank writes a byte; every rank learns the outcome and fails alike.
  std::string refusal, cleared;
  if (s.rank == 0) {
    try {
      s.run_lock = io::RunLock::acquire(s.run_dir);
      // Resuming a checkpoint of this very folder continues it; anything else starts a run.
      const bool resuming_here =
          s.resume && fs::weakly_canonical(s.resume->dir()).string().rfind(
                          fs::weakly_canonical(s.checkpoint_root).string() + "/", 0) == 0;
      if (!resuming_here) {
        io::check_run_dir_start(s.run_dir, /*resuming=*/false, cfg.run.overwrite);
        if (cfg.run.overwrite) {
          for (const auto& name : io::clear_run_results(s.run_dir)) cleared += (cleared.empty() ? "" : ", ") + name;
        }
      }
    } catch (const std::exception& e) {
      refusal = e.what();
      s.run_lock.reset();
    }
  }
  refusal = broadcast_string(*s.comm, refusal, 0);
  if (!refusal.empty()) throw std::runtime_error(refusal);
  fs::create_directories(s.run_dir);
  s.log = std::make_unique<RankLog>(s.run_dir + "/rank" + std::to_string(s.rank) + ".log", s.rank);
  if (!cleared.empty()) s.log->line("run.overwrite: removed the earlier run's " + cleared);
  s.log->line("start: world_size=" + std::to_string(s.world) + " strategy=" + strategy_name(cfg.parallel.strategy) +
              " threads=" + std::to_string(s.threads) + " backend=" + s.comm->backend_name() +
              " blas=" + util::blas_description() +
              (s.resume ? " resume_from=" + s.resume->dir() : std::string()));
  if (cfg.mixed_precision.param_dtype == DType::BF16) {
    const ConfigKeys keys = config_keys(cfg);
    s.log->line(std::string("bf16 matmuls: ") + nn::bf16_matmul_name(nn::resolved_bf16_matmul()) +
                " (mixed_precision.bf16_matmul=" + keys.get("mixed_precision.bf16_matmul", "").get() +
                "; this CPU " + (nn::cpu_has_bf16_dot_product() ? "has" : "has no") +
                " bf16 dot-product instructions)");
  }
  if (s.rank == 0) {
    std::ofstream(s.run_dir + "/config.json") << config_to_json(cfg, s.world).dump(2) << "\n";
    if (s.resume) truncate_metrics(s.run_dir + "/metrics.jsonl", s.start_step);
    else std::ofstream(s.run_dir + "/metrics.jsonl", std::ios::trunc);  // fresh file for this run
  }

  // Model: built without parameter bytes, then each rank materializes only its shards, from
  // the checkpoint, a safetensors file, or the seeded init (identical for every W).
  s.task = models::find_series(cfg.series).make_task(cfg, s.rank, s.world);
  if (!s.task->adapted().empty()) {
    s.log->line("LoRA: rank " + std::to_string(cfg.lora.rank) + " adapters on " +
                std::to_string(s.task->adapted().size()) + " Linear layers (" + cfg.lora.targets +
                "); every other parameter frozen");
  }
  auto announce = [&](const std::string& note) {
    s.log->line(note);
    if (s.rank == 0 && cfg.run.progress) std::printf("%s\n", note.c_str());
  };
  s.task->agree_on_data(*s.comm);
  for (const std::string& note : s.task->notes()) announce(note);
  if (cfg.train.eval_every > 0 && !s.task->has_validation()) {
    throw std::invalid_argument("train.eval_every=" + std::to_string(cfg.train.eval_every) + ": model.series " +
                                cfg.series + " holds out no validation data here (qwen3: set data.valid_fraction)");
  }
  ShardOptions shard = shard_options(cfg);
  if (cfg.frozen_storage == FrozenStorage::File && cfg.frozen_converted == "copy" && shard.converted_copy_dir.empty()) {
    shard.converted_copy_dir = s.run_dir + "/frozen_converted";
  }
  if (s.resume && cfg.frozen_storage == FrozenStorage::File) {
    // Frozen weights never change: a resumed run reads them in place from the model's files again
    // (the same values the checkpoint holds), the rest from the checkpoint.
    std::set<std::string> frozen;
    for (const auto& p : s.task->module()->named_parameters()) {
      if (!p.value().requires_grad()) frozen.insert(p.key());
    }
    shard.param_source = combine_param_sources(s.resume->param_source(/*frozen_read_elsewhere=*/true),
                                               initial_param_source(cfg, *s.task),
                                               [frozen](const std::string& n) { return frozen.count(n) > 0; });
  } else if (s.resume) {
    shard.param_source = s.resume->param_source();
  } else {
    shard.param_source = initial_param_source(cfg, *s.task);
  }
  if (!cfg.lora.init_from.empty()) {
    // Continue from a PEFT adapter: its lora_A / lora_B become the adapters' starting values.
    const nn::LoraOptions lo = lora_options(cfg);
    shard.param_source = combine_param_sources(
        shard.param_source,
        ckpt::peft_adapter_source(cfg.lora.init_from, models::find_series(cfg.series).adapter_root, lo.rank, lo.alpha,
                                  lo.targets),
        nn::is_lora_parameter);
    s.log->line("LoRA adapters from the PEFT adapter " + cfg.lora.init_from);
  }
  for (const std::string& note : shard.param_source->notes()) announce(note);
  {
    // The shards are built from one parameter's temporaries after another: mapped blocks that go
    // back when freed, so the build leaves no high-water mark for the steps (util/heap.h).
    util::StreamingHeap streaming;
    s.sharded = fully_shard(s.task->module(), s.comm, shard);
  }
  for (const std::string& note : s.sharded->notes()) announce(note);
  if (s.sharded->num_replicas() > 1) {
    s.log->line("hybrid sharding: " + std::to_string(s.sharded->num_replicas()) +
                " copies of the model, each sharded over " + std::to_string(s.sharded->shard_comm().world_size()) +
                " ranks; this rank is in copy " + std::to_string(s.sharded->replica()));
  }
  if (cfg.run.dump_init) io::write_full_parameters(*s.sharded, s.run_dir + "/init.safetensors");
  AdamWOptions adam;
  adam.lr = cfg.train.lr;
  adam.beta1 = cfg.train.beta1;
  adam.beta2 = cfg.train.beta2;
  adam.eps = cfg.train.eps;
  adam.weight_decay = cfg.train.weight_decay;
  s.optim = std::make_unique<ShardedAdamW>(s.sharded, adam);
  if (s.resume) {
    s.resume->load_optimizer(*s.sharded, *s.optim);
    s.resume->restore_rng(s.rank);
    s.log->line("resumed from " + s.resume->dir() + " at step " + std::to_string(s.start_step) + " (saved by " +
                std::to_string(s.resume->world_size()) + " ranks, " + s.resume->strategy() + ")");
    s.resume.reset();
  }
  s.check_memory("initialization");
  s.log->line("initialized: peak RSS " + std::to_string(peak_rss_bytes() >> 20) + " MiB");
  s.schedule = LrSchedule{cfg.train.lr, cfg.train.min_lr, cfg.train.warmup_steps, cfg.train.steps};
  {
    const MemoryStats m = s.sharded->memory();
    s.log->line("model: " + std::to_string(m.num_params) + " parameters in " + std::to_string(s.sharded->num_units()) +
                " units; per-rank bytes params=" + std::to_string(m.params_bytes) + " grads=" +
                std::to_string(m.grads_bytes) + " optim=" + std::to_string(m.optim_bytes));
  }
  if (cfg.run.dump_batches) {
    s.task->dump_batches(s.run_dir + "/batches.rank" + std::to_string(s.rank) + ".bin", cfg.train.steps);
  }
  if (s.rank == 0) s.metrics = std::make_unique<JsonlWriter>(s.run_dir + "/metrics.jsonl");
  if (s.rank == 0 && cfg.run.tensorboard) {
    s.events = std::make_unique<io::EventWriter>(s.run_dir, s.start_step);
    s.log->line("TensorBoard events: " + s.events->path());
  }
  s.tty = s.rank == 0 && isatty(STDOUT_FILENO);
  s.items_per_step = s.task->items_per_step();
  s.flops_per_item = s.task->flops_per_item();
  if (s.flops_per_item > 0) {
    s.peak_flops = cfg.run.peak_tflops > 0 ? cfg.run.peak_tflops * 1e12
                                           : measured_peak_flops(scalar_type(cfg.mixed_precision.param_dtype));
    char line[200];
    std::snprintf(line, sizeof(line), "model FLOPs: %.4g per %s; peak %.4g TFLOP/s per rank (%s)",
                  s.flops_per_item, s.task->item_name().c_str(), s.peak_flops / 1e12,
                  cfg.run.peak_tflops > 0 ? "run.peak_tflops" : "measured: 1024^3 matmuls in the compute dtype");
    s.log->line(line);
  }
  s.throughput_key = s.task->item_name() + "_per_s";  // tokens_per_s, clips_per_s
  s.job_start = Clock::now();
}

bool Trainer::step(int64_t step) {
  Impl& s = *impl_;
  const TrainConfig& cfg = s.cfg;
  ShardedModel& sharded = *s.sharded;
  s.current_step = step;
  const auto t0 = Clock::now();
  sharded.reset_gathered_peak();
  sharded.reset_exposed_comm();
  // Tensor bytes of the step beyond what it started with (model states and whatever is kept
  // between steps): its peak, and what the forward keeps for backward (activations).
  util::reset_peak_tensor_bytes();
  const int64_t step_base_bytes = util::live_tensor_bytes();
  const CommStats comm_before = sharded.comm_stats();
  const int64_t read_before = storage_read_bytes();
  int64_t saved_activation_bytes = 0;
  double loss_sum = 0.0;
  s.faults->before_step(step, *s.comm);
  std::unique_ptr<OpProfile> profile;
  if (step == cfg.run.profile_step) profile = std::make_unique<OpProfile>();
  for (int64_t micro = 0; micro < cfg.train.grad_accum; ++micro) {
    const int64_t live_before = util::live_tensor_bytes(), engine_before = sharded.memory().transient_bytes;
    at::Tensor loss = s.task->loss(step - 1, micro);
    // What the graph holds now, less what the engine's own transients (gathered units, their
    // send copies) grew or shrank by meanwhile.
    saved_activation_bytes = std::max(saved_activation_bytes, (util::live_tensor_bytes() - live_before) -
                                                                  (sharded.memory().transient_bytes - engine_before));
    loss = s.faults->on_loss(step, loss);
    sharded.backward(loss, /*last_micro_batch=*/micro + 1 == cfg.train.grad_accum);
    loss_sum += static_cast<double>(loss.item<float>());
  }
  // Every rank sees every rank's loss and the global gradient norm, so all decide alike.
  at::Tensor rank_losses = at::empty({s.world}, at::kDouble);
  const auto gather_t0 = Clock::now();
  s.comm->all_gather(at::tensor({loss_sum}, at::kDouble), rank_losses);
  StepMetrics m;
  m.series = s.task->finish_step(*s.comm);  // e.g. MoE aux loss, VAE recon/KL
  const double loss_gather_s = std::chrono::duration<double>(Clock::now() - gather_t0).count();
  double total_loss = 0.0;
  std::string bad_ranks;
  for (int r = 0; r < s.world; ++r) {
    const double l = rank_losses.data_ptr<double>()[r];
    total_loss += l;
    if (!std::isfinite(l)) bad_ranks += (bad_ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  m.step = step;
  m.loss = static_cast<float>(total_loss / static_cast<double>(s.world * cfg.train.grad_accum));
  m.grad_norm = sharded.finish_gradients(cfg.train.clip_grad_norm);
  m.lr = s.schedule.at(step);
  const bool finite = std::isfinite(m.loss) && std::isfinite(m.grad_norm);
  if (!finite && cfg.train.on_nonfinite == OnNonfinite::Abort) {
    throw std::runtime_error("non-finite loss " + exact_float(m.loss) + " / gradient norm " +
                             std::to_string(m.grad_norm) + " at step " + std::to_string(step) +
                             (bad_ranks.empty() ? std::string() : " (from rank " + bad_ranks + ")") +
                             "; train.on_nonfinite=abort (skip would drop such steps)");
  }
  double optimizer_s = 0.0;
  if (finite) {
    const auto opt_t0 = Clock::now();
    const double comm_before_opt = sharded.exposed_comm_seconds();
    {
      RECORD_FUNCTION("zs::optimizer", std::vector<c10::IValue>());  // train/op_profile.h
      s.optim->step(m.lr);
    }
    // The parameter all-gather of optim / optim_grads inside step() counts as communication.
    optimizer_s = std::chrono::duration<double>(Clock::now() - opt_t0).count() -
                  (sharded.exposed_comm_seconds() - comm_before_opt);
    s.last_loss = m.loss;
  } else {
    sharded.discard_gradients();
    ++s.skipped_steps;
    s.log->line("step " + std::to_string(step) + " skipped: non-finite loss " + exact_float(m.loss) + " from rank " +
                bad_ranks + " (train.on_nonfinite=skip)");
  }
  m.skipped = !finite;
  m.step_time_s = std::chrono::duration<double>(Clock::now() - t0).count();
  s.step_times.push_back(m.step_time_s);
  m.throughput_key = s.throughput_key;
  m.throughput = s.items_per_step / m.step_time_s;
  if (s.flops_per_item > 0) {
    m.tflops_per_rank = s.flops_per_item * m.throughput / s.world / 1e12;
    m.mfu = m.tflops_per_rank * 1e12 / s.peak_flops;
  }

  // Where the step went on this rank (compute, communication it waited for, optimizer) and
  // its memory, gathered so rank 0 can log every rank's; the same gather carries each rank's
  // stop request (SIGINT/SIGTERM): all stop together.
  const MemoryStats mem = sharded.memory();
  const CommStats comm_after = sharded.comm_stats();
  RankFigures& f = m.local;
  f.comm_exposed_s = sharded.exposed_comm_seconds() + loss_gather_s;
  f.optimizer_s = optimizer_s;
  f.compute_s = std::max(0.0, m.step_time_s - f.comm_exposed_s - optimizer_s);
  f.mem_params_bytes = mem.params_bytes;
  f.mem_grads_bytes = mem.grads_bytes;
  f.mem_optim_bytes = mem.optim_bytes;
  f.mem_gathered_peak_bytes = mem.gathered_peak_bytes;
  f.rss_peak_bytes = peak_rss_bytes();
  f.stop_signal = StopSignal::pending();
  f.mem_saved_activations_bytes = saved_activation_bytes;
  f.mem_step_peak_bytes = util::peak_tensor_bytes() - step_base_bytes;
  f.comm_bytes_sent = comm_after.bytes_sent - comm_before.bytes_sent;
  f.mem_mapped_bytes = mem.mapped_bytes;
  f.mem_converted_bytes = mem.converted_bytes;
  f.mem_pooled_bytes = mem.pooled_bytes;
  const ResidentBytes rss = resident_bytes();
  f.rss_anon_bytes = rss.anon;
  f.rss_file_bytes = rss.file;
  f.disk_read_bytes = storage_read_bytes() - read_before;
  if (profile) {
    const nlohmann::json p = profile->finish(m.step_time_s, f.comm_exposed_s);
    s.log->line(OpProfile::summary(p));
    io::write_file_atomic(s.run_dir + "/profile.rank" + std::to_string(s.rank) + ".json", p.dump(2) + "\n");
  }
  f.comm_collectives = comm_after.collectives - comm_before.collectives;
  const std::vector<int64_t> mine = f.pack();
  const int64_t n = RankFigures::field_count();
  at::Tensor all = at::empty({s.world * n}, at::kLong);
  s.comm->all_gather(at::tensor(mine, at::kLong), all);
  for (int r = 0; r < s.world; ++r) m.ranks.push_back(RankFigures::unpack(all.data_ptr<int64_t>() + r * n));
  for (int r = 0; r < s.world && s.stop_requested == 0; ++r) s.stop_requested = static_cast<int>(m.ranks[r].stop_signal);
  if (step % cfg.train.log_every == 0 || step == cfg.train.steps) {
    s.log->line("step " + std::to_string(step) + " loss " + exact_float(m.loss) + " grad_norm " +
                std::to_string(m.grad_norm));
  }
  s.check_memory("step " + std::to_string(step));
  s.pending = std::move(m);  // written by evaluate(), with the validation figures when due
  return s.stop_requested == 0;
}

void Trainer::evaluate(int64_t step) {
  Impl& s = *impl_;
  const TrainConfig& cfg = s.cfg;
  StepMetrics& m = s.pending;
  const int64_t every = cfg.train.eval_every;
  // Every eval_every steps, after the last step, and after the step a signal stops the run at.
  if (every > 0 && (step % every == 0 || step == cfg.train.steps || s.stop_requested != 0)) {
    const auto t0 = Clock::now();
    const nlohmann::json figures = s.task->evaluate(*s.comm);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!m.series.is_object()) m.series = nlohmann::json::object();
    for (const auto& [k, v] : figures.items()) m.series[k] = v;
    m.series["eval_time_s"] = seconds;
    s.last_eval = figures;
    s.last_eval["step"] = step;
    s.log->line("step " + std::to_string(step) + " validation " + figures.dump() + " in " + std::to_string(seconds) + " s");
  }
  if (s.rank == 0) {
    const nlohmann::json line = m.to_json();
    s.metrics->write(line);
    if (s.events) {
      const auto scalars = io::metrics_scalars(line);
      s.events->add_scalars(scalars.second, scalars.first);
    }
    s.print_progress(m);
  }
}

void Trainer::save(int64_t step) {
  Impl& s = *impl_;
  ckpt::SaveOptions so;
  so.step = step;
  so.config = config_to_json(s.cfg, s.world);
  so.keep_last = s.cfg.train.keep_last;
  so.kill_rank_midway = s.faults->kill_rank_in_save(step);
  so.model_only = s.cfg.train.save_model_only;
  const auto t0 = Clock::now();
  const std::string dir = ckpt::save_checkpoint(s.checkpoint_root, *s.sharded, *s.optim, so);
  if (s.cfg.run.save_16bit_model) {
    // DeepSpeed's stage3_gather_16bit_weights_on_model_save / accelerate's zero3_save_16bit_model:
    // the whole model in one 16-bit file beside the shards, streamed from the files just written.
    if (s.rank == 0) {
      ckpt::export_safetensors(dir, (fs::path(dir) / "model.safetensors").string(), at::kBFloat16);
      s.log->line("wrote " + dir + "/model.safetensors (bf16, run.save_16bit_model)");
    }
    s.comm->barrier();
  }
  s.last_saved = step;
  s.log->line("saved " + dir + " in " + std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()) +
              " s; peak RSS " + std::to_string(peak_rss_bytes() >> 20) + " MiB");
  s.check_memory("saving step " + std::to_string(step));
}

int Trainer::finish() {
  Impl& s = *impl_;
  const TrainConfig& cfg = s.cfg;
  if (s.stopped_at > 0) {
    const std::string name = s.stop_requested == SIGINT ? "SIGINT" : "SIGTERM";
    s.log->line(name + ": stopped after step " + std::to_string(s.stopped_at));
    if (cfg.train.save_on_signal && s.last_saved != s.stopped_at) save(s.stopped_at);
    if (s.rank == 0) {
      std::printf("\nstopped by %s after step %lld%s; resume with --resume %s\n", name.c_str(),
                  static_cast<long long>(s.stopped_at), cfg.train.save_on_signal ? " (saved)" : "", s.run_dir.c_str());
    }
    s.comm->barrier();
    s.log->line("finished (stopped)");
    return s.stop_requested == SIGINT ? 130 : 0;
  }
  const int64_t final_step = std::max(s.start_step, cfg.train.steps);
  if (cfg.train.save_final && s.last_saved != final_step) save(final_step);
  if (cfg.run.dump_final_shards) {
    std::ofstream out(s.run_dir + "/final_shard.rank" + std::to_string(s.rank) + ".bin", std::ios::binary);
    const size_t n_buffers = s.sharded->flat_buffers().size();
    for (size_t b = 0; b < n_buffers; ++b) {  // one buffer at a time (a file-backed one is read for it)
      const at::Tensor t = s.sharded->local_shard(b);
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    }
  }
  s.comm->barrier();
  if (s.rank == 0) {
    std::vector<double> sorted = s.step_times;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
    const double per_s = median > 0 ? s.items_per_step / median : 0.0;
    const MemoryStats m = s.sharded->memory();
    nlohmann::json summary = {{"run_dir", s.run_dir},
                              {"world_size", s.world},
                              {"strategy", strategy_name(cfg.parallel.strategy)},
                              {"steps", cfg.train.steps},
                              {"final_loss", static_cast<double>(s.last_loss)},
                              {"skipped_steps", s.skipped_steps},
                              {"median_step_time_s", median},
                              {s.throughput_key, per_s},
                              {"num_params", m.num_params},
                              {"largest_unit_bytes", m.largest_unit_bytes}};
    if (!s.last_eval.is_null()) summary["last_validation"] = s.last_eval;
    std::ofstream(s.run_dir + "/summary.json") << summary.dump(2) << "\n";
    if (s.step_times.empty()) {
      std::printf("done: nothing to train (resumed at step %lld of %lld); run dir %s\n",
                  static_cast<long long>(s.start_step), static_cast<long long>(cfg.train.steps), s.run_dir.c_str());
    } else {
      std::printf("done: %lld steps, final loss %.4f, median %.3f s/step; run dir %s\n",
                  static_cast<long long>(cfg.train.steps), static_cast<double>(s.last_loss), median, s.run_dir.c_str());
    }
  }
  s.log->line("finished");
  return 0;
}

int Trainer::run() {
  setup();
  Impl& s = *impl_;
  try {
    for (int64_t step = s.start_step + 1; step <= s.cfg.train.steps; ++step) {
      const bool go_on = this->step(step);
      evaluate(step);
      if (s.cfg.train.save_every > 0 && step % s.cfg.train.save_every == 0) save(step);
      if (!go_on) {
        s.stopped_at = step;
        break;
      }
    }
  } catch (const CommError& e) {
    // A lost or stalled peer: say at which step (the checkpoint to resume from is the last save).
    throw CommError(std::string(e.what()) + " [during step " + std::to_string(s.current_step) + "; last checkpoint: " +
                    (s.last_saved >= 0 ? "step " + std::to_string(s.last_saved) : std::string("none")) + "]");
  }
  return finish();
}

}  // namespace zeroshard::train
