// Captioned image folders as the DiffSynth-Studio image pipelines (FLUX.1, Qwen-Image, Z-Image,
// FLUX.2) read them: metadata.csv (or .json / .jsonl) with an `image` column and a `prompt`
// column, jpg / png / webp files; each image resized to cover height x width (bilinear, PIL's
// arithmetic) and centre-cropped (data/image_transforms.h, ImageCropAndResize), then mapped to
// [-1, 1] as DiffSynth's preprocess_image does.
#pragma once

#include "data/metadata_csv.h"

#include <torch/torch.h>

#include <string>
#include <utility>

namespace zeroshard::models::diffusion {

// The folder's records; every media file must be an image (errors name the record and `key`,
// the config key that named the folder). collect_errors: bad rows listed instead of thrown.
// metadata: the metadata file ("" = the folder's own).
data::MediaDataset load_captioned_images(const std::string& folder, const std::string& metadata, const std::string& key,
                                         bool collect_errors = false);

// [3, height, width] float32 in [-1, 1]; source_size: the file's width and height when given.
at::Tensor load_image_tensor(const std::string& path, int64_t height, int64_t width,
                             std::pair<int64_t, int64_t>* source_size = nullptr);

// images [B, 3, H, W] in [-1, 1] side by side, 2 grey pixels between them, as one PNG.
void write_image_row(const std::string& path, const at::Tensor& images);

}  // namespace zeroshard::models::diffusion
