// nn::NameMap and its parameter source: every rule kind against hand-built tensors (whole-tensor
// conversion both ways bitwise, ranged reads across piece boundaries, errors naming the tensor),
// then the Wan DiT's original <-> diffusers map on the reference case's weights.
#include "io/safetensors.h"
#include "models/wan/dit.h"
#include "models/wan/vae.h"
#include "nn/name_map.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

using namespace zeroshard;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("zs_name_map_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p.string();
}

void write_file(const std::string& path, const std::map<std::string, at::Tensor>& tensors) {
  std::vector<io::TensorEntry> entries;
  for (const auto& [k, v] : tensors) entries.push_back({k, v.scalar_type(), v.sizes().vec()});
  io::SafetensorsWriter w(path, entries);
  for (const auto& [k, v] : tensors) w.write(k, v);
  w.finish();
}

std::map<std::string, at::Tensor> read_all(const std::string& path) {
  const io::SafetensorsFile f(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& e : f.entries()) out[e.name] = f.read(e.name);
  return out;
}

std::vector<ParamInfo> infos_of(const std::map<std::string, at::Tensor>& ours) {
  std::vector<ParamInfo> infos;
  for (const auto& [k, v] : ours) infos.push_back({k, v.sizes().vec(), 0, v.numel()});
  return infos;
}

// Reads every parameter as W ranks would (W contiguous ranges) and compares with `ours`.
void expect_reads_match(ParamSource& source, const std::map<std::string, at::Tensor>& ours, int world) {
  for (const auto& info : infos_of(ours)) {
    at::Tensor got = at::empty({info.numel}, at::kFloat);
    for (int r = 0; r < world; ++r) {
      const int64_t b = info.numel * r / world, e = info.numel * (r + 1) / world;
      if (e > b) source.read(info, b, e, got.narrow(0, b, e - b));
    }
    EXPECT_TRUE(got.equal(ours.at(info.name).reshape({-1}))) << info.name << " at W = " << world;
  }
}

nn::NameMap example_map() {
  nn::NameMap m;
  m.rename("blocks.*.norm.**", "layers.*.ln.**");
  m.reshape("blocks.*.proj.weight", "layers.*.proj_conv.weight",
            [](const std::vector<int64_t>& s) { return std::vector<int64_t>{s[0], s[1], 1, 1}; },
            [](const std::vector<int64_t>& s) { return std::vector<int64_t>{s[0], s[1]}; });
  m.concat("blocks.*.qkv.weight", {"layers.*.to_q.weight", "layers.*.to_k.weight", "layers.*.to_v.weight"});
  m.split({"blocks.*.a.weight", "blocks.*.b.weight"}, "layers.*.ab.weight",
          [](const std::vector<int64_t>& s) { return std::vector<int64_t>{s[0] - 2, 2}; });  // unequal pieces
  m.swap_halves("final.ada.weight", "final.ada_swapped.weight");
  return m;
}

std::map<std::string, at::Tensor> example_ours() {
  at::manual_seed(1);
  std::map<std::string, at::Tensor> ours;
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    ours[b + "norm.weight"] = at::randn({6});
    ours[b + "norm.bias"] = at::randn({6});
    ours[b + "proj.weight"] = at::randn({5, 6});
    ours[b + "qkv.weight"] = at::randn({9, 6});  // 3 x [3, 6]
    ours[b + "a.weight"] = at::randn({4, 3});
    ours[b + "b.weight"] = at::randn({2, 3});
  }
  ours["final.ada.weight"] = at::randn({8, 3});
  ours["untouched.weight"] = at::randn({7});
  return ours;
}

}  // namespace

TEST(NameMap, EveryRuleKindRoundTripsBitwise) {
  const nn::NameMap map = example_map();
  const auto ours = example_ours();
  const auto theirs = map.to_theirs(ours);
  std::set<std::string> names;
  for (const auto& [k, v] : theirs) names.insert(k);
  const std::set<std::string> expected = {
      "layers.0.ln.weight", "layers.0.ln.bias", "layers.0.proj_conv.weight", "layers.0.to_q.weight",
      "layers.0.to_k.weight", "layers.0.to_v.weight", "layers.0.ab.weight", "layers.1.ln.weight",
      "layers.1.ln.bias", "layers.1.proj_conv.weight", "layers.1.to_q.weight", "layers.1.to_k.weight",
      "layers.1.to_v.weight", "layers.1.ab.weight", "final.ada_swapped.weight", "untouched.weight"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(theirs.at("layers.0.proj_conv.weight").sizes(), at::IntArrayRef({5, 6, 1, 1}));
  EXPECT_TRUE(theirs.at("layers.1.to_k.weight").equal(ours.at("blocks.1.qkv.weight").narrow(0, 3, 3)));
  EXPECT_TRUE(theirs.at("layers.0.ab.weight").narrow(0, 4, 2).equal(ours.at("blocks.0.b.weight")));
  EXPECT_TRUE(theirs.at("final.ada_swapped.weight").narrow(0, 0, 4).equal(ours.at("final.ada.weight").narrow(0, 4, 4)));
  const auto back = map.to_ours(theirs);
  ASSERT_EQ(back.size(), ours.size());
  for (const auto& [k, v] : ours) EXPECT_TRUE(back.at(k).equal(v)) << k;
}

TEST(NameMap, SourceServesRangesFromTheOtherLayout) {
  const nn::NameMap map = example_map();
  const auto ours = example_ours();
  const std::string dir = temp_dir("ranges");
  write_file(dir + "/theirs.safetensors", map.to_theirs(ours));
  auto source = nn::name_mapped_param_source(dir + "/theirs.safetensors", map);
  source->check(infos_of(ours));
  for (int world : {1, 2, 3, 7}) expect_reads_match(*source, ours, world);
  // A multi-file index works the same.
  auto theirs = map.to_theirs(ours);
  std::map<std::string, at::Tensor> half1, half2;
  nlohmann::json index;
  int i = 0;
  for (const auto& [k, v] : theirs) {
    const bool second = i++ % 2 == 1;
    (second ? half1 : half2)[k] = v;
    index["weight_map"][k] = second ? "b.safetensors" : "a.safetensors";
  }
  write_file(dir + "/b.safetensors", half1);
  write_file(dir + "/a.safetensors", half2);
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  auto indexed = nn::name_mapped_param_source(dir + "/model.safetensors.index.json", map);
  indexed->check(infos_of(ours));
  expect_reads_match(*indexed, ours, 3);
  fs::remove_all(dir);
}

TEST(NameMap, ErrorsNameTheTensor) {
  const nn::NameMap map = example_map();
  const auto ours = example_ours();
  const std::string dir = temp_dir("errors");
  auto expect_error = [&](const std::map<std::string, at::Tensor>& file, const std::vector<ParamInfo>& infos,
                          const std::string& needle) {
    write_file(dir + "/f.safetensors", file);
    auto source = nn::name_mapped_param_source(dir + "/f.safetensors", map);
    try {
      source->check(infos);
      FAIL() << "accepted; expected an error naming " << needle;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto theirs = map.to_theirs(ours);
  auto missing = theirs;
  missing.erase("layers.1.to_v.weight");
  expect_error(missing, infos_of(ours), "layers.1.to_v.weight");
  auto extra = theirs;
  extra["stray.weight"] = at::zeros({2});
  expect_error(extra, infos_of(ours), "stray.weight");
  auto wrong = theirs;
  wrong["layers.0.ln.bias"] = at::zeros({5});
  expect_error(wrong, infos_of(ours), "layers.0.ln.bias");
  auto rows = theirs;
  rows["layers.0.ab.weight"] = at::zeros({7, 3});  // pieces hold 6 rows
  expect_error(rows, infos_of(ours), "layers.0.ab.weight");
  // A split piece whose sibling is not a parameter.
  auto infos = infos_of(ours);
  infos.erase(std::remove_if(infos.begin(), infos.end(), [](const ParamInfo& p) { return p.name == "blocks.0.a.weight"; }),
              infos.end());
  auto no_a = theirs;
  expect_error(no_a, infos, "blocks.0.a.weight");
  // Reading before check is a programming error.
  write_file(dir + "/f.safetensors", theirs);
  auto unchecked = nn::name_mapped_param_source(dir + "/f.safetensors", map);
  at::Tensor out = at::empty({6});
  EXPECT_THROW(unchecked->read({"blocks.0.norm.weight", {6}, 0, 6}, 0, 6, out), std::logic_error);
  // A map that is not invertible on these names is refused.
  nn::NameMap bad;
  bad.rename("x.weight", "y.weight");
  EXPECT_THROW(bad.to_theirs({{"x.weight", at::zeros({1})}, {"y.weight", at::zeros({1})}}), std::invalid_argument);
  EXPECT_THROW(nn::NameMap().rename("a.*.w", "b.w"), std::invalid_argument);  // wildcards must match
  fs::remove_all(dir);
}

TEST(NameMap, IgnoredTensorsAreCountedInTheNotesAndNothingElseSlipsThrough) {
  nn::NameMap map = example_map();
  map.ignore("vision.**", "a tower this model does not run");
  map.ignore("head.weight", "the output head");
  const auto ours = example_ours();
  auto theirs = map.to_theirs(ours);
  theirs["vision.blocks.0.w"] = at::randn({3});
  theirs["vision.blocks.1.w"] = at::randn({3});
  theirs["head.weight"] = at::randn({2, 2});
  // Whole-tensor conversion drops them; their names have no counterpart of ours.
  const auto back = map.to_ours(theirs);
  ASSERT_EQ(back.size(), ours.size());
  for (const auto& [k, v] : ours) EXPECT_TRUE(back.at(k).equal(v)) << k;
  try {
    map.our_name("vision.blocks.0.w");
    FAIL() << "an ignored tensor got one of our names";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("a tower this model does not run"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nn::NameMap().ignore("x.**", ""), std::invalid_argument);  // a reason is required

  const std::string dir = temp_dir("ignore");
  write_file(dir + "/theirs.safetensors", theirs);
  auto source = nn::name_mapped_param_source(dir + "/theirs.safetensors", map);
  source->check(infos_of(ours));
  expect_reads_match(*source, ours, 3);
  const std::vector<std::string> notes = source->notes();
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0], dir + "/theirs.safetensors: 2 tensors 'vision.**' left unread (a tower this model does not run)");
  EXPECT_EQ(notes[1], dir + "/theirs.safetensors: 1 tensor 'head.weight' left unread (the output head)");
  // Anything the rules do not name is still refused, naming it.
  theirs["visionary.w"] = at::zeros({1});
  write_file(dir + "/theirs.safetensors", theirs);
  auto stray = nn::name_mapped_param_source(dir + "/theirs.safetensors", map);
  try {
    stray->check(infos_of(ours));
    FAIL() << "a tensor no rule names was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'visionary.w' is not a parameter of this model"), std::string::npos) << e.what();
  }
  // A folder resolves to the weights file inside it (io::SafetensorsSet).
  theirs.erase("visionary.w");
  fs::create_directories(dir + "/folder");
  write_file(dir + "/folder/diffusion_pytorch_model.safetensors", theirs);
  auto folder = nn::name_mapped_param_source(dir + "/folder", map);
  folder->check(infos_of(ours));
  expect_reads_match(*folder, ours, 2);
  EXPECT_EQ(folder->notes().at(0).rfind(dir + "/folder/diffusion_pytorch_model.safetensors: 2 tensors", 0), 0u);
  EXPECT_THROW(nn::name_mapped_param_source(dir, map), std::runtime_error);  // no weights file in it
  fs::remove_all(dir);
}

TEST(WanNameMap, OriginalToDiffusersRoundTripsAndLoadsIdentically) {
  const std::string dir = std::string(ZS_SOURCE_DIR) + "/tests/fixtures/wan21_dit_t2v";
  std::ifstream cfg(dir + "/config.json");
  const auto config = models::wan::WanDiTConfig::from_json(nlohmann::json::parse(cfg), dir);
  const auto original = read_all(dir + "/model.safetensors");
  const nn::NameMap map = models::wan::dit_diffusers_name_map();
  const auto diffusers = map.to_theirs(original);

  // WanTransformer3DModel's names, from its module tree (diffusers transformer_wan.py):
  // patch_embedding, condition_embedder.{time_embedder.linear_1/2, time_proj,
  // text_embedder.linear_1/2}, blocks.N.{scale_shift_table, attn1/attn2.{to_q, to_k, to_v,
  // to_out.0, norm_q, norm_k}, norm2 (affine), ffn.net.0.proj, ffn.net.2}, scale_shift_table,
  // proj_out.
  std::set<std::string> expected = {"patch_embedding.weight", "patch_embedding.bias", "scale_shift_table",
                                    "proj_out.weight", "proj_out.bias"};
  for (const std::string m : {"time_embedder.linear_1", "time_embedder.linear_2", "time_proj", "text_embedder.linear_1",
                              "text_embedder.linear_2"}) {
    expected.insert("condition_embedder." + m + ".weight");
    expected.insert("condition_embedder." + m + ".bias");
  }
  for (int64_t b = 0; b < config.num_layers; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    expected.insert(p + "scale_shift_table");
    for (const std::string a : {"attn1", "attn2"}) {
      for (const std::string l : {"to_q", "to_k", "to_v", "to_out.0"}) {
        expected.insert(p + a + "." + l + ".weight");
        expected.insert(p + a + "." + l + ".bias");
      }
      expected.insert(p + a + ".norm_q.weight");
      expected.insert(p + a + ".norm_k.weight");
    }
    for (const std::string l : {"norm2", "ffn.net.0.proj", "ffn.net.2"}) {
      expected.insert(p + l + ".weight");
      expected.insert(p + l + ".bias");
    }
  }
  std::set<std::string> got;
  for (const auto& [k, v] : diffusers) got.insert(k);
  EXPECT_EQ(got, expected);

  // original -> diffusers -> original, bitwise.
  const auto back = map.to_ours(diffusers);
  ASSERT_EQ(back.size(), original.size());
  for (const auto& [k, v] : original) EXPECT_TRUE(back.at(k).equal(v)) << k;

  // The model loads from a diffusers-named file identically, and computes the same.
  const std::string tmp = temp_dir("wan");
  write_file(tmp + "/diffusion_pytorch_model.safetensors", diffusers);
  auto source = nn::name_mapped_param_source(tmp + "/diffusion_pytorch_model.safetensors", map);
  models::wan::WanModel from_original(config), from_diffusers(config);
  std::vector<ParamInfo> infos;
  for (const auto& p : from_diffusers->named_parameters()) infos.push_back({p.key(), p.value().sizes().vec(), 0, p.value().numel()});
  source->check(infos);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : from_original->named_parameters()) p.value().copy_(original.at(p.key()));
    for (auto& p : from_diffusers->named_parameters()) {
      at::Tensor flat = at::empty({p.value().numel()}, at::kFloat);
      for (int r = 0; r < 3; ++r) {  // as three ranks would read their shards
        const int64_t b = flat.numel() * r / 3, e = flat.numel() * (r + 1) / 3;
        if (e > b) source->read({p.key(), p.value().sizes().vec(), 0, flat.numel()}, b, e, flat.narrow(0, b, e - b));
      }
      p.value().copy_(flat.view(p.value().sizes()));
      EXPECT_TRUE(p.value().equal(original.at(p.key()))) << p.key();
    }
  }
  const auto inputs = read_all(dir + "/inputs.safetensors");
  torch::NoGradGuard no_grad;
  const at::Tensor a = from_original->forward({inputs.at("x")}, inputs.at("t"), {inputs.at("context")})[0];
  const at::Tensor b = from_diffusers->forward({inputs.at("x")}, inputs.at("t"), {inputs.at("context")})[0];
  EXPECT_TRUE(a.equal(b));
  fs::remove_all(tmp);
}

TEST(WanNameMap, VaeOriginalToDiffusersRoundTripsAndLoadsIdentically) {
  using namespace models::wan;
  // The released layout's names, checked against diffusers' conversion script
  // (scripts/convert_wan_to_diffusers.py convert_vae) for a sample of each rule.
  const nn::NameMap released = vae_diffusers_name_map(wan21_vae());
  const std::map<std::string, std::string> samples = {
      {"conv1.weight", "quant_conv.weight"},
      {"conv2.bias", "post_quant_conv.bias"},
      {"encoder.conv1.weight", "encoder.conv_in.weight"},
      {"encoder.downsamples.3.residual.0.gamma", "encoder.down_blocks.3.norm1.gamma"},
      {"encoder.downsamples.3.shortcut.weight", "encoder.down_blocks.3.conv_shortcut.weight"},
      {"encoder.downsamples.5.time_conv.bias", "encoder.down_blocks.5.time_conv.bias"},
      {"encoder.downsamples.2.resample.1.weight", "encoder.down_blocks.2.resample.1.weight"},
      {"encoder.middle.1.to_qkv.weight", "encoder.mid_block.attentions.0.to_qkv.weight"},
      {"encoder.middle.2.residual.6.weight", "encoder.mid_block.resnets.1.conv2.weight"},
      {"encoder.head.0.gamma", "encoder.norm_out.gamma"},
      {"decoder.head.2.bias", "decoder.conv_out.bias"},
      {"decoder.upsamples.2.residual.3.gamma", "decoder.up_blocks.0.resnets.2.norm2.gamma"},
      {"decoder.upsamples.3.time_conv.weight", "decoder.up_blocks.0.upsamplers.0.time_conv.weight"},
      {"decoder.upsamples.4.shortcut.weight", "decoder.up_blocks.1.resnets.0.conv_shortcut.weight"},
      {"decoder.upsamples.11.resample.1.weight", "decoder.up_blocks.2.upsamplers.0.resample.1.weight"},
      {"decoder.upsamples.14.residual.2.bias", "decoder.up_blocks.3.resnets.2.conv1.bias"},
  };
  for (const auto& [ours, theirs] : samples) {
    EXPECT_EQ(released.their_name(ours), theirs);
    EXPECT_EQ(released.our_name(theirs), ours);
  }

  const std::string dir = std::string(ZS_SOURCE_DIR) + "/tests/fixtures/wan21_vae_encode";
  std::ifstream cfg(dir + "/config.json");
  const auto config = WanVaeConfig::from_json(nlohmann::json::parse(cfg), dir);
  const nn::NameMap map = vae_diffusers_name_map(config);
  const auto original = read_all(dir + "/model.safetensors");
  const auto diffusers = map.to_theirs(original);
  for (const auto& [k, v] : diffusers) {
    EXPECT_TRUE(k.find("downsamples") == std::string::npos && k.find("upsamples.") == std::string::npos &&
                k.find("residual") == std::string::npos && k.find("middle") == std::string::npos)
        << k << " kept an original name";
  }
  const auto back = map.to_ours(diffusers);
  ASSERT_EQ(back.size(), original.size());
  for (const auto& [k, v] : original) EXPECT_TRUE(back.at(k).equal(v)) << k;

  const std::string tmp = temp_dir("wan_vae");
  write_file(tmp + "/diffusion_pytorch_model.safetensors", diffusers);
  auto source = nn::name_mapped_param_source(tmp + "/diffusion_pytorch_model.safetensors", map);
  WanVae model(config);
  std::vector<ParamInfo> infos;
  for (const auto& p : model->named_parameters()) infos.push_back({p.key(), p.value().sizes().vec(), 0, p.value().numel()});
  source->check(infos);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    at::Tensor flat = at::empty({p.value().numel()}, at::kFloat);
    source->read({p.key(), p.value().sizes().vec(), 0, flat.numel()}, 0, flat.numel(), flat);
    EXPECT_TRUE(flat.equal(original.at(p.key()).reshape({-1}))) << p.key();
  }
  fs::remove_all(tmp);
}
