// The z_image series' data: a DiffSynth image folder read with the towers in the loop, or the
// conditioning cache `zeroshard prepare` writes from it (models/diffusion/cond_cache.h) with, per
// record, "latent" [16, h, w] and "context" [n, text_hidden] (the prompt's kept rows: Z-Image
// keeps only the attention mask's rows, so the cached states carry the mask as their length).
#pragma once

#include "data/metadata_csv.h"
#include "models/diffusion/cond_cache.h"
#include "models/z_image/series.h"
#include "text/bpe_tokenizer.h"
#include "zeroshard/comm.h"
#include "zeroshard/param_source.h"

#include <memory>
#include <string>
#include <vector>

namespace zeroshard::models::z_image {

class ZImageData {
 public:
  // Opens z_image.cache when set (checking its shapes against the config), else z_image.dataset.
  ZImageData(const ZImageSeriesConfig& c, uint64_t seed);
  bool cached() const { return cache_ != nullptr; }
  int64_t size() const { return static_cast<int64_t>(prompts_.size()); }
  // The item of training sample n, with `global_batch` samples per step (numbers step * G ..
  // (step + 1) * G - 1, whatever the world size). One bucket: EpochOrder over all items. With
  // buckets: step s draws bucket b with probability |b| / N from (seed, s), and sample n is
  // bucket b's EpochOrder at n: a pure function of (seed, n, G), so W-independent.
  int64_t item_of(int64_t n, int64_t global_batch) const;
  int64_t bucket_of(int64_t item) const { return bucket_of_.at(static_cast<size_t>(item)); }
  // (height, width) of the item's bucket.
  std::pair<int64_t, int64_t> size_of(int64_t item) const { return sizes_.at(static_cast<size_t>(bucket_of(item))); }
  const std::string& prompt(int64_t item) const { return prompts_.at(static_cast<size_t>(item)); }
  // Cache: (latent [16, h, w], context [n, hidden]).
  std::pair<at::Tensor, at::Tensor> cached_item(int64_t item) const;
  // Towers in the loop: the item's image [3, H, W] in [-1, 1].
  at::Tensor image(int64_t item) const;

 private:
  const ZImageSeriesConfig& c_;
  std::vector<std::string> prompts_, paths_;
  std::unique_ptr<diffusion::CacheReader> cache_;
  uint64_t seed_;
  std::vector<std::pair<int64_t, int64_t>> sizes_;            // the buckets
  std::vector<int64_t> bucket_of_;                            // per item
  std::vector<std::vector<int64_t>> members_;                 // per bucket, its items
  std::vector<std::unique_ptr<diffusion::EpochOrder>> orders_;  // per bucket
};

// The bucket (index into sizes) nearest an image of height x width in aspect ratio.
int64_t nearest_bucket(const std::vector<std::pair<int64_t, int64_t>>& sizes, int64_t height, int64_t width);

// The prompt as ZImagePipeline encodes it: Qwen3's chat template (one user turn, generation
// prompt, enable_thinking=True: "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"),
// tokenized and cut at text_len tokens. [1, n] int64.
at::Tensor prompt_ids(text::BpeTokenizer& tok, const std::string& prompt, int64_t text_len);
// The tokenizer of z_image.tokenizer, checked against z_image.text_vocab.
text::BpeTokenizer load_tokenizer(const ZImageSeriesConfig& c);

// The pipeline's initial values: seeded (ZImagePipelineImpl::init_parameter), the towers from
// z_image.vae_from / z_image.text_encoder_from when given.
std::shared_ptr<ParamSource> initial_source(const ZImageSeriesConfig& c, const ZImagePipelineImpl& p, uint64_t seed);

// `zeroshard prepare` for the z_image series (Series::prepare).
std::string prepare_cache(const train::TrainConfig& cfg, const RendezvousInfo& rdv);

}  // namespace zeroshard::models::z_image
