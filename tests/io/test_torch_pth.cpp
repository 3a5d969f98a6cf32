// torch.save'd state dicts (the Wan 2.1 VAE and umT5 release format) as parameter sources: files
// written by Debian's PyTorch from the released names of a reference case, read range by range
// through the memory map, equal to the safetensors source of the same weights; refusals named.
#include "io/safetensors.h"
#include "io/torch_pth.h"
#include "support/spawn.h"

#include <gtest/gtest.h>

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
