// The qwen_image series' config keys (series.h).
#include "models/qwen_image/series.h"
#include "models/qwen_image/schedule.h"

#include <cmath>
#include <stdexcept>

namespace zeroshard::models::qwen_image {

QwenImageSeriesConfig::QwenImageSeriesConfig()
    : dit(qwen_image_20b()), text(qwen3::qwen25_vl_7b_text()), vae(wan::wan21_vae()) {
  // The flow-matching shifts as plain shifts: exp(mu) (schedule.h). Training: DiffSynth's mu 0.8;
  // sampling without the dynamic shift: the template's default mu 0.8 too.
  io.shift = std::exp(kTrainingMu);
  io.sample_shift = std::exp(kTrainingMu);
  // QwenImagePipeline's true_cfg_scale default (DiffSynth's cfg_scale default too); DiffSynth's
  // negative prompt default "".
  io.guidance_scale = 4.0;
}

void QwenImageSeriesConfig::register_keys(train::ConfigKeys& k) {
  {
    train::ConfigKeys::ModelScope model(k);
    k.add_int("qwen_image.num_layers", &dit.num_layers, 0, 1024, "DiT double-stream blocks (released: 60)");
    k.add_int("qwen_image.num_attention_heads", &dit.num_attention_heads, 1, 1024, "DiT heads (24)");
    k.add_int("qwen_image.attention_head_dim", &dit.attention_head_dim, 2, 4096,
              "DiT head size (128) = rope_axes_t + rope_axes_h + rope_axes_w");
    k.add_int("qwen_image.rope_axes_t", &rope_axes_t, 0, 4096, "RoPE dims of the frame axis (16)");
    k.add_int("qwen_image.rope_axes_h", &rope_axes_h, 0, 4096, "RoPE dims of the row axis (56)");
    k.add_int("qwen_image.rope_axes_w", &rope_axes_w, 0, 4096, "RoPE dims of the column axis (56)");
    k.add_int("qwen_image.text_vocab", &text.vocab_size, 2, 1 << 22,
              "Qwen2.5-VL vocabulary (152064); >= the tokenizer's ids");
    k.add_int("qwen_image.text_hidden", &text.hidden_size, 2, 1 << 16,
              "Qwen2.5-VL width = the DiT's joint_attention_dim (3584)");
    k.add_int("qwen_image.text_ffn", &text.intermediate_size, 1, 1 << 20, "Qwen2.5-VL SwiGLU width (18944)");
    k.add_int("qwen_image.text_layers", &text.num_hidden_layers, 1, 1024,
              "Qwen2.5-VL layers (28); the states are the last hidden state (after the final norm)");
    k.add_int("qwen_image.text_heads", &text.num_attention_heads, 1, 1024, "Qwen2.5-VL query heads (28)");
    k.add_int("qwen_image.text_kv_heads", &text.num_key_value_heads, 1, 1024, "Qwen2.5-VL key/value heads (4)");
    k.add_int("qwen_image.text_head_dim", &text.head_dim, 2, 4096, "Qwen2.5-VL head size (128)");
    k.add_int("qwen_image.drop_idx", &drop_idx, 0, 1 << 16,
              "template tokens dropped from the front of the states (prompt_template_encode_start_idx: 34 = the "
              "system turn and '<|im_start|>user\\n' with the released tokenizer)");
    k.add_int("qwen_image.text_len", &text_len, 1, 1024, "prompt rows kept after the drop (max_sequence_length, 512)");
    k.add_int("qwen_image.vae_dim", &vae.dim, 8, 1 << 12, "Wan VAE base width (96; levels x1, x2, x4, x4)");
    k.add_int("qwen_image.vae_num_res_blocks", &vae.num_res_blocks, 1, 16, "Wan VAE residual blocks per level (2)");
  }
  k.add_float("qwen_image.shift_terminal", &shift_terminal, 0.0, 0.999,
              "the schedule's last sigma (DiffSynth's Qwen-Image template and the released scheduler: 0.02; 0: no "
              "stretch)");
  k.add_bool("qwen_image.dynamic_shift", &dynamic_shift,
             "sampling: mu from the image's token count (0.5 at 256 tokens, 0.9 at 8192) as the pipelines do; false: "
             "qwen_image.sample_shift");
  k.add_bool("qwen_image.text_vision_tower", &text_vision_tower,
             "seed-weights writes Qwen2.5-VL-7B's vision tower (model.visual.*) beside the tower as the released "
             "text_encoder/ holds it (20b: true; the pipeline does not run it)");
  io.register_keys(k, "qwen_image", "the Qwen2.5 tokenizer.json (Qwen-Image's tokenizer/)");
}

QwenImageDitConfig QwenImageSeriesConfig::dit_config() const {
  QwenImageDitConfig c = dit;
  c.joint_attention_dim = text.hidden_size;
  c.out_channels = vae.z_dim;
  c.in_channels = vae.z_dim * c.patch_size * c.patch_size;
  c.axes_dims_rope = {rope_axes_t, rope_axes_h, rope_axes_w};
  return c;
}

qwen3::QwenConfig QwenImageSeriesConfig::text_config() const {
  qwen3::QwenConfig c = text;
  // mrope sections (16, 24, 24) cover the released head_dim / 2 = 64. On text-only input mrope is
  // plain RoPE (qwen25_text CASE.md), so a reduced head size keeps the proportions (1/4, 3/8, 3/8)
  // when they divide it and drops the sections otherwise: the same computation either way.
  const int64_t half = c.head_dim / 2;
  int64_t covered = 0;
  for (int64_t s : c.mrope_section) covered += s;
  if (!c.mrope_section.empty() && covered != half) {
    c.mrope_section.clear();
    if (half % 8 == 0) c.mrope_section = {half / 4, 3 * half / 8, 3 * half / 8};
  }
  return c;
}

wan::WanVaeConfig QwenImageSeriesConfig::vae_config() const { return vae; }

void QwenImageSeriesConfig::validate(const train::TrainConfig& c) const {
  (void)c;
  dit_config().validate("qwen_image");
  text_config().validate("qwen_image.text_*");
  vae_config().validate();
  if (vae.z_dim != 16) throw std::invalid_argument("qwen_image: the Wan VAE's z_dim must be 16, got " + std::to_string(vae.z_dim));
  io.validate("qwen_image", vae.spatial_factor() * dit.patch_size, c.needs_data);
}

}  // namespace zeroshard::models::qwen_image
