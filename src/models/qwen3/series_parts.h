// The parts of the qwen3 / qwen3_moe series (series.cpp registers them), one file each:
// task.cpp (training), generate.cpp (`sample`), prepare.cpp (`prepare`), hf_folder.cpp
// (model.from_hf and `export --format hf`).
#pragma once

#include "models/qwen3/series.h"
#include "train/task.h"
#include "zeroshard/param_source.h"

#include <memory>
#include <string>
#include <vector>

namespace zeroshard::sample {
struct SampleOptions;
}

namespace zeroshard::models::qwen3 {

std::unique_ptr<train::Task> make_task(const train::TrainConfig& cfg, int rank, int world);
// The model of a config without its corpora (`zeroshard seed-weights`).
SeededModel seeded_model(const train::TrainConfig& cfg);

std::string generate(const sample::SampleOptions& o, ckpt::Checkpoint& ck, const train::TrainConfig& cfg,
                     const RendezvousInfo& rdv);

std::string prepare(const train::TrainConfig& cfg, const RendezvousInfo& rdv);
// Series::check_prepare: prepare's keys, inputs and tokenizer, on one process.
void check_prepare(const train::TrainConfig& cfg);
// `train --dry-run`: the prepared corpora training reads, a line each (as the run's log has them).
std::string describe_corpora(const train::TrainConfig& cfg);

// The weights of a Hugging Face folder (model.safetensors, or model.safetensors.index.json and its
// shards; F32, BF16 or F16) as a parameter source: each read touches only the byte ranges asked
// for. With tie_word_embeddings the model's one tensor (model.embed_tokens.weight) comes from
// whichever of model.embed_tokens.weight / lm_head.weight the folder stores (both: the embedding).
std::shared_ptr<ParamSource> hf_param_source(const std::string& dir, const QwenConfig& config);

std::vector<std::string> export_hf(ckpt::Checkpoint& ck, const train::TrainConfig& cfg, const HfExportOptions& o);

// The tokenizer.json of a run's config (data.tokenizer), or "" when none was set.
std::string tokenizer_path_of(const train::TrainConfig& cfg);

}  // namespace zeroshard::models::qwen3
