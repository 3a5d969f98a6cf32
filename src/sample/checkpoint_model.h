// The model configuration a checkpoint was trained with (private to src/sample).
#pragma once

#include "checkpoint/checkpoint.h"
#include "train/config.h"

namespace zeroshard::sample {

// The checkpoint's model.*, lora.*, vae.* keys and data shapes as --set overrides: the model
// is rebuilt through the same validated config path as training.
train::TrainConfig model_config_of(const ckpt::Checkpoint& ck);

}  // namespace zeroshard::sample
