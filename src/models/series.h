// A model series is one folder under src/models/<series>/ that registers itself in
// src/models/series_list.cpp: its config keys (SeriesConfig), its training Task (model, seeded
// init, data, loss, metrics), its wrap policy (which modules are sharding units), its sampling
// entry, and its reference-check kinds. Config loading, the trainer, `sample`, `export` and the
// CLI iterate this registry; nothing outside the folder names a series.
#pragma once

#include "nn/name_map.h"
#include "reference/reference_check.h"
#include "train/config.h"
#include "zeroshard/comm.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}
namespace zeroshard::ckpt {
class Checkpoint;
}
namespace zeroshard::sample {
struct SampleOptions;
}
namespace zeroshard::train {
class Task;
}

namespace zeroshard::models {

// `zeroshard export --format hf`: where and how to write a Hugging Face model folder.
struct HfExportOptions {
  std::string out_dir;
  std::string dtype = "fp32";        // fp32 | bf16 (the fp32 masters rounded to nearest even)
  uint64_t max_shard_bytes = 0;      // per safetensors file; 0: 5 GB (transformers' default)
};

// A model without its data (`zeroshard seed-weights`): the module built inside nn::DeferredInit
// (no parameter bytes) and the seeded value of each parameter, as the training Task gives it.
struct SeededModel {
  std::shared_ptr<torch::nn::Module> module;
  std::function<void(const std::string& name, at::Tensor& param)> init;
};

// `zeroshard seed-weights`: one folder of the model's released layout. The parameters under
// `prefix` (prefix stripped) go through `map` (our names -> the release's; empty: the release
// uses ours) into <folder>/<stem>-*.safetensors + <stem>.safetensors.index.json (or one
// <folder>/<stem>.pth: torch_save); `key` is the config key that reads the folder back (the folder
// itself, or its index or .pth file when key_takes_index),
// `note` how the folder differs from the release (another file format, what it leaves out or
// writes without running it; empty: it does not differ).
struct ReleasedFolder {
  std::string prefix, folder, stem = "model", key;
  nn::NameMap map;
  bool key_takes_index = false;
  std::string note;
  std::map<std::string, std::string> files;  // small files beside the weights: name -> text (config.json)
  // Tensors the release holds that the model never runs (a VLM's vision tower, an untied output
  // head), under their released names: written seeded (normal, std 0.02) so that the folder's
  // tensors, parameter count and bytes are the release's; the reading side's map ignores them.
  struct NotRun {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<NotRun> not_run;
  // The release ships this folder as one torch.save file, <folder>/<stem>.pth (Wan 2.1's umT5 and
  // VAE), not as sharded safetensors; the key then names that file.
  bool torch_save = false;
  // The release's dtype where it is fixed whatever the rest's (Wan2.1_VAE.pth: float32);
  // Undefined: seed-weights --dtype.
  at::ScalarType dtype = at::ScalarType::Undefined;
  // One safetensors file <folder>/<stem>.safetensors, no index (BFL's flux1-dev.safetensors,
  // ae.safetensors); the key then names that file.
  bool single_file = false;
  // Another layout of the parameters an earlier folder of the same prefix writes (FLUX.1-dev
  // ships its DiT and VAE both ways): written only when seed-weights --only names `label`.
  bool alternative = false;
  std::string label{};  // --only's name; empty: the prefix without its dot
};

struct Series {
  std::string name;     // the model.series value
  std::string summary;  // one line for `zeroshard train --help` and errors
  std::function<std::unique_ptr<train::SeriesConfig>()> make_config;
  // This rank's task (of `world` ranks) for a validated config of this series.
  std::function<std::unique_ptr<train::Task>(const train::TrainConfig&, int rank, int world)> make_task;
  // Which modules (qualified names below the root) are sharding units; empty: every
  // HookableModule. Used by training and sampling alike (train::shard_options).
  std::function<bool(const std::string& qualified_name)> is_unit;
  // `zeroshard sample` on a checkpoint of this series: a collective over the ranks of `rdv`
  // (rank 0's return value is printed). cfg is the checkpoint's model (model_overrides).
  std::function<std::string(const sample::SampleOptions&, ckpt::Checkpoint&, const train::TrainConfig&,
                            const RendezvousInfo&)>
      sample;
  // `zeroshard prepare`: the series' preprocessing of its dataset, a collective over the ranks of
  // `rdv`, each taking its share (e.g. tokenizing a corpus into an indexed token dataset; running
  // a pipeline's frozen towers once into a conditioning cache that training then reads without
  // them). Returns what rank 0 prints. Empty: nothing to prepare.
  std::function<std::string(const train::TrainConfig&, const RendezvousInfo&)> prepare;
  // `zeroshard prepare`, once before any rank starts: throws std::invalid_argument naming the key
  // or file when prepare cannot run (a required key unset, an unreadable metadata file or
  // tokenizer, a bad row in stop mode, an output it must not replace), so the error is printed
  // once and no rank starts. Empty function: prepare finds such errors on its ranks.
  std::function<void(const train::TrainConfig&)> check_prepare;
  // `zeroshard train`: what this config's training reads that `prepare` with the same config
  // writes, when it is missing: one sentence naming the key and the file. Empty when it is there
  // (or the config reads no prepared data). train then refuses to start, printing the prepare
  // command. Empty function: the series reads no prepared data.
  std::function<std::string(const train::TrainConfig&)> unprepared;
  // `zeroshard train --dry-run`: what training would read, item by item (file, what was read of
  // it, its bucket, kept or why not), without building the model or starting ranks. Throws
  // std::invalid_argument when training would stop on the data (a bad row in stop mode).
  // Empty function: the series generates its data (nothing to read).
  std::function<std::string(const train::TrainConfig&)> dry_run;
  // `zeroshard export --format hf`: the checkpoint as a Hugging Face folder (config.json, sharded
  // safetensors + index, generation_config.json, the tokenizer files); returns the files
  // written. Empty: the series has no Hugging Face form. cfg is the checkpoint's model.
  std::function<std::vector<std::string>(ckpt::Checkpoint&, const train::TrainConfig&, const HfExportOptions&)>
      export_hf;
  // `zeroshard seed-weights`: the model of a config without its data. Empty: the series has no
  // released weights to stand in for.
  std::function<SeededModel(const train::TrainConfig&)> seeded_model;
  // `zeroshard seed-weights`: the folders of the released layout the model's parameters are
  // written in. Empty: one folder, the model's own names (model.init_from reads its index).
  std::function<std::vector<ReleasedFolder>(const train::TrainConfig&)> released_folders;
  // reference-check kinds of the models in this folder.
  std::vector<reference::ReferenceKind> reference_kinds;
  bool supports_lora = false;
  // PEFT adapters (src/checkpoint/peft.h) name the modules of the model the adapters belong to:
  // the qualified name of that module plus ".", empty when it is the root ("dit." for the
  // diffusion pipelines, whose adapters belong to the DiT).
  std::string adapter_root;
};

// Every registered series, in registration order.
const std::vector<Series>& all_series();
// The series `name`; throws std::invalid_argument listing the registered names.
const Series& find_series(const std::string& name);

}  // namespace zeroshard::models
