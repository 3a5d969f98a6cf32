// wan.dit_from: the released DiT file — diffusion_pytorch_model.safetensors or an index + shards,
// in Wan's original names or the diffusers layout — as the DiT's initial values. Files written
// here from a model with seeded random values load bitwise (bf16 files: their values) into the
// deferred DiT under ZeRO-3; a file with a missing, unexpected or mis-shaped tensor fails naming
// the file and the tensor.
#include "io/safetensors.h"
#include "models/wan/data.h"
#include "models/wan/dit.h"
#include "nn/init.h"
#include "support/spawn.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

using namespace zeroshard;
using namespace zeroshard::models::wan;
using zeroshard::testing::make_temp_dir;
namespace fs = std::filesystem;

namespace {

WanDiTConfig small_dit() {
  std::ifstream in(std::string(ZS_SOURCE_DIR) + "/tests/fixtures/wan21_dit_t2v/config.json");
  return WanDiTConfig::from_json(nlohmann::json::parse(in), "wan21_dit_t2v");
}

// Every parameter of the DiT (our = original names), random and seeded by name.
std::map<std::string, at::Tensor> seeded_values() {
  WanModel m(small_dit());
  std::map<std::string, at::Tensor> out;
  for (const auto& item : m->named_parameters()) {
    auto gen = nn::generator_for(11, item.key());
    out[item.key()] = at::randn(item.value().sizes(), gen, at::kFloat);
  }
  return out;
}

// One file, or `shards` files plus `<path>.index.json` (path is then the index's path).
std::string write_dit(const std::string& dir, const std::map<std::string, at::Tensor>& tensors, at::ScalarType dtype,
                      int shards) {
  if (shards == 1) {
    const std::string path = dir + "/diffusion_pytorch_model.safetensors";
    std::vector<io::TensorEntry> entries;
    for (const auto& [k, v] : tensors) entries.push_back({k, dtype, v.sizes().vec()});
    io::SafetensorsWriter w(path, entries);
    for (const auto& [k, v] : tensors) w.write(k, v);
    w.finish();
    return path;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<std::map<std::string, at::Tensor>> parts(static_cast<size_t>(shards));
  size_t i = 0;
  for (const auto& [k, v] : tensors) parts[i++ % parts.size()][k] = v;
  for (int s = 0; s < shards; ++s) {
    char name[80];
    std::snprintf(name, sizeof(name), "diffusion_pytorch_model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<io::TensorEntry> entries;
    for (const auto& [k, v] : parts[static_cast<size_t>(s)]) entries.push_back({k, dtype, v.sizes().vec()});
    io::SafetensorsWriter w(dir + "/" + name, entries);
    for (const auto& [k, v] : parts[static_cast<size_t>(s)]) {
      w.write(k, v);
      weight_map[k] = name;
    }
    w.finish();
  }
  const std::string index = dir + "/diffusion_pytorch_model.safetensors.index.json";
  std::ofstream(index) << nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}}.dump(1);
  return index;
}

// The deferred DiT materialized under ZeRO-3 from the file: its parameters, whole.
std::map<std::string, at::Tensor> load(const std::string& path) {
  WanModel m{nullptr};
  {
    nn::DeferredInit deferred;
    m = WanModel(small_dit());
  }
  ShardOptions o(Strategy::OptimGradsParams);
  o.param_source = dit_file_source(path);
  auto sharded = fully_shard(m.ptr(), make_local_communicator(), o);
  std::map<std::string, at::Tensor> out;
  sharded->for_each_full_parameter([&](const std::string& name, const at::Tensor& t) { out[name] = t.clone(); });
  return out;
}

std::string load_error(const std::string& path) {
  try {
    load(path);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(loaded without an error)";
}

}  // namespace

TEST(WanDitFrom, OriginalAndDiffusersFilesAndIndexesLoadBitwise) {
  const auto ours = seeded_values();
  const auto theirs = dit_diffusers_name_map().to_theirs(ours);
  ASSERT_EQ(theirs.count("scale_shift_table"), 1u);  // the layouts really differ
  ASSERT_EQ(theirs.count("head.modulation"), 0u);
  int cases = 0;
  for (const bool diffusers : {false, true}) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      for (const int shards : {1, 3}) {
        const std::string dir = make_temp_dir("wan_dit_from");
        const std::string path = write_dit(dir, diffusers ? theirs : ours, dtype, shards);
        const auto loaded = load(path);
        ASSERT_EQ(loaded.size(), ours.size());
        for (const auto& [name, want] : ours) {
          const at::Tensor expect = dtype == at::kFloat ? want : want.to(at::kBFloat16).to(at::kFloat);
          EXPECT_TRUE(loaded.at(name).equal(expect)) << name << " from " << path;
        }
        ++cases;
        fs::remove_all(dir);
      }
    }
  }
  EXPECT_EQ(cases, 8);
}

TEST(WanDitFrom, ErrorsNameTheFileAndTheTensor) {
  const auto ours = seeded_values();
  const std::string dir = make_temp_dir("wan_dit_from_bad");
  {
    auto missing = ours;
    missing.erase("head.modulation");
    fs::create_directories(dir + "/missing");
    const std::string path = write_dit(dir + "/missing", missing, at::kFloat, 1);
    const std::string e = load_error(path);
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find("has no tensor 'head.modulation'"), std::string::npos) << e;
  }
  {
    auto extra = dit_diffusers_name_map().to_theirs(ours);
    extra["blocks.0.attn1.to_x.weight"] = at::zeros({2, 2});
    fs::create_directories(dir + "/extra");
    const std::string path = write_dit(dir + "/extra", extra, at::kBFloat16, 2);
    const std::string e = load_error(path);
    EXPECT_NE(e.find("diffusion_pytorch_model-0000"), std::string::npos) << e;
    EXPECT_NE(e.find("'blocks.0.attn1.to_x.weight' is not a parameter of this model"), std::string::npos) << e;
  }
  {
    auto shaped = ours;
    shaped["patch_embedding.bias"] = at::zeros({shaped["patch_embedding.bias"].numel() + 1});
    fs::create_directories(dir + "/shaped");
    const std::string path = write_dit(dir + "/shaped", shaped, at::kFloat, 1);
    const std::string e = load_error(path);
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find("tensor 'patch_embedding.bias' has shape"), std::string::npos) << e;
  }
  EXPECT_NE(load_error(dir + "/nothing.safetensors").find("wan.dit_from: file '" + dir + "/nothing.safetensors' does not exist"),
            std::string::npos);
  fs::remove_all(dir);
}
