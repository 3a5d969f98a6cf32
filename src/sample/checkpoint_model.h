// The model configuration a checkpoint was trained with (private to src/sample).
#pragma once

#include "checkpoint/checkpoint.h"
#include "train/config.h"

namespace zeroshard::sample {

// The checkpoint's model.*, lora.*, vae.* keys and data shapes as --set overrides: the model
// is rebuilt through the same validated config path as training.
train::TrainConfig model_config_of(const ckpt::Checkpoint& ck);

// `out` if given, else <the run folder of ck>/<name> (ck itself when it is not inside a run).
std::string output_path(const ckpt::Checkpoint& ck, const std::string& out, const std::string& name);

}  // namespace zeroshard::sample
