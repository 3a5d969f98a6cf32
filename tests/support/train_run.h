// Runs the `zeroshard train` binary (its own launcher) on a small model and reads back what
// the run wrote: exit code, output, metrics.jsonl.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zeroshard::testing {

// A small Llama on generated text, fast enough for 30-50 steps per run.
extern const char* const kSmallModel;

struct TrainRun {
  int exit_code = -1;
  std::string output, dir;
  std::vector<nlohmann::json> metrics;
};

// `zeroshard train --nproc N <kSmallModel> --set run.dir=<fresh dir> <args>`; dir may be given.
TrainRun train(const std::string& args, int nproc, const std::string& tag, const std::string& dir = "");

// `zeroshard train --nproc N --set run.dir=<fresh dir> <args>` (args name the config: any series).
TrainRun train_series(const std::string& args, int nproc, const std::string& tag);

// Fills r.metrics from <r.dir>/metrics.jsonl (for runs started some other way).
void read_metrics(TrainRun& r);

// "loss grad_norm" per step, as printed in metrics.jsonl (exact floats).
std::vector<std::string> loss_texts(const TrainRun& r);

// Two PNG files from `zeroshard sample` (stored, uncompressed pixels): how many bytes before
// the trailing checksums differ at all, and by more than one step. -1, -1 if sizes differ.
struct PngDiff {
  long differ = -1, far = -1;
};
PngDiff compare_pngs(const std::string& path_a, const std::string& path_b);

// The four strategies; no_shard first (the one the others are compared with).
extern const std::vector<std::string> kAllStrategies;

struct ParityOptions {
  bool small_model = true;     // prepend kSmallModel (false: args name their own config)
  bool final_shards = false;   // also compare each rank's final fp32 master shards
  std::vector<std::string> strategies = kAllStrategies;
};

// "These strategies at W ranks give identical bits": trains `args` once per strategy
// (--set parallel.strategy=S) on `world` ranks and expects each run to exit 0 with exactly
// `steps` lines in metrics.jsonl, and the same loss and gradient norm bits at every step as the
// first strategy's (and, with final_shards, the same final parameters on every rank). Failures
// are gtest failures naming the strategy, step and rank; returns the runs for further checks.
std::vector<TrainRun> expect_identical_strategies(const std::string& args, int world, int64_t steps,
                                                  const std::string& tag, const ParityOptions& options = {});

// A shell command that must succeed (a gtest failure naming it and its output otherwise).
void run_ok(const std::string& cmd);

// Mean "loss" of r's steps first .. first + count - 1 (metrics lines).
double mean_loss(const TrainRun& r, size_t first, size_t count);

// A DiffSynth image folder made with Debian's ffmpeg under a fresh temp dir named by `tag`: four
// images (a.png 40x36, b.png 36x40, c.jpg 48x48, d.png 64x48) and metadata.csv with
// kCaptionedImagePrompts in that order. Returns the folder.
extern const std::vector<std::string> kCaptionedImagePrompts;
std::string make_captioned_images(const std::string& tag);

// A tiny SentencePiece model with T5's special ids (pad 0, eos 1, unk 2, no bos), trained by
// Debian's spm_train on 300 lines of the words in `dir`/corpus.txt. Returns <dir>/spm.model.
std::string train_tiny_spm(const std::string& dir, const std::vector<std::string>& words);
// The words of the wan tests' clip captions (their tiny SentencePiece model is trained on them).
extern const std::vector<std::string> kClipCaptionWords;

// "Resuming mid-run is exact": `args` trained 4 steps at W = 2 with a save at step 2, then again
// from that checkpoint; the resumed run's losses and gradient norms must be the full run's last
// two, and each rank's final parameters the same bytes (gtest failures otherwise).
void expect_exact_resume(const std::string& args, const std::string& tag);

// "Seeded weights in the released layout stand in for the seeded model": `zeroshard seed-weights
// <args> --dtype fp32` writes the model's folders (in files of at most 0.2 MiB: several per
// folder, fused groups kept whole), and `args` (a LoRA config: the base is frozen,
// so every folder is read in place under model.frozen_storage=file) trains 2 steps at W = 2 from
// them, reading the keys the command printed, with the losses of the seeded run, bit for bit;
// and again through a converted copy (model.frozen_converted=copy), nothing converted at a
// gather. `seed_extra` goes to seed-weights alone (e.g. --only for another layout). Returns the
// keys ("--set k=v ...").
std::string expect_seeded_folders_train_as_seeded(const std::string& args, const std::string& tag,
                                                  const std::string& seed_extra = "");

// Largest |loss_b - loss_a| / |loss_a| over b's steps after after_step (each must be in a).
double max_rel_loss_diff(const TrainRun& a, const TrainRun& b, int64_t after_step = 0);

}  // namespace zeroshard::testing
