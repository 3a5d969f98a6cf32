// torch.save'd state dicts (the Wan 2.1 VAE and umT5 release format) as parameter sources: files
// written by Debian's PyTorch from the released names of a reference case, read range by range
// through the memory map, equal to the safetensors source of the same weights; refusals named.
#include "io/safetensors.h"
#include "io/torch_pth.h"
#include "support/spawn.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

const std::string kCase = std::string(ZS_SOURCE_DIR) + "/tests/fixtures/wan21_vae_encode/model.safetensors";

// torch.save of the case's weights (bf16 when asked, as models_t5_umt5-xxl-enc-bf16.pth is), through
// the project's independent safetensors reader.
std::string save_pth(const std::string& dir, const std::string& dtype, const std::string& extra = "") {
  const std::string out = dir + "/weights_" + dtype + ".pth";
  const std::string script =
      "import sys, torch; sys.path.insert(0, '" + std::string(ZS_SOURCE_DIR) + "/tests/support'); "
      "import safetensors_io as s; d = s.read_file('" + kCase + "'); "
      "sd = {k: v.to(torch." + dtype + ") for k, v in d.items()}; " + extra +
      "torch.save(sd, '" + out + "')";
  std::string output;
  EXPECT_EQ(run_command("/usr/bin/python3 -c \"" + script + "\"", &output), 0) << output;
  return out;
}

std::vector<ParamInfo> params_of(const io::SafetensorsFile& f) {
  std::vector<ParamInfo> params;
  for (const auto& e : f.entries()) params.push_back({e.name, e.shape, 0, e.numel()});
  return params;
}

}  // namespace

TEST(TorchPth, ReadsEveryRangeLikeTheSafetensorsOfTheSameWeights) {
  const std::string dir = make_temp_dir("pth");
  const io::SafetensorsFile reference(kCase);
  const auto params = params_of(reference);
  ASSERT_GT(params.size(), 10u);
  for (const std::string dtype : {"float32", "bfloat16"}) {
    const std::string path = save_pth(dir, dtype);
    ASSERT_TRUE(io::is_torch_save_file(path));
    auto source = io::checkpoint_param_source(path);  // picked by content
    source->check(params);
    for (const auto& p : params) {
      const at::Tensor whole = reference.read(p.name).to(at::kFloat).reshape({-1});
      const at::Tensor want = dtype == "bfloat16" ? whole.to(at::kBFloat16).to(at::kFloat) : whole;
      // Three ranges, as three ranks of a shard would ask for them.
      const int64_t n = p.numel, cuts[4] = {0, n / 3, 2 * n / 3, n};
      for (int r = 0; r < 3; ++r) {
        at::Tensor out = at::empty({cuts[r + 1] - cuts[r]}, at::kFloat);
        source->read(p, cuts[r], cuts[r + 1], out);
        EXPECT_TRUE(at::equal(out, want.narrow(0, cuts[r], cuts[r + 1] - cuts[r]))) << dtype << " " << p.name;
      }
    }
  }
  EXPECT_FALSE(io::is_torch_save_file(kCase));
}

TEST(TorchPth, RefusesWhatIsNotTheModelsStateDict) {
  const std::string dir = make_temp_dir("pth_bad");
  const auto params = params_of(io::SafetensorsFile(kCase));
  auto message = [&](const std::string& path) {
    try {
      io::torch_pth_param_source(path)->check(params);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string missing = save_pth(dir, "float32", "sd.pop(sorted(sd)[0]); ");
  EXPECT_NE(message(missing).find(missing + ": has no tensor '"), std::string::npos) << message(missing);
  const std::string extra = save_pth(dir, "float32", "sd['head.extra'] = torch.zeros(2); ");
  EXPECT_NE(message(extra).find("tensor 'head.extra' is not a parameter of this model"), std::string::npos) << message(extra);
  const std::string wrapped = save_pth(dir, "float32", "sd = {'state_dict': sd, 'epoch': torch.zeros(1)}; ");
  EXPECT_NE(message(wrapped).find(wrapped + ": the state dict has an entry that is not name -> tensor"), std::string::npos)
      << message(wrapped);
  const std::string listed = save_pth(dir, "float32", "sd = [sd]; ");
  EXPECT_NE(message(listed).find(listed + ": its pickle cannot be read as a state dict"), std::string::npos)
      << message(listed);
  const std::string text = dir + "/not_a_zip.pth";
  std::ofstream(text) << "hello";
  EXPECT_NE(message(text).find(text + ": not a torch.save zip archive"), std::string::npos) << message(text);
}

// write_torch_save (what seed-weights writes Wan's towers with): torch.load reads every tensor
// with its dtype, shape and values, and so does the in-place reader, each tensor a 64-byte aligned
// view of the file; a writer that fails midway leaves no file behind.
TEST(TorchPth, WrittenAsTorchSaveDoesAndReadsInPlace) {
  const std::string dir = make_temp_dir("pth_write");
  const std::vector<std::vector<io::TensorEntry>> groups = {
      {{"blocks.0.attn.q.weight", at::kBFloat16, {3, 5}}, {"blocks.0.attn.k.weight", at::kBFloat16, {3, 5}}},
      {{"norm.weight", at::kFloat, {7}}},
      {{"head.conv.weight", at::kBFloat16, {2, 3, 2}}}};
  // Quarter steps: exact in bf16, so every reader must give them back exactly.
  auto value = [](size_t g, size_t i, int64_t numel) {
    return at::arange(numel, at::kFloat).mul_(0.25).add_(static_cast<double>(10 * g + i)).sub_(2.0);
  };
  int produced = 0;
  const std::string path = dir + "/models_t5_umt5-xxl-enc-bf16.pth";
  const uint64_t bytes = io::write_torch_save(path, groups, [&](size_t g) {
    ++produced;
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < groups[g].size(); ++i) {
      out.push_back(value(g, i, groups[g][i].numel()).reshape(groups[g][i].shape));
    }
    return out;
  });
  EXPECT_EQ(produced, 3) << "one call per group";
  EXPECT_EQ(bytes, static_cast<uint64_t>(std::filesystem::file_size(path)));
  ASSERT_TRUE(io::is_torch_save_file(path));

  // PyTorch's own torch.load: names, dtypes, shapes and values.
  std::string out;
  ASSERT_EQ(run_command("/usr/bin/python3 -c \"import torch; sd = torch.load('" + path +
                            "'); print(type(sd).__name__); [print(k, str(v.dtype), list(v.shape), "
                            "v.float().flatten().tolist()) for k, v in sorted(sd.items())]\"",
                        &out),
            0)
      << out;
  std::vector<ParamInfo> params;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const io::TensorEntry& e = groups[g][i];
      params.push_back({e.name, e.shape, 0, e.numel()});
      std::string line = e.name + (e.dtype == at::kFloat ? " torch.float32 [" : " torch.bfloat16 [");
      for (size_t d = 0; d < e.shape.size(); ++d) line += (d ? ", " : "") + std::to_string(e.shape[d]);
      line += "] [";
      const at::Tensor v = value(g, i, e.numel());
      for (int64_t k = 0; k < v.numel(); ++k) {
        // As Python prints a float: -2.0, 0.25, 12.75.
        const double x = v[k].item<double>();
        char buf[32];
        std::snprintf(buf, sizeof buf, x == static_cast<double>(static_cast<int64_t>(x)) ? "%s%.1f" : "%s%g",
                      k ? ", " : "", x);
        line += buf;
      }
      EXPECT_NE(out.find(line + "]\n"), std::string::npos) << line << "\nin\n" << out;
    }
  }
  EXPECT_EQ(out.rfind("dict\n", 0), 0u) << out;

  // The in-place reader: every tensor whole, aligned, in its dtype; values exact.
  auto source = io::checkpoint_param_source(path);
  source->check(params);
  size_t k = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i, ++k) {
      const ParamInfo& p = params[k];
      const ParamLocation where = source->locate(p);
      EXPECT_EQ(where.file, path);
      EXPECT_TRUE(where.whole) << p.name;
      EXPECT_EQ(where.offset % 64, 0u) << p.name;
      EXPECT_EQ(where.dtype, groups[g][i].dtype) << p.name;
      at::Tensor got = at::empty({p.numel}, at::kFloat);
      source->read(p, 0, p.numel, got);
      EXPECT_TRUE(at::equal(got, value(g, i, p.numel))) << p.name;
    }
  }

  // A group that cannot be produced: nothing at the path, no temporary left.
  const std::string failed = dir + "/Wan2.1_VAE.pth";
  EXPECT_THROW(io::write_torch_save(failed, groups,
                                    [&](size_t g) -> std::vector<at::Tensor> {
                                      if (g == 1) throw std::runtime_error("seeding failed");
                                      return {value(0, 0, 15).reshape({3, 5}), value(0, 1, 15).reshape({3, 5})};
                                    }),
               std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(failed));
  EXPECT_FALSE(std::filesystem::exists(failed + ".tmp"));
}
