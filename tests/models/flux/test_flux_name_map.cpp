// FLUX.1 original (BFL) <-> diffusers FluxTransformer2DModel names: the diffusers key set, the
// fused-tensor pieces and the final layer's swapped halves, and the round trip bitwise.
#include "io/safetensors.h"
#include "models/flux/flux1_name_map.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

using namespace zeroshard;
using namespace zeroshard::models::flux;

namespace {

void write_file(const std::string& path, const std::map<std::string, at::Tensor>& tensors) {
  std::vector<io::TensorEntry> entries;
  for (const auto& [k, v] : tensors) entries.push_back({k, v.scalar_type(), v.sizes().vec()});
  io::SafetensorsWriter w(path, entries);
  for (const auto& [k, v] : tensors) w.write(k, v);
  w.finish();
}

std::map<std::string, at::Tensor> read_all(const std::string& path) {
  const io::SafetensorsFile file(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& e : file.entries()) out[e.name] = file.read(e.name);
  return out;
}

void check_case(const std::string& name) {
  const std::string dir = std::string(ZS_SOURCE_DIR) + "/tests/fixtures/" + name;
  std::ifstream cfg(dir + "/config.json");
  const auto c = Flux1Config::from_json(nlohmann::json::parse(cfg), dir);
  const auto original = read_all(dir + "/model.safetensors");
  const nn::NameMap map = flux1_diffusers_name_map(c);
  const auto diffusers = map.to_theirs(original);

  // FluxTransformer2DModel's module tree (diffusers transformer_flux.py).
  std::set<std::string> expected;
  auto wb = [&](const std::string& p, bool bias = true) {
    expected.insert(p + ".weight");
    if (bias) expected.insert(p + ".bias");
  };
  wb("x_embedder");
  wb("context_embedder");
  wb("proj_out");
  wb("norm_out.linear");
  for (const std::string e : {"timestep_embedder", "text_embedder", "guidance_embedder"}) {
    if (e == "guidance_embedder" && !c.guidance_embed) continue;
    wb("time_text_embed." + e + ".linear_1");
    wb("time_text_embed." + e + ".linear_2");
  }
  for (int64_t b = 0; b < c.depth; ++b) {
    const std::string p = "transformer_blocks." + std::to_string(b) + ".";
    for (const std::string l : {"norm1.linear", "norm1_context.linear", "attn.to_out.0", "attn.to_add_out",
                                "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj", "ff_context.net.2"}) {
      wb(p + l);
    }
    for (const std::string l : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"}) {
      wb(p + "attn." + l, c.qkv_bias);
    }
    for (const std::string l : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"}) expected.insert(p + "attn." + l + ".weight");
  }
  for (int64_t b = 0; b < c.depth_single_blocks; ++b) {
    const std::string p = "single_transformer_blocks." + std::to_string(b) + ".";
    for (const std::string l : {"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp", "proj_out", "norm.linear"}) wb(p + l);
    expected.insert(p + "attn.norm_q.weight");
    expected.insert(p + "attn.norm_k.weight");
  }
  std::set<std::string> got;
  for (const auto& [k, v] : diffusers) got.insert(k);
  EXPECT_EQ(got, expected) << name;

  const int64_t d = c.hidden_size;
  // Pieces of the fused tensors, and the final layer's halves: BFL (shift, scale) = diffusers (scale, shift).
  EXPECT_TRUE(diffusers.at("transformer_blocks.0.attn.to_k.weight")
                  .equal(original.at("double_blocks.0.img_attn.qkv.weight").narrow(0, d, d)));
  EXPECT_TRUE(diffusers.at("transformer_blocks.0.attn.add_v_proj.weight")
                  .equal(original.at("double_blocks.0.txt_attn.qkv.weight").narrow(0, 2 * d, d)));
  EXPECT_TRUE(diffusers.at("single_transformer_blocks.0.proj_mlp.bias")
                  .equal(original.at("single_blocks.0.linear1.bias").narrow(0, 3 * d, c.mlp_hidden())));
  EXPECT_TRUE(diffusers.at("norm_out.linear.weight").narrow(0, 0, d)
                  .equal(original.at("final_layer.adaLN_modulation.1.weight").narrow(0, d, d)));
  EXPECT_TRUE(diffusers.at("norm_out.linear.bias").narrow(0, d, d)
                  .equal(original.at("final_layer.adaLN_modulation.1.bias").narrow(0, 0, d)));

  // original -> diffusers -> original, bitwise.
  const auto back = map.to_ours(diffusers);
  ASSERT_EQ(back.size(), original.size());
  for (const auto& [k, v] : original) EXPECT_TRUE(back.at(k).equal(v)) << name << ": " << k;
}

}  // namespace

TEST(FluxNameMap, OriginalToDiffusersRoundTripsBitwise) {
  check_case("flux1_dit");    // dev-like (guidance_in), qkv bias
  check_case("flux1_dit_b");  // schnell-like (no guidance_in), no qkv bias, mlp_ratio 2.5
}

TEST(FluxNameMap, ModelLoadsThroughTheMapFromDiffusersNames) {
  // A diffusers-named file served to a model built with the original names: every parameter found,
  // bytes equal to the original's.
  const std::string dir = std::string(ZS_SOURCE_DIR) + "/tests/fixtures/flux1_dit";
  std::ifstream cfg(dir + "/config.json");
  const auto c = Flux1Config::from_json(nlohmann::json::parse(cfg), dir);
  const auto original = read_all(dir + "/model.safetensors");
  const auto map = flux1_diffusers_name_map(c);
  const std::string path = ::testing::TempDir() + "/flux1_diffusers.safetensors";
  write_file(path, map.to_theirs(original));
  auto source = nn::name_mapped_param_source(path, map);
  Flux1DiT model(c);
  std::vector<ParamInfo> infos;
  for (const auto& p : model->named_parameters()) {
    infos.push_back({p.key(), p.value().sizes().vec(), 0, p.value().numel()});
  }
  source->check(infos);
  for (const auto& info : infos) {
    at::Tensor got = at::empty({info.numel}, at::kFloat);
    source->read(info, 0, info.numel, got);
    EXPECT_TRUE(got.equal(original.at(info.name).reshape({-1}))) << info.name;
  }
}
