// The wan series' data: a DiffSynth dataset folder read with the towers in the loop, or the
// conditioning cache `zeroshard prepare` writes from it (data.cpp).
//
// Cache layout (folder wan.cache): the shared conditioning cache (models/diffusion/cond_cache.h),
// format "zeroshard wan cache 1", per record "latent" [16, T', h, w] and "context" [n_r, t5_dim];
// index.json's shape keys "height", "width", "num_frames", "text_len", "t5_dim", "z_dim".
#pragma once

#include "data/image_transforms.h"
#include "data/metadata_csv.h"
#include "models/diffusion/cond_cache.h"
#include "models/wan/series.h"
#include "text/sentencepiece_tokenizer.h"
#include "zeroshard/comm.h"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::models::wan {

// Where a training sample comes from.
class WanData {
 public:
  // Opens wan.cache when set (checking its shapes against the config), else wan.dataset and
  // wan.tokenizer (a bad metadata row stops it, unless wan.on_bad_file=skip).
  WanData(const WanSeriesConfig& c, uint64_t seed);
  ~WanData();
  // Towers in the loop with wan.on_bad_file=skip: the ranks read the clips once, each its share,
  // and keep those that every rank then reads (diffusion::readable_records); the items are
  // numbered as a folder of only those would be. A collective, once before the first step;
  // nothing otherwise (stop mode stops at a clip that does not read when it is drawn).
  void agree_on_items(Communicator& comm);
  // What agree_on_items left out, for the training log.
  const std::vector<std::string>& notes() const { return notes_; }
  bool cached() const { return !c_.cache.empty(); }
  int64_t size() const { return static_cast<int64_t>(prompts_.size()); }
  // The item of training sample n: perm_e[n mod N], e = n / N (a seeded permutation per epoch).
  int64_t item_of(int64_t n) const;
  const std::string& prompt(int64_t item) const { return prompts_.at(static_cast<size_t>(item)); }
  // Cache: (latent, context) of an item.
  std::pair<at::Tensor, at::Tensor> cached_item(int64_t item) const;
  // Towers in the loop: the item's clip [3, T, H, W] in [-1, 1] as load_media reads it (T: at
  // most wan.num_frames, a shorter clip's longest 1 + 4k; 1 for an image column).
  at::Tensor video(int64_t item) const;
  // Towers in the loop on `world` ranks whose towers are sharded (gathered for each pass,
  // optim_grads_params): the VAE encoder passes every rank runs per clip, so that the ranks
  // gather and free its units in step whatever the clips' lengths: those of the longest clip
  // wan.num_frames gives (a shorter clip's own passes, then passes on zero frames whose output is
  // dropped; the encoder is causal, so its latents do not change). 0 (each clip its own) on one
  // rank, with replicated towers (no collective in their forward) or for an image column.
  int64_t vae_chunks(int world, bool towers_sharded) const;

 private:
  const WanSeriesConfig& c_;
  std::vector<std::string> prompts_, media_paths_;
  bool video_column_ = false;
  std::unique_ptr<data::MediaDataset> unchecked_;  // skip mode: the rows agree_on_items reads
  std::vector<std::string> notes_;
  std::unique_ptr<diffusion::CacheReader> cache_;
  std::unique_ptr<diffusion::EpochOrder> order_;
  uint64_t seed_ = 0;
};

// Token ids and mask [1, text_len] (int64) of a prompt, as Wan's tokenizer pads it.
std::pair<at::Tensor, at::Tensor> prompt_tokens(const text::SentencePieceTokenizer& tok, const std::string& prompt,
                                                int64_t text_len);
// The clip of a media file as the config samples it: [3, T, H, W] in [-1, 1]. info: what was
// read ({"frames": T, "source": "WxH", "fps": the file's, "source_frames": when known}).
at::Tensor load_media(const WanSeriesConfig& c, const std::string& path, nlohmann::json* info = nullptr);

// The towers' initial values: seeded (wan_init), or wan.vae_from / wan.text_encoder_from.
std::shared_ptr<ParamSource> wan_initial_source(const WanSeriesConfig& c, uint64_t seed);

// wan.dit_from: the DiT's parameters (our names = Wan's original names, without "dit.") from
// the released diffusion_pytorch_model.safetensors or its .index.json + shards, in Wan's
// original names or the diffusers layout (told apart by the file's names; read through
// dit_diffusers_name_map), each rank reading only the byte ranges of its shards. check() names
// the file and any missing, unexpected or mis-shaped tensor.
std::shared_ptr<ParamSource> dit_file_source(const std::string& path);

// `zeroshard prepare` for the wan series (Series::prepare).
std::string prepare_cache(const train::TrainConfig& cfg, const RendezvousInfo& rdv);
// Series::check_prepare: prepare_cache's keys, metadata, tokenizer and cache folder, on one
// process.
void check_prepare(const train::TrainConfig& cfg);

// `train --dry-run` (Series::dry_run): the cache's items, or every record of wan.dataset read as
// the towers in the loop read it.
std::string dry_run(const train::TrainConfig& cfg);

}  // namespace zeroshard::models::wan
