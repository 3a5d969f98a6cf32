// The `zeroshard` command line.
#include "checkpoint/checkpoint.h"
#include "reference/reference_check.h"
#include "report/report.h"
#include "sample/sample.h"
#include "train/config.h"
#include "train/trainer.h"
#include "util/threads.h"
#include "zeroshard/comm.h"
#include "zeroshard/launch.h"
#include "zeroshard/shard.h"

#include <ATen/Parallel.h>

#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <thread>
#include <cstdio>
#include <iostream>

namespace {

// libtorch allocates activations and gradients with malloc; glibc serves blocks above
// 128 KiB with fresh mmaps that are zero-filled page by page on first touch and unmapped on
// free. Training reallocates the same sizes every step, so that costs more than the math
// (measured: 2.3 s -> 1.0 s per step on configs/llama/bench.yaml). Keep those blocks in the
// heap instead, as a caching allocator would. ZEROSHARD_MALLOC_DEFAULT=1 opts out.
void configure_allocator() {
  const char* opt_out = std::getenv("ZEROSHARD_MALLOC_DEFAULT");
  if (opt_out != nullptr && std::string(opt_out) == "1") return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum on 64-bit
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  buf[n] = '\0';
  return buf;
}

int cmd_train(const std::string& config_path, std::vector<std::string> overrides, int nproc) {
  using namespace zeroshard;
  RendezvousInfo rdv = RendezvousInfo::from_env();
  const bool inside_job = std::getenv("RANK") != nullptr;
  // Validate everything before any rank starts.
  train::TrainConfig cfg = train::load_config(config_path, overrides);
  {
    train::TrainConfig sized = cfg;  // the launched ranks apply it again
    train::apply_world_size(sized, inside_job ? rdv.world_size : nproc, inside_job ? rdv.local_world_size : nproc);
  }
  if (!inside_job && !cfg.train.resume.empty()) {
    // Fails now, before any rank starts, if there is no checkpoint or it is another model's;
    // and every rank loads the same one even if `latest` moves while they start.
    overrides.push_back("train.resume=" + train::checked_resume_checkpoint(cfg));
    cfg = train::load_config(config_path, overrides);
  }
  if (!inside_job && nproc > 1) {
    if (cfg.run.dir.empty() && cfg.train.resume.empty()) overrides.push_back("run.dir=" + train::default_run_dir(cfg));
    LaunchOptions lo;
    lo.nproc = nproc;
    lo.argv = {self_exe(), "train"};
    if (!config_path.empty()) {
      lo.argv.push_back("--config");
      lo.argv.push_back(config_path);
    }
    for (const auto& o : overrides) {
      lo.argv.push_back("--set");
      lo.argv.push_back(o);
    }
    return launch_local(lo);
  }
  if (inside_job && nproc > 1 && nproc != rdv.world_size) {
    throw std::invalid_argument("--nproc " + std::to_string(nproc) + " disagrees with WORLD_SIZE=" +
                                std::to_string(rdv.world_size) + " of the surrounding launcher");
  }
  return train::Trainer(cfg, rdv).run();
}

int cmd_config_show(const std::string& config_path, const std::vector<std::string>& overrides) {
  zeroshard::train::Provenance prov;
  auto cfg = zeroshard::train::load_config(config_path, overrides, &prov);
  for (const auto& [k, v] : zeroshard::train::config_items(cfg)) {
    std::printf("%-34s %-24s # %s\n", k.c_str(), v.c_str(), prov[k].c_str());
  }
  return 0;
}

int cmd_export(const std::string& from, const std::string& out, const std::string& dtype, const std::string& state,
               double max_file_mb, bool trainable_only) {
  const std::string dir = zeroshard::ckpt::resolve_checkpoint(from);
  const auto files = zeroshard::ckpt::export_safetensors(dir, out, dtype == "bf16" ? at::kBFloat16 : at::kFloat, state,
                                                         static_cast<uint64_t>(max_file_mb * 1024 * 1024),
                                                         trainable_only);
  std::printf("exported %s (%s, %s):\n", dir.c_str(), state.c_str(), dtype.c_str());
  for (const auto& f : files) std::printf("  %s\n", f.c_str());
  return 0;
}

int cmd_inspect(const std::string& path, bool brief) {
  std::string text;
  const bool ok = zeroshard::ckpt::describe(zeroshard::ckpt::resolve_checkpoint(path), &text, !brief);
  std::fputs(text.c_str(), stdout);
  return ok ? 0 : 2;
}

int cmd_sample(const zeroshard::sample::SampleOptions& o, int nproc) {
  using namespace zeroshard;
  RendezvousInfo rdv = RendezvousInfo::from_env();
  const bool inside_job = std::getenv("RANK") != nullptr;
  if (!inside_job && nproc > 1) {
    parse_strategy(o.strategy);  // fails before any rank starts
    LaunchOptions lo;
    lo.nproc = nproc;
    lo.argv = {self_exe(),  "sample",          o.checkpoint, "--prompt",      o.prompt,
               "--tokens",  std::to_string(o.tokens),       "--temperature", std::to_string(o.temperature),
               "--top-k",   std::to_string(o.top_k),        "--seed",        std::to_string(o.seed),
               "--strategy", o.strategy, "--clips", std::to_string(o.clips), "--first-clip",
               std::to_string(o.first_clip), "--chunk-frames", std::to_string(o.chunk_frames), "--steps",
               std::to_string(o.denoise_steps)};
    if (!o.out.empty()) {
      lo.argv.push_back("--out");
      lo.argv.push_back(o.out);
    }
    if (!o.kv_cache) lo.argv.push_back("--no-cache");
    return launch_local(lo);
  }
  zeroshard::util::set_compute_threads(
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, rdv.local_world_size)));
  const std::string text = sample::run_sample(o, rdv);
  if (rdv.rank == 0) std::printf("%s\n", text.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  configure_allocator();
  CLI::App app{"zeroshard: sharded data-parallel training (ZeRO 0-3) on libtorch + Gloo"};
  app.require_subcommand(1);

  std::string config_path;
  std::vector<std::string> overrides;
  int nproc = 1;
  auto* train = app.add_subcommand("train", "Train a model (the default job when no --config is given)");
  train->add_option("-c,--config", config_path, "YAML config (see configs/); `base:` chains to a parent file")
      ->check(CLI::ExistingFile);
  train->add_option("--set", overrides, "Override a config key: --set train.steps=100 (repeatable)");
  train->add_option("--nproc", nproc, "Start this many local ranks (joins an existing job when RANK is set)")
      ->check(CLI::Range(1, 1024));
  std::string resume;
  train->add_option("--resume", resume,
                    "Continue from a checkpoint: its folder, a checkpoints folder or a run folder (uses `latest`); "
                    "same as --set train.resume=PATH");

  auto* exp = app.add_subcommand("export",
                                 "Write a checkpoint's weights (or AdamW moments) as safetensors: one file, or several "
                                 "plus an index (streamed, no ranks)");
  std::string export_from, export_out, export_dtype = "fp32", export_state = "param";
  exp->add_option("checkpoint", export_from, "A checkpoint folder, checkpoints folder or run folder")->required();
  exp->add_option("output", export_out, "The .safetensors file to write")->required();
  exp->add_option("--dtype", export_dtype, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  double export_max_file_mb = 0;
  exp->add_option("--max-file-mb", export_max_file_mb,
                  "Split into files of at most this many MiB plus OUTPUT.index.json (0: one file)")
      ->check(CLI::NonNegativeNumber);
  bool export_trainable_only = false;
  exp->add_flag("--trainable-only", export_trainable_only,
                "Only the trained tensors: a LoRA run's adapters, without the frozen base");
  exp->add_option("--state", export_state, "param (the weights), exp_avg or exp_avg_sq (AdamW moments)")
      ->check(CLI::IsMember({"param", "exp_avg", "exp_avg_sq"}));

  auto* inspect = app.add_subcommand("inspect", "Print what a checkpoint holds and verify its files' sizes and CRC-32");
  std::string inspect_path;
  bool inspect_brief = false;
  inspect->add_option("checkpoint", inspect_path, "A checkpoint folder, checkpoints folder or run folder")->required();
  inspect->add_flag("--brief", inspect_brief, "Omit the tensor list");

  auto* config = app.add_subcommand("config", "Inspect configurations");
  auto* show = config->add_subcommand("show", "Print the fully resolved config and where each value came from");
  std::string show_path;
  std::vector<std::string> show_overrides;
  show->add_option("-c,--config", show_path, "YAML config")->check(CLI::ExistingFile);
  show->add_option("--set", show_overrides, "Override a config key (repeatable)");
  config->require_subcommand(1);

  auto* report = app.add_subcommand("report", "Render runs as one self-contained HTML page with SVG charts");
  std::vector<std::string> report_runs;
  std::string report_out = "report.html";
  report->add_option("runs", report_runs, "Run folders (with metrics.jsonl) to compare")->required();
  report->add_option("-o,--output", report_out, "The HTML file to write");

  auto* sample = app.add_subcommand(
      "sample",
      "From a trained checkpoint under any strategy: text from an LM (llama, moe; rank 0 prints it), or a PNG of "
      "held-out clips and their reconstructions from a video VAE (vae), or a PNG of images generated from "
      "captions (flux images, wan clips: --prompt, else held-out captions)");
  zeroshard::sample::SampleOptions sample_options;
  int sample_nproc = 1;
  bool sample_no_cache = false;
  sample->add_option("checkpoint", sample_options.checkpoint, "A checkpoint folder, checkpoints folder or run folder")
      ->required();
  sample->add_option("--prompt", sample_options.prompt, "Text to continue (default: a newline)");
  sample->add_option("--tokens", sample_options.tokens, "Tokens (bytes) to generate")->check(CLI::Range(1, 1 << 20));
  sample->add_option("--temperature", sample_options.temperature, "0: greedy; otherwise softmax(logits / T)")
      ->check(CLI::NonNegativeNumber);
  sample->add_option("--top-k", sample_options.top_k, "Sample among the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  sample->add_option("--seed", sample_options.seed, "Seed of the sampler");
  sample->add_option("--strategy", sample_options.strategy,
                     "Sharding of the weights while sampling: no_shard, optim, optim_grads, optim_grads_params");
  sample->add_option("--nproc", sample_nproc, "Ranks to shard the model over")->check(CLI::Range(1, 1024));
  sample->add_flag("--no-cache", sample_no_cache, "Recompute the whole sequence for every token (no KV cache)");
  sample->add_option("--out", sample_options.out, "vae: the PNG to write (default: <run>/reconstruction.png)");
  sample->add_option("--clips", sample_options.clips, "vae/flux: held-out clips to reconstruct / images to generate")
      ->check(CLI::Range(1, 1024));
  sample->add_option("--first-clip", sample_options.first_clip, "vae/flux: generated scene index of the first one");
  sample->add_option("--steps", sample_options.denoise_steps, "flux: Euler steps from noise to image")
      ->check(CLI::Range(1, 10000));
  sample->add_option("--chunk-frames", sample_options.chunk_frames,
                     "vae: frames per chunk (0: whole clip; default: the run's vae.chunk_frames)");

  auto* refcheck = app.add_subcommand(
      "reference-check",
      "Check a model against a reference case (config.json, model/inputs/expected.safetensors computed with the "
      "upstream code): prints max|diff|/max|ref| per output and gradient, exits 1 beyond the case's tolerance");
  std::string refcheck_dir, refcheck_dtype = "fp32";
  bool refcheck_list = false, refcheck_quiet = false;
  refcheck->add_option("case", refcheck_dir, "The case folder");
  refcheck->add_option("--dtype", refcheck_dtype, "fp32 (the tolerance applies) or fp64 (convention bugs stand out)")
      ->check(CLI::IsMember({"fp32", "fp64"}));
  refcheck->add_flag("--list", refcheck_list, "List the known case kinds");
  refcheck->add_flag("--quiet", refcheck_quiet, "Print only the tensors beyond tolerance and the summary");

  CLI11_PARSE(app, argc, argv);
  const char* rank_env = std::getenv("RANK");
  const std::string who = rank_env ? std::string(" (rank ") + rank_env + ")" : std::string();
  try {
    if (train->parsed()) {
      if (!resume.empty()) overrides.push_back("train.resume=" + resume);
      return cmd_train(config_path, overrides, nproc);
    }
    if (exp->parsed()) return cmd_export(export_from, export_out, export_dtype, export_state, export_max_file_mb,
                                      export_trainable_only);
    if (inspect->parsed()) return cmd_inspect(inspect_path, inspect_brief);
    if (sample->parsed()) {
      sample_options.kv_cache = !sample_no_cache;
      return cmd_sample(sample_options, sample_nproc);
    }
    if (report->parsed()) {
      zeroshard::report::write_report(report_runs, report_out);
      std::printf("wrote %s (%zu runs)\n", report_out.c_str(), report_runs.size());
      return 0;
    }
    if (show->parsed()) return cmd_config_show(show_path, show_overrides);
    if (refcheck->parsed()) {
      if (refcheck_list) {
        for (const auto& k : zeroshard::reference::reference_kinds()) std::printf("%-24s %s\n", k.kind.c_str(), k.what.c_str());
        return 0;
      }
      if (refcheck_dir.empty()) throw std::invalid_argument("reference-check: give a case folder (or --list)");
      zeroshard::reference::CheckOptions co;
      co.dtype = refcheck_dtype == "fp64" ? at::kDouble : at::kFloat;
      co.verbose = !refcheck_quiet;
      return zeroshard::reference::reference_check(refcheck_dir, std::cout, co) ? 0 : 1;
    }
  } catch (const std::exception& e) {
    // libtorch errors print without their C++ backtrace; a rank that only lost a peer exits
    // with kExitPeerLost so the launcher blames the rank that failed first.
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    std::fprintf(stderr, "zeroshard: error%s: %s\n", who.c_str(), c10_error ? c10_error->what_without_backtrace() : e.what());
    return dynamic_cast<const zeroshard::CommError*>(&e) ? zeroshard::kExitPeerLost : 1;
  }
  return 0;
}
