// Series `qwen_image`: Qwen-Image as released on the shared image-series layer (series.h).
#include "models/qwen_image/series.h"

#include "io/safetensors.h"
#include "io/torch_pth.h"
#include "nn/name_map.h"
#include "util/text.h"
#include "models/qwen_image/schedule.h"
#include "models/qwen3/model.h"
#include "models/wan/series.h"

#include <utility>

namespace zeroshard::models::qwen_image {

namespace {

// seed-weights: what Qwen-Image's text_encoder/ (Qwen2_5_VLForConditionalGeneration saved by
// transformers >= 4.52) holds beside the language model: lm_head.weight [vocab, hidden] and, with
// `vision`, model.visual.* at Qwen2.5-VL-7B's released vision_config (32 blocks of 1280 with
// RMSNorm, biased qkv / proj / SwiGLU 3420, 2x14x14 patches of 3 channels, a 2x2 merger to
// `hidden`): 676,550,144 parameters at hidden 3584, so that the folder holds the release's
// 8,292,166,656.
std::vector<ReleasedFolder::NotRun> released_not_run(int64_t vocab, int64_t hidden, bool vision) {
  std::vector<ReleasedFolder::NotRun> t{{"lm_head.weight", {vocab, hidden}}};
  if (!vision) return t;
  const int64_t w = 1280, ffn = 3420, depth = 32, patch = 14, temporal = 2, merged = w * 4;
  t.push_back({"model.visual.patch_embed.proj.weight", {w, 3, temporal, patch, patch}});
  for (int64_t i = 0; i < depth; ++i) {
    const std::string b = "model.visual.blocks." + std::to_string(i) + ".";
    t.push_back({b + "norm1.weight", {w}});
    t.push_back({b + "norm2.weight", {w}});
    t.push_back({b + "attn.qkv.weight", {3 * w, w}});
    t.push_back({b + "attn.qkv.bias", {3 * w}});
    t.push_back({b + "attn.proj.weight", {w, w}});
    t.push_back({b + "attn.proj.bias", {w}});
    for (const char* p : {"gate_proj", "up_proj"}) {
      t.push_back({b + "mlp." + p + ".weight", {ffn, w}});
      t.push_back({b + "mlp." + p + ".bias", {ffn}});
    }
    t.push_back({b + "mlp.down_proj.weight", {w, ffn}});
    t.push_back({b + "mlp.down_proj.bias", {w}});
  }
  t.push_back({"model.visual.merger.ln_q.weight", {w}});
  t.push_back({"model.visual.merger.mlp.0.weight", {merged, merged}});
  t.push_back({"model.visual.merger.mlp.0.bias", {merged}});
  t.push_back({"model.visual.merger.mlp.2.weight", {hidden, merged}});
  t.push_back({"model.visual.merger.mlp.2.bias", {hidden}});
  return t;
}

}  // namespace

Series qwen_image_series() {
  diffusion::ImageSeriesSpec spec;
  spec.name = "qwen_image";
  spec.summary =
      "Qwen-Image DiT as released (Qwen2.5-VL-7B text + Wan 2.1 VAE towers), flow matching as DiffSynth trains it "
      "from a DiffSynth image folder or a prepared cache; true-CFG sampling";
  spec.cache_format = "zeroshard qwen_image cache 1";
  spec.conditioning_text = "Wan 2.1 VAE latents + Qwen2.5-VL last hidden states (template rows dropped)";
  // "context": [n, text_hidden], the kept rows of the prompt's states; their count is the
  // attention mask (every kept row is real; batches pad them with a 0 mask).
  spec.cond_fields = {"context"};
  spec.cache_shape = [](const train::TrainConfig& cfg) {
    const auto& c = cfg.series_config<QwenImageSeriesConfig>();
    return std::vector<std::pair<std::string, int64_t>>{{"height", c.io.height},
                                                        {"width", c.io.width},
                                                        {"drop_idx", c.drop_idx},
                                                        {"text_len", c.text_len},
                                                        {"text_hidden", c.text.hidden_size},
                                                        {"z_dim", c.vae.z_dim}};
  };
  spec.make_config = [] { return std::make_unique<QwenImageSeriesConfig>(); };
  spec.keys = [](const train::TrainConfig& cfg) -> const diffusion::ImageSeriesKeys& {
    return cfg.series_config<QwenImageSeriesConfig>().io;
  };
  spec.build = [](const train::TrainConfig& cfg, bool with_dit,
                  bool with_towers) -> std::shared_ptr<diffusion::ImagePipelineImpl> {
    return std::make_shared<QwenImagePipelineImpl>(cfg.series_config<QwenImageSeriesConfig>(), with_dit, with_towers);
  };
  // The wan series' rule: the DiT, the text tower and the VAE are not units themselves (a unit
  // hides the HookableModules inside it); their blocks are.
  spec.is_unit = diffusion::pipeline_unit;
  // qwen_image.dit_from: the released transformer/ (diffusion_pytorch_model*.safetensors or its
  // index): diffusers' names are the DiT's own (the shared layer's default reader).
  // qwen_image.vae_from: Qwen-Image's vae/ safetensors (diffusers' AutoencoderKLQwenImage names,
  // told apart by its quant_conv) through wan's diffusers name map, else Wan2.1_VAE.pth (ours).
  spec.vae_source = [](const train::TrainConfig& cfg, const std::string& path) -> std::shared_ptr<ParamSource> {
    if (io::is_torch_save_file(path)) return io::checkpoint_param_source(path);  // Wan2.1_VAE.pth
    const bool diffusers = io::SafetensorsSet(path).find("quant_conv.weight") != nullptr;
    return nn::name_mapped_param_source(
        path, diffusers ? wan::vae_diffusers_name_map(cfg.series_config<QwenImageSeriesConfig>().vae_config())
                        : nn::NameMap());
  };
  // qwen_image.text_encoder_from: the released text_encoder/ (Qwen2.5-VL-7B: its vision tower and
  // lm_head left unread).
  spec.text_encoder_source = [](const train::TrainConfig&, const std::string& path) {
    return qwen3::text_tower_source(path);
  };
  // seed-weights: vae/ in diffusers' names; text_encoder/ as transformers >= 4.52 nests
  // Qwen2.5-VL's language model (its vision tower and lm_head are not ours to write).
  spec.vae_release_map = [](const train::TrainConfig& cfg) {
    return wan::vae_diffusers_name_map(cfg.series_config<QwenImageSeriesConfig>().vae_config());
  };
  spec.text_encoder_release_map = [](const train::TrainConfig&) {
    nn::NameMap m;
    m.rename("model.**", "model.language_model.**");
    return m;
  };
  spec.text_encoder_beyond = [](const train::TrainConfig& cfg) {
    const auto& c = cfg.series_config<QwenImageSeriesConfig>();
    return diffusion::ImageSeriesSpec::Beyond{
        c.text_vision_tower ? "written seeded, not run: Qwen2.5-VL's output head (lm_head.weight) and vision tower (model.visual.*)"
                            : "written seeded, not run: Qwen2.5-VL's output head (lm_head.weight); not written: its vision "
                              "tower (qwen_image.text_vision_tower)",
        released_not_run(c.text.vocab_size, c.text.hidden_size, c.text_vision_tower)};
  };
  // DiffSynth's "Qwen-Image" training schedule (schedule.h), the same for every image size (mu 0.8,
  // no dynamic shift in training).
  spec.training_schedule = [](const train::TrainConfig& cfg, int64_t, int64_t) {
    const auto& c = cfg.series_config<QwenImageSeriesConfig>();
    return qwen_image_schedule(1000, c.io.shift, c.shift_terminal, /*training=*/true);
  };
  return diffusion::make_image_series(std::move(spec));
}

}  // namespace zeroshard::models::qwen_image
