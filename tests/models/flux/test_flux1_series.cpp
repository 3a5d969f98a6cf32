// What the flux1 series (FLUX.1 dev / schnell as released) alone is checked for, with a tiny
// SentencePiece model, a tiny CLIP tokenizer and a pooled-vector file (flux1_test_data.h): the T5
// and CLIP prompt padding, the 2x2 packing, ids and schedule against DiffSynth's, the pooled file
// instead of the CLIP tower and a prompt missing from it named, the DiT from a released file in
// either layout and the T5 and CLIP text encoders from their released names.
// The checks every image series shares (strategy parity, resume, prepare + sampling, falling loss,
// the published sizes of dev.yaml and schnell.yaml) are its row in
// tests/models/diffusion/test_image_series.cpp.
#include "io/safetensors.h"
#include "models/flux/flux1_name_map.h"
#include "models/flux/flux1_series.h"
#include "models/flux/flux1_test_data.h"
#include "nn/init.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

const std::string kConfigs = std::string(ZS_SOURCE_DIR) + "/configs/flux1/";

// The prompts of the image folder (make_captioned_images).
const std::vector<std::string>& kPrompts = kCaptionedImagePrompts;

// Four images (three png, one jpg; 40x36 to 64x48) and their metadata.csv.
const std::string& folder() {
  static const std::string dir = make_captioned_images("flux1_series_images");
  return dir;
}

std::string towers_args() {
  return "--config " + kConfigs + "base.yaml --set flux1.dataset=" + folder() + flux1_text_args() +
         " --set run.progress=false --set parallel.comm_timeout_s=120";
}

// Writes `tensors` as float32 under their names.
void write_safetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors) {
  std::vector<io::TensorEntry> entries;
  for (const auto& [name, v] : tensors) {
    io::TensorEntry e;
    e.name = name;
    e.dtype = at::kFloat;
    e.shape = v.sizes().vec();
    entries.push_back(e);
  }
  io::SafetensorsWriter w(path, entries);
  for (const auto& [name, v] : tensors) w.write(name, v);
  w.finish();
}

// Values of `module`'s parameters drawn N(0, 0.1) from (seed, name): not any seeded init.
std::map<std::string, at::Tensor> drawn_values(const torch::nn::Module& module, uint64_t seed) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : module.named_parameters()) {
    at::Tensor v = p.value().detach().clone();
    at::Generator g = nn::generator_for(seed, p.key());
    v.normal_(0, 0.1, g);
    out[p.key()] = v;
  }
  return out;
}

// `source` serves every tensor of `ours` under our names, bitwise.
void expect_serves(ParamSource& source, const std::map<std::string, at::Tensor>& ours) {
  std::vector<ParamInfo> infos;
  for (const auto& [name, v] : ours) infos.push_back({name, v.sizes().vec(), 0, v.numel()});
  source.check(infos);
  for (const auto& info : infos) {
    at::Tensor out = at::empty({info.numel}, at::kFloat);
    source.read(info, 0, info.numel, out);
    EXPECT_TRUE(at::equal(out, ours.at(info.name).reshape({-1}))) << info.name;
  }
}

}  // namespace

TEST(Flux1Series, ThePromptIsPaddedToTextLenAsFluxTokenizesIt) {
  // T5TokenizerFast(padding="max_length", max_length=L, truncation=True): ids, </s>, <pad>...
  const auto tok = text::SentencePieceTokenizer::from_file(flux1_text_inputs().spm);
  const std::vector<int32_t> text = tok.encode("a red cat");
  const at::Tensor ids = models::flux::flux1_prompt_ids(tok, "a red cat", 16);
  ASSERT_EQ(ids.sizes(), (at::IntArrayRef{1, 16}));
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(ids[0][static_cast<int64_t>(i)].item<int64_t>(), text[i]) << i;
  EXPECT_EQ(ids[0][static_cast<int64_t>(text.size())].item<int64_t>(), tok.eos_id());
  for (int64_t i = static_cast<int64_t>(text.size()) + 1; i < 16; ++i) EXPECT_EQ(ids[0][i].item<int64_t>(), tok.pad_id());
  // Truncated: the last kept id is </s>.
  const at::Tensor cut = models::flux::flux1_prompt_ids(tok, "a red cat and the blue dog with a clock", 4);
  EXPECT_EQ(cut[0][3].item<int64_t>(), tok.eos_id());
}

TEST(Flux1Series, PackingScheduleAndIdsFollowDiffSynth) {
  // 2x2 patches channel-major: token (i, j) feature c*4 + di*2 + dj = latent[c, 2i+di, 2j+dj].
  const at::Tensor x = at::arange(2 * 3 * 4 * 6, at::kFloat).view({2, 3, 4, 6});
  const at::Tensor t = models::flux::flux1_pack(x);
  ASSERT_EQ(t.sizes(), (at::IntArrayRef{2, 6, 12}));
  EXPECT_EQ(t[1][1 * 3 + 2][2 * 4 + 1 * 2 + 0].item<float>(), x[1][2][2 * 1 + 1][2 * 2 + 0].item<float>());
  EXPECT_TRUE(at::equal(models::flux::flux1_unpack(t, 3, 4, 6), x));
  const at::Tensor ids = models::flux::flux1_image_ids(1, 4, 6, at::kFloat);
  EXPECT_EQ(ids[0][5][0].item<float>(), 0.0f);
  EXPECT_EQ(ids[0][5][1].item<float>(), 1.0f);  // token 5 = row 1, column 2 of a 2 x 3 grid
  EXPECT_EQ(ids[0][5][2].item<float>(), 2.0f);
  // set_timesteps_flux: linspace(1, 0.003/1.002, steps) shifted by 3, both ends included.
  const auto s = models::flux::flux1_schedule(1000, 3.0, true);
  EXPECT_EQ(s.sigmas[0].item<float>(), 1.0f);
  const double smin = 0.003 / 1.002, last = 3 * smin / (1 + 2 * smin);
  EXPECT_NEAR(s.sigmas[999].item<double>(), last, 1e-7);
  EXPECT_NEAR(s.weights.mean().item<double>(), 1.0, 1e-5);  // DiffSynth's weights sum to 1000
  EXPECT_TRUE(at::equal(s.timesteps, s.sigmas * 1000));

  // Bitwise against the same float32 arithmetic in PyTorch (DiffSynth's set_timesteps_flux and
  // set_training_weight, written out), printed as hexadecimal floats.
  const std::string py =
      "import torch\n"
      "smin = 0.003 / 1.002\n"
      "u = torch.linspace(1.0, smin, 1000)\n"
      "s = 3.0 * u / (1 + (3.0 - 1) * u)\n"
      "t = s * 1000\n"
      "y = torch.exp(-2 * ((t - 500) / 1000) ** 2)\n"
      "y = y - y.min()\n"
      "w = y * (1000 / y.sum())\n"
      "for v in (s, t, w):\n"
      "    print(' '.join(float(x).hex() for x in v.tolist()))\n";
  const std::string script = make_temp_dir("flux1_schedule") + "/schedule.py";
  std::ofstream(script) << py;
  std::string out;
  ASSERT_EQ(run_command("/usr/bin/python3 " + script, &out), 0) << out;
  std::istringstream lines(out);
  for (const at::Tensor& ours : {s.sigmas, s.timesteps, s.weights}) {
    std::string line, word;
    ASSERT_TRUE(std::getline(lines, line)) << out;
    std::istringstream words(line);
    int64_t i = 0;
    for (; words >> word; ++i) {
      ASSERT_LT(i, 1000);
      EXPECT_EQ(ours[i].item<float>(), static_cast<float>(std::strtod(word.c_str(), nullptr))) << i;
    }
    EXPECT_EQ(i, 1000);
  }
}

TEST(Flux1Series, APromptMissingFromThePooledFileIsNamed) {
  const std::string pooled = make_temp_dir("flux1_pooled") + "/three.safetensors";
  write_flux1_pooled(pooled, {kPrompts[0], kPrompts[1], kPrompts[3]});
  TrainRun r = train_series(
      towers_args() + " --set train.steps=2 --set flux1.vec_in_dim=768 --set flux1.pooled_file=" + pooled, 1,
      "flux1_missing_pooled");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no pooled vector for the prompt \"" + kPrompts[2] + "\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(pooled), std::string::npos) << r.output;
}

TEST(Flux1Series, TheClipPromptIsPaddedTo77AsFluxTokenizesIt) {
  // CLIPTokenizer(padding="max_length", max_length=77, truncation=True) with FLUX.1's pad token
  // <|endoftext|>: <|startoftext|>, the ids, <|endoftext|>, then <|endoftext|> to 77; a prompt
  // too long keeps 75 ids and its end token in the last slot. The text is lower-cased and its
  // white space collapsed before the BPE.
  text::BpeTokenizer tok = text::BpeTokenizer::from_file(flux1_text_inputs().clip);
  const int64_t bos = *tok.token_to_id("<|startoftext|>"), eos = *tok.token_to_id("<|endoftext|>");
  const std::vector<int32_t> text = tok.encode("a red cat");
  ASSERT_EQ(text.size(), 3u);
  EXPECT_EQ(text[1], *tok.token_to_id("red</w>"));
  EXPECT_EQ(tok.encode("  A   RED\tCat "), text);
  const at::Tensor ids = models::flux::flux1_clip_ids(tok, "a red cat", 77);
  ASSERT_EQ(ids.sizes(), (at::IntArrayRef{1, 77}));
  EXPECT_EQ(ids[0][0].item<int64_t>(), bos);
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(ids[0][static_cast<int64_t>(i) + 1].item<int64_t>(), text[i]) << i;
  for (int64_t i = 4; i < 77; ++i) EXPECT_EQ(ids[0][i].item<int64_t>(), eos) << i;
  std::string longer;
  for (int i = 0; i < 40; ++i) longer += "red cat ";
  const at::Tensor cut = models::flux::flux1_clip_ids(tok, longer, 77);
  EXPECT_EQ(cut[0][75].item<int64_t>(), *tok.token_to_id("red</w>"));  // the 75th of "red cat" x 40
  EXPECT_EQ(cut[0][76].item<int64_t>(), eos);
}

TEST(Flux1Series, ThePooledFileReplacesTheClipTower) {
  // flux1.pooled_file: the vectors come from the file (768 wide, flux1.vec_in_dim 768) and no
  // CLIP tower is built or read; without it the tower gives them (base.yaml: 32 wide).
  const std::string common = towers_args() + " --set train.steps=2";
  TrainRun file = train_series(common + " --set flux1.vec_in_dim=768 --set flux1.pooled_file=" +
                                   flux1_text_inputs().pooled + " --set flux1.clip_tokenizer=/nonexistent",
                               1, "flux1_pooled_file");
  ASSERT_EQ(file.exit_code, 0) << file.output;
  TrainRun tower = train_series(common, 1, "flux1_clip_tower");
  ASSERT_EQ(tower.exit_code, 0) << tower.output;
  TrainRun no_tokenizer = train_series(common + " --set flux1.clip_tokenizer=", 1, "flux1_clip_no_tokenizer");
  EXPECT_NE(no_tokenizer.exit_code, 0);
  EXPECT_NE(no_tokenizer.output.find("flux1.clip_tokenizer"), std::string::npos) << no_tokenizer.output;
}

TEST(Flux1Series, TheDiTStartsFromAReleasedFileInEitherLayout) {
  // A seeded run's final DiT written in BFL names, then in diffusers' names through the name map
  // (the final layer's halves swapped there): training from either file gives the same losses.
  const std::string dir = make_temp_dir("flux1_dit_from");
  const train::TrainConfig cfg = train::load_config(kConfigs + "base.yaml", {"flux1.cache=unused"});
  const auto& c = cfg.series_config<models::flux::Flux1SeriesConfig>();
  models::flux::Flux1DiT dit(c.dit_config());
  std::map<std::string, at::Tensor> ours;
  for (const auto& p : dit->named_parameters()) {
    at::Tensor v = p.value().detach().clone();
    at::Generator g = nn::generator_for(7, p.key());
    v.normal_(0, 0.05, g);  // not the seeded init: the run must read the file
    ours[p.key()] = v;
  }
  write_safetensors(dir + "/bfl.safetensors", ours);
  write_safetensors(dir + "/diffusers.safetensors", models::flux::flux1_diffusers_name_map(c.dit_config()).to_theirs(ours));
  const std::string common = towers_args() + " --set train.steps=2";
  TrainRun seeded = train_series(common, 1, "flux1_seeded");
  TrainRun bfl = train_series(common + " --set flux1.dit_from=" + dir + "/bfl.safetensors", 1, "flux1_bfl");
  TrainRun diffusers =
      train_series(common + " --set flux1.dit_from=" + dir + "/diffusers.safetensors", 1, "flux1_diffusers");
  ASSERT_EQ(bfl.exit_code, 0) << bfl.output;
  ASSERT_EQ(diffusers.exit_code, 0) << diffusers.output;
  EXPECT_EQ(loss_texts(bfl), loss_texts(diffusers));
  EXPECT_NE(loss_texts(bfl), loss_texts(seeded));
}

TEST(Flux1Series, TheTextEncoderSourceReadsTheReleasedT5Names) {
  // flux1_text_encoder_source serves our T5 names from a file in transformers' T5EncoderModel
  // names (text_encoder_2), bitwise.
  const train::TrainConfig cfg = train::load_config(kConfigs + "base.yaml", {"flux1.cache=unused"});
  const auto& c = cfg.series_config<models::flux::Flux1SeriesConfig>();
  models::t5::T5Encoder t5(c.text_config());
  const std::map<std::string, at::Tensor> ours = drawn_values(*t5, 11);
  const std::map<std::string, at::Tensor> theirs = models::t5::hf_t5_name_map(true).to_theirs(ours);
  ASSERT_EQ(theirs.count("shared.weight"), 1u);
  const std::string path = make_temp_dir("flux1_t5") + "/model.safetensors";
  write_safetensors(path, theirs);
  auto source = models::flux::flux1_text_encoder_source(path);
  expect_serves(*source, ours);
}

TEST(Flux1Series, TheClipSourceReadsTheReleasedTextEncoderNames) {
  // flux1_clip_source serves CLIPTextModel's names ("text_model.*", ours below "clip.") bitwise
  // from a released-layout file, leaving the position-ids buffer older files hold unread.
  const train::TrainConfig cfg = train::load_config(kConfigs + "base.yaml", {"flux1.cache=unused"});
  const auto& c = cfg.series_config<models::flux::Flux1SeriesConfig>();
  models::flux::ClipTextModel clip(c.clip);
  const std::map<std::string, at::Tensor> ours = drawn_values(*clip, 13);
  ASSERT_EQ(ours.count("text_model.embeddings.token_embedding.weight"), 1u);
  ASSERT_EQ(ours.count("text_model.encoder.layers.1.self_attn.out_proj.bias"), 1u);
  ASSERT_EQ(ours.count("text_model.final_layer_norm.weight"), 1u);
  std::map<std::string, at::Tensor> file = ours;
  file["text_model.embeddings.position_ids"] = at::arange(77, at::kLong).unsqueeze(0).to(at::kFloat);
  const std::string path = make_temp_dir("flux1_clip") + "/model.safetensors";
  write_safetensors(path, file);
  auto source = models::flux::flux1_clip_source(path);
  expect_serves(*source, ours);
}
