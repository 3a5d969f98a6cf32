// The image series read their towers from the files as released, through the real binary: a
// run from seeded towers dumps its initial weights (run.dump_init); the test writes each tower
// in its released layout -- FLUX.1's VAE in diffusers' names inside a vae/ folder (Z-Image,
// FLUX.1), FLUX.1's text_encoder_2/ (transformers' T5 names, sharded), FLUX.2's vae/ with its BatchNorm update counter, Qwen3's text_encoder/ as a sharded
// index with its lm_head (Z-Image, FLUX.2 klein), Qwen2.5-VL's text_encoder/ with its vision
// tower and the transformers >= 4.52 nesting (Qwen-Image), Qwen-Image's vae/ in diffusers' names
// -- and a second run from those files must train bitwise as the first, its log (and `prepare`'s
// report) naming every tensor group it leaves unread, while the same files with the weights
// halved train otherwise (they are read); read in place (model.frozen_storage=file) the run and
// `prepare`'s cache are bitwise those from memory; a tensor no rule names is refused, naming it.
#include "io/safetensors.h"
#include "models/flux/flux1_series.h"
#include "models/flux/flux1_test_data.h"
#include "models/flux/kl_vae.h"
#include "models/qwen_image/series.h"
#include "models/t5/t5.h"
#include "models/wan/series.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

using Tensors = std::map<std::string, at::Tensor>;

const std::string kSource = ZS_SOURCE_DIR;
const std::string kQwenTokenizer = kSource + "/tests/models/qwen3/data/tiny_tokenizer/tokenizer.json";

void write_file(const std::string& path, const Tensors& tensors) {
  fs::create_directories(fs::path(path).parent_path());
  std::vector<io::TensorEntry> entries;
  for (const auto& [k, v] : tensors) entries.push_back({k, v.scalar_type(), v.sizes().vec()});
  io::SafetensorsWriter w(path, entries);
  for (const auto& [k, v] : tensors) w.write(k, v);
  w.finish();
}

// Hugging Face's sharded layout: <dir>/model-0000{1,2}-of-00002.safetensors + the index.
void write_sharded(const std::string& dir, const Tensors& tensors) {
  Tensors half[2];
  nlohmann::json index;
  int i = 0;
  for (const auto& [k, v] : tensors) {
    const int part = i++ % 2;
    half[part][k] = v;
    index["weight_map"][k] = "model-0000" + std::to_string(part + 1) + "-of-00002.safetensors";
  }
  for (int part = 0; part < 2; ++part) {
    write_file(dir + "/model-0000" + std::to_string(part + 1) + "-of-00002.safetensors", half[part]);
  }
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);
}

// The tensors of `file` under `prefix`, prefix stripped, each times `scale`.
Tensors tower(const std::string& file, const std::string& prefix, double scale) {
  const io::SafetensorsFile f(file);
  Tensors out;
  for (const auto& e : f.entries()) {
    if (e.name.rfind(prefix, 0) == 0) out[e.name.substr(prefix.size())] = f.read(e.name) * scale;
  }
  return out;
}

// A released tower written from the first run's initial weights: which key reads it, and the
// notes the second run must log.
struct TowerFile {
  std::string key;  // "vae_from" / "text_encoder_from"
  // Writes the tower of `init` (every tensor times `scale`) under `dir`; returns what the key names.
  std::function<std::string(const std::string& init, const std::string& dir, double scale)> write;
  std::vector<std::string> notes;
};

struct Row {
  std::string series;
  std::function<std::string()> args;  // config and data of a 2-step towers-in-the-loop run
  std::vector<TowerFile> files;
};

// extra may set the tokenizer again (flux1_text_args): the later --set wins.
std::string image_args(const std::string& series, const std::string& tokenizer, const std::string& extra = "",
                       const std::string& config = "base.yaml") {
  static const std::string images = make_captioned_images("released_files");
  return "--config " + kSource + "/configs/" + series + "/" + config + " --set " + series + ".dataset=" + images + " --set " +
         series + ".tokenizer=" + tokenizer + extra +
         " --set train.steps=2 --set train.micro_batch_size=1 --set train.warmup_steps=1 --set run.progress=false"
         " --set parallel.comm_timeout_s=120";
}

models::flux::KlVaeConfig bfl_levels(const Tensors& vae) {
  // The map needs the number of levels only: BFL's decoder.up.N.
  int64_t levels = 0;
  for (const auto& [k, v] : vae) {
    if (k.rfind("decoder.up.", 0) == 0) levels = std::max<int64_t>(levels, std::stoll(k.substr(11)) + 1);
  }
  models::flux::KlVaeConfig c;
  c.naming = models::flux::VaeNaming::Bfl;
  c.block_channels.assign(static_cast<size_t>(levels), 32);
  return c;
}

// FLUX.1's VAE (ours: BFL's names) as diffusers' vae/diffusion_pytorch_model.safetensors.
TowerFile flux1_vae_diffusers_folder() {
  return {"vae_from",
          [](const std::string& init, const std::string& dir, double scale) {
            const Tensors vae = tower(init, "vae.", scale);
            write_file(dir + "/vae/diffusion_pytorch_model.safetensors",
                       models::flux::kl_vae_name_map(bfl_levels(vae)).to_theirs(vae));
            return dir + "/vae";
          },
          {}};
}

// Qwen3's text_encoder/ as transformers saves Qwen3ForCausalLM: sharded, with lm_head.weight.
TowerFile qwen3_text_encoder() {
  return {"text_encoder_from",
          [](const std::string& init, const std::string& dir, double scale) {
            Tensors te = tower(init, "text_encoder.", scale);
            te["lm_head.weight"] = te.at("model.embed_tokens.weight").clone();
            write_sharded(dir + "/text_encoder", te);
            return dir + "/text_encoder";
          },
          {"1 tensor 'lm_head.weight' left unread (the output head"}};
}

const std::vector<Row>& rows() {
  static const std::vector<Row> all = [] {
    std::vector<Row> r;
    r.push_back({"z_image", [] { return image_args("z_image", kQwenTokenizer); },
                 {flux1_vae_diffusers_folder(), qwen3_text_encoder()}});
    r.push_back({"flux1", [] { return image_args("flux1", flux1_text_inputs().spm, flux1_text_args()); },
                 {flux1_vae_diffusers_folder(),
                  {"text_encoder_from",
                   [](const std::string& init, const std::string& dir, double scale) {
                     // text_encoder_2/: transformers' T5EncoderModel names, sharded.
                     write_sharded(dir + "/text_encoder_2",
                                   models::t5::hf_t5_name_map(true).to_theirs(tower(init, "text_encoder.", scale)));
                     return dir + "/text_encoder_2";
                   },
                   {}}}});
    r.push_back({"flux2", [] { return image_args("flux2", kQwenTokenizer); },
                 {{"vae_from",
                   [](const std::string& init, const std::string& dir, double scale) {
                     // diffusers' AutoencoderKLFlux2 names are the VAE's own; the file also
                     // holds BatchNorm's update counter.
                     Tensors vae = tower(init, "vae.", scale);
                     vae["bn.num_batches_tracked"] = at::full({}, 1000, at::kLong);
                     write_file(dir + "/vae/diffusion_pytorch_model.safetensors", vae);
                     return dir + "/vae";
                   },
                   {"1 tensor 'bn.num_batches_tracked' left unread (BatchNorm's update counter"}},
                  qwen3_text_encoder()}});
    r.push_back({"qwen_image", [] { return image_args("qwen_image", kQwenTokenizer); },
                 {{"text_encoder_from",
                   [](const std::string& init, const std::string& dir, double scale) {
                     // Qwen2_5_VLForConditionalGeneration as transformers >= 4.52 saves it.
                     Tensors te;
                     for (const auto& [k, v] : tower(init, "text_encoder.", scale)) {
                       te["model.language_model." + k.substr(std::string("model.").size())] = v;
                     }
                     te["model.visual.blocks.0.attn.qkv.weight"] = at::randn({6, 2});
                     te["model.visual.merger.mlp.0.weight"] = at::randn({2, 2});
                     te["lm_head.weight"] = at::randn({3, 2});
                     write_sharded(dir + "/text_encoder", te);
                     return dir + "/text_encoder";
                   },
                   {"2 tensors 'model.visual.**' left unread (the vision tower of Qwen2.5-VL",
                    "1 tensor 'lm_head.weight' left unread"}},
                  {"vae_from",
                   [](const std::string& init, const std::string& dir, double scale) {
                     // Qwen-Image's vae/: AutoencoderKLQwenImage (diffusers' names).
                     const train::TrainConfig cfg = train::load_config(
                         kSource + "/configs/qwen_image/base.yaml", {"qwen_image.cache=unused"});
                     const auto vae_config =
                         cfg.series_config<models::qwen_image::QwenImageSeriesConfig>().vae_config();
                     write_file(dir + "/vae/diffusion_pytorch_model.safetensors",
                                models::wan::vae_diffusers_name_map(vae_config).to_theirs(tower(init, "vae.", scale)));
                     return dir + "/vae";
                   },
                   {}}}});
    return r;
  }();
  return all;
}

class ReleasedFiles : public ::testing::TestWithParam<size_t> {};

}  // namespace

TEST_P(ReleasedFiles, TowersReadFromTheReleasedLayoutsTrainBitwiseAsTheSeededOnes) {
  const Row& row = rows().at(GetParam());
  const std::string common = row.args() + " --set parallel.strategy=optim_grads_params";
  const TrainRun seeded = train_series(common + " --set run.dump_init=true", 2, "released_" + row.series + "_seeded");
  ASSERT_EQ(seeded.exit_code, 0) << seeded.output;
  // The towers written as released: the run from them trains bitwise as the seeded one.
  auto keys_for = [&](double scale) {
    const std::string dir = make_temp_dir("released_" + row.series + "_files");
    std::string keys;
    for (const TowerFile& f : row.files) {
      keys += " --set " + row.series + "." + f.key + "=" + f.write(seeded.dir + "/init.safetensors", dir, scale);
    }
    return keys;
  };
  const std::string keys = keys_for(1.0);
  const TrainRun from_files = train_series(common + keys, 2, "released_" + row.series + "_read");
  ASSERT_EQ(from_files.exit_code, 0) << from_files.output;
  ASSERT_EQ(seeded.metrics.size(), 2u);
  EXPECT_EQ(loss_texts(seeded), loss_texts(from_files)) << keys;
  // Read in place from those files (model.frozen_storage=file: mapped, converted where a name map
  // concatenates or swaps): the same bits again.
  const TrainRun in_place = train_series(common + keys + " --set model.frozen_storage=file", 2,
                                         "released_" + row.series + "_in_place");
  ASSERT_EQ(in_place.exit_code, 0) << in_place.output;
  EXPECT_EQ(loss_texts(seeded), loss_texts(in_place)) << keys;
  ASSERT_FALSE(in_place.metrics.empty());
  {
    const nlohmann::json& m = in_place.metrics.back();
    EXPECT_GT(m.value("mem_mapped_bytes", int64_t{0}) + m.value("mem_converted_bytes", int64_t{0}), 0)
        << "nothing was read from the files: " << m.dump();
  }
  // `prepare` through the towers read in place writes the cache it writes from memory, byte for byte.
  {
    std::string out;
    std::map<std::string, std::string> caches;
    for (const std::string storage : {"memory", "file"}) {
      caches[storage] = make_temp_dir("released_" + row.series + "_cache_" + storage) + "/cache";
      ASSERT_EQ(run_command(std::string(ZS_BINARY) + " prepare --nproc 2 " + common + keys + " --set " + row.series +
                                ".cache=" + caches[storage] + " --set model.frozen_storage=" + storage,
                            &out),
                0)
          << out;
    }
    int files = 0;
    for (const auto& e : fs::recursive_directory_iterator(caches["memory"])) {
      if (!e.is_regular_file()) continue;
      const std::string other = caches["file"] + "/" + fs::relative(e.path(), caches["memory"]).string();
      EXPECT_TRUE(fs::exists(other) && read_text(e.path().string()) == read_text(other)) << other;
      ++files;
    }
    EXPECT_GT(files, 0);
  }
  // And they are read: the same files with every tower weight halved train otherwise.
  const TrainRun halved = train_series(common + keys_for(0.5), 2, "released_" + row.series + "_halved");
  ASSERT_EQ(halved.exit_code, 0) << halved.output;
  EXPECT_NE(loss_texts(seeded).at(0), loss_texts(halved).at(0));
  const std::string log = read_text(from_files.dir + "/rank0.log");
  bool noted = false;
  for (const TowerFile& f : row.files) {
    for (const std::string& note : f.notes) EXPECT_NE(log.find(note), std::string::npos) << note << "\n" << log;
    noted = noted || !f.notes.empty();
  }
  if (!noted) return;
  // `prepare` reads the same files and says so too.
  std::string out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " prepare --nproc 2 " + common + keys + " --set " + row.series +
                            ".cache=" + make_temp_dir("released_" + row.series + "_cache") + "/cache",
                        &out),
            0)
      << out;
  for (const TowerFile& f : row.files) {
    for (const std::string& note : f.notes) EXPECT_NE(out.find(note), std::string::npos) << note << "\n" << out;
  }
}

INSTANTIATE_TEST_SUITE_P(ImageSeries, ReleasedFiles, ::testing::Range<size_t>(0, 4),
                         [](const ::testing::TestParamInfo<size_t>& i) { return rows().at(i.param).series; });

TEST(ReleasedFilesRefused, ATextTowerTensorNoRuleNamesIsRefusedNamingItAndTheFile) {
  const std::string args = image_args("z_image", kQwenTokenizer);
  const TrainRun seeded = train_series(args + " --set run.dump_init=true --set train.steps=1", 1, "released_refused_seed");
  ASSERT_EQ(seeded.exit_code, 0) << seeded.output;
  const std::string dir = make_temp_dir("released_refused");
  Tensors te = tower(seeded.dir + "/init.safetensors", "text_encoder.", 1.0);
  te["model.layers.0.mlp.extra_proj.weight"] = at::zeros({2, 2});
  write_file(dir + "/text_encoder/model.safetensors", te);
  const TrainRun bad = train_series(args + " --set train.steps=1 --set z_image.text_encoder_from=" + dir + "/text_encoder",
                                    1, "released_refused");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find(dir + "/text_encoder/model.safetensors: tensor 'model.layers.0.mlp.extra_proj.weight' is "
                                  "not a parameter of this model"),
            std::string::npos)
      << bad.output;
}

// `zeroshard seed-weights` writes each series' released folders (transformer/, the text tower's
// folder, vae/, through the series' name maps) and a LoRA run reads them all in place, training
// bitwise as the seeded run.
class SeedWeights : public ::testing::TestWithParam<size_t> {};

TEST_P(SeedWeights, TheReleasedFoldersTrainInPlaceBitwiseAsTheSeededModel) {
  const std::string series = rows().at(GetParam()).series;
  // FLUX.2's Qwen3 tower untied: its folder then also holds lm_head.weight (ReleasedFolder::not_run),
  // which reading the folder in place must pass over, as Qwen-Image's always does.
  const std::string args = series == "flux1" ? image_args("flux1", flux1_text_inputs().spm, flux1_text_args(), "lora.yaml")
                           : series == "flux2"
                               ? image_args(series, kQwenTokenizer, " --set flux2.text_tie_embeddings=false", "lora.yaml")
                               : image_args(series, kQwenTokenizer, "", "lora.yaml");
  const std::string keys = expect_seeded_folders_train_as_seeded(args, "seed_weights_" + series);
  for (const std::string key : {".dit_from=", ".text_encoder_from=", ".vae_from="}) {
    EXPECT_NE(keys.find(series + key), std::string::npos) << keys;
  }
}

// FLUX.1-dev also ships its DiT and VAE as BFL's single files (flux1-dev.safetensors,
// ae.safetensors: our names), which DiffSynth-Studio loads: seed-weights writes them when asked
// (--only dit_bfl vae_bfl), and a LoRA run reads them in place, bitwise the seeded run.
TEST(SeedWeights, Flux1AsBflSingleFilesTrainInPlaceBitwiseAsTheSeededModel) {
  const std::string keys = expect_seeded_folders_train_as_seeded(
      image_args("flux1", flux1_text_inputs().spm, flux1_text_args(), "lora.yaml"), "seed_weights_flux1_bfl",
      " --only dit_bfl --only vae_bfl --only text_encoder --only clip");
  EXPECT_EQ(keys.find("transformer"), std::string::npos) << "the diffusers folder was written too: " << keys;
  // Each key names its one file, which holds BFL's names (the reader would map diffusers' too, so
  // the bitwise run alone cannot tell the layouts apart).
  auto file_of = [&](const std::string& key) {
    const size_t at = keys.find(key + "=");
    return at == std::string::npos ? std::string() : keys.substr(at + key.size() + 1, keys.find(' ', at) - at - key.size() - 1);
  };
  auto names_of = [](const std::string& path) {
    const io::SafetensorsFile file(path);
    std::string all;
    for (const auto& e : file.entries()) all += e.name + "\n";
    return all;
  };
  const std::string dit = file_of("flux1.dit_from"), vae = file_of("flux1.vae_from");
  ASSERT_EQ(std::filesystem::path(dit).filename(), "flux1-dev.safetensors") << keys;
  ASSERT_EQ(std::filesystem::path(vae).filename(), "ae.safetensors") << keys;
  const std::string dit_names = names_of(dit), vae_names = names_of(vae);
  EXPECT_NE(dit_names.find("double_blocks.0.img_attn.qkv.weight\n"), std::string::npos) << dit_names;
  EXPECT_NE(dit_names.find("img_in.weight\n"), std::string::npos) << dit_names;
  EXPECT_EQ(dit_names.find("transformer_blocks."), std::string::npos) << dit_names;
  EXPECT_NE(vae_names.find("encoder.down.0.block.0."), std::string::npos) << vae_names;
  EXPECT_EQ(vae_names.find("down_blocks"), std::string::npos) << vae_names;
}

INSTANTIATE_TEST_SUITE_P(ImageSeries, SeedWeights, ::testing::Range<size_t>(0, 4),
                         [](const ::testing::TestParamInfo<size_t>& i) { return rows().at(i.param).series; });

// `seed-weights --dry-run` at the released sizes (nothing written, meta tensors only): every folder
// holds the published parameter count, the tensors the pipelines never run included (an untied
// output head, a VLM's vision tower and projector), so the seeded folders are the release's size.
TEST(SeedWeights, EveryReleasedFolderHoldsThePublishedParameterCount) {
  struct Folder {
    std::string config, line;
  };
  // DiTs: the released transformer files' element counts (test_image_series.cpp's sizes); text
  // towers: Qwen3-4B, Qwen3-8B, Qwen2.5-VL-7B-Instruct, Mistral-Small-3.1-24B-Instruct-2503,
  // T5 v1.1 XXL's encoder and CLIP ViT-L/14's text model as published.
  const std::vector<Folder> expected = {
      {"flux2/klein_4b.yaml", "dit.* -> W/transformer: 3875544576 parameters"},
      {"flux2/klein_4b.yaml", "text_encoder.* -> W/text_encoder: 4022468096 parameters"},
      {"flux2/klein_9b.yaml", "dit.* -> W/transformer: 9078581248 parameters"},
      {"flux2/klein_9b.yaml", "text_encoder.* -> W/text_encoder: 8190735360 parameters"},
      {"flux2/dev.yaml", "dit.* -> W/transformer: 32223281152 parameters"},
      {"flux2/dev.yaml", "text_encoder.* -> W/text_encoder: 24011361280 parameters"},
      {"qwen_image/20b.yaml", "dit.* -> W/transformer: 20430401088 parameters"},
      {"qwen_image/20b.yaml", "text_encoder.* -> W/text_encoder: 8292166656 parameters"},
      {"z_image/6b.yaml", "dit.* -> W/transformer: 6154908736 parameters"},
      {"z_image/6b.yaml", "text_encoder.* -> W/text_encoder: 4022468096 parameters"},
      {"flux1/dev.yaml", "dit.* -> W/transformer: 11901408320 parameters"},
      {"flux1/dev.yaml", "text_encoder.* -> W/text_encoder_2: 4762310656 parameters"},
      {"flux1/dev.yaml", "clip.* -> W/text_encoder: 123060480 parameters"},
  };
  std::map<std::string, std::string> outputs;
  for (const Folder& f : expected) {
    std::string& out = outputs[f.config];
    if (out.empty()) {
      ASSERT_EQ(run_command(std::string(ZS_BINARY) + " seed-weights --dry-run --out W --config " + kSource + "/configs/" +
                                f.config,
                            &out),
                0)
          << out;
      EXPECT_NE(out.find("nothing written (--dry-run)"), std::string::npos) << out;
      EXPECT_FALSE(fs::exists("W")) << "--dry-run wrote " << f.config;
    }
    EXPECT_NE(out.find(f.line), std::string::npos) << f.config << ": " << f.line << "\n" << out;
  }
}

// Bad requests are refused before anything is written: a folder that exists already (named by
// its index), an --only no folder answers to (listing those that do).
TEST(SeedWeightsRefused, AnExistingFolderAndAnUnknownOnlyNameThemselvesAndWriteNothing) {
  const std::string out_dir = make_temp_dir("seed_weights_refused") + "/w";
  const std::string cmd = std::string(ZS_BINARY) + " seed-weights --config " + kSource + "/configs/z_image/base.yaml --out " + out_dir;
  std::string out;
  ASSERT_EQ(run_command(cmd + " --only vae", &out), 0) << out;
  EXPECT_FALSE(fs::exists(out_dir + "/transformer")) << "--only vae wrote the DiT";
  EXPECT_NE(run_command(cmd, &out), 0);
  EXPECT_NE(out.find(out_dir + "/vae/diffusion_pytorch_model.safetensors.index.json exists"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(out_dir + "/transformer")) << "the DiT was written before the refusal";
  EXPECT_NE(run_command(cmd + " --only unet", &out), 0);
  EXPECT_NE(out.find("--only unet: z_image writes dit, text_encoder, vae"), std::string::npos) << out;
}
