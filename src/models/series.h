// A model series is one folder under src/models/<series>/ that registers itself in
// src/models/series_list.cpp: its config keys (SeriesConfig), its training Task (model, seeded
// init, data, loss, metrics), its wrap policy (which modules are sharding units), its sampling
// entry, and its reference-check kinds. Config loading, the trainer, `sample`, `export` and the
// CLI iterate this registry; nothing outside the folder names a series.
#pragma once

#include "reference/reference_check.h"
#include "train/config.h"
#include "zeroshard/comm.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

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
  // `zeroshard export --format hf`: the checkpoint as a Hugging Face folder (config.json, sharded
  // safetensors + index, generation_config.json, the tokenizer files); returns the files
  // written. Empty: the series has no Hugging Face form. cfg is the checkpoint's model.
  std::function<std::vector<std::string>(ckpt::Checkpoint&, const train::TrainConfig&, const HfExportOptions&)>
      export_hf;
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
