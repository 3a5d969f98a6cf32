// The T5 family: published parameter counts on the deferred model, the relative-position
// buckets against the reference cases' table, Wan's trim-then-zero-pad, masks, and the
// transformers name map (round trip, loading a transformers-named file).
#include "io/safetensors.h"
#include "models/t5/t5.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

using namespace zeroshard;
using namespace zeroshard::models::t5;

namespace {

const std::string kFixtures = std::string(ZS_SOURCE_DIR) + "/tests/fixtures/";

std::map<std::string, at::Tensor> read_all(const std::string& path) {
  const io::SafetensorsFile f(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& e : f.entries()) out[e.name] = f.read(e.name);
  return out;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST(T5, PublishedCountsOnTheDeferredModel) {
  // umT5-XXL encoder (Wan 2.1's models_t5_umt5-xxl-enc-bf16.pth), arithmetic from
  // wan/modules/t5.py umt5_xxl(): 256384*4096 + 24*(4*4096^2 + 3*4096*10240 + 2*4096 + 32*64) + 4096.
  EXPECT_EQ(umt5_xxl().num_params(), 5680910336LL);
  // T5 v1.1 XXL encoder = FLUX.1-dev text_encoder_2: its model.safetensors.index.json total_size
  // is 9,524,621,312 bytes of bf16 = 4,762,310,656 parameters.
  EXPECT_EQ(t5_v1_1_xxl().num_params(), 4762310656LL);
  nn::DeferredInit deferred;
  T5Encoder m(umt5_xxl());
  for (const auto& p : m->parameters()) EXPECT_TRUE(nn::is_deferred(p));
}

TEST(T5, RelativeBucketsMatchTheReferenceTable) {
  // CASE.md of wan21_umt5_encoder / t5_encoder (32 buckets, max distance 128): d < 8 -> d,
  // 8-11 -> 8, 12-15 -> 9, 16-22 -> 10, 23-31 -> 11, 32-45 -> 12, 46-63 -> 13, 64-90 -> 14,
  // >= 91 -> 15; +16 when j > i.
  const at::Tensor b = relative_position_buckets(1, 200, 32, 128);  // row i = 0: d = j
  auto expect = [](int64_t d) -> int64_t {
    if (d < 8) return d;
    const int64_t edges[] = {12, 16, 23, 32, 46, 64, 91};
    int64_t bucket = 8;
    for (int64_t e : edges) bucket += d >= e ? 1 : 0;
    return bucket;
  };
  for (int64_t j = 0; j < 200; ++j) {
    EXPECT_EQ(b[0][j].item<int64_t>(), expect(j) + (j > 0 ? 16 : 0)) << "d = " << j;
  }
  const at::Tensor back = relative_position_buckets(200, 1, 32, 128);  // j = 0: d = i, j < i
  for (int64_t i = 0; i < 200; ++i) EXPECT_EQ(back[i][0].item<int64_t>(), expect(i)) << "d = " << i;
}

TEST(T5, TrimThenZeroPadKeepsEachPromptsRealTokens) {
  const at::Tensor states = at::randn({2, 5, 3}, at::kDouble).requires_grad_(true);
  const at::Tensor mask = at::tensor({1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, at::kLong).view({2, 5});
  const at::Tensor out = trim_and_zero_pad(states, mask, 7);
  ASSERT_EQ(out.sizes(), at::IntArrayRef({2, 7, 3}));
  EXPECT_TRUE(out[0].narrow(0, 0, 3).equal(states[0].narrow(0, 0, 3)));
  EXPECT_EQ(out[0].narrow(0, 3, 4).abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(out[1].narrow(0, 0, 5).equal(states[1]));
  EXPECT_EQ(out[1].narrow(0, 5, 2).abs().sum().item<double>(), 0.0);
  out.sum().backward();  // the padded-out rows get no gradient
  EXPECT_EQ(states.grad()[0].narrow(0, 3, 2).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(states.grad()[0].narrow(0, 0, 3).sum().item<double>(), 9.0);
  const auto trimmed = trim_to_lengths(states, mask);
  ASSERT_EQ(trimmed.size(), 2u);
  EXPECT_EQ(trimmed[0].size(0), 3);
  EXPECT_EQ(trimmed[1].size(0), 5);
  EXPECT_THROW(trim_and_zero_pad(states, mask, 4), std::invalid_argument);
}

TEST(T5, MaskedKeysAreIgnoredAndNoMaskMeansEveryPosition) {
  T5Config c;
  c.vocab_size = 50;
  c.dim = 16;
  c.dim_attn = 16;
  c.num_heads = 2;
  c.dim_ffn = 24;
  c.num_layers = 2;
  for (bool shared : {false, true}) {
    c.shared_pos = shared;
    T5Encoder m(c);
    m->reset_parameters(7);
    m->eval();
    torch::NoGradGuard no_grad;
    at::Tensor ids = at::randint(2, 50, {1, 6}, at::kLong);
    const at::Tensor mask = at::tensor({1, 1, 1, 1, 0, 0}, at::kLong).view({1, 6});
    const at::Tensor a = m->forward(ids, mask);
    ids[0][4] = 1;  // a padded position's token: invisible to the real rows
    ids[0][5] = 3;
    const at::Tensor b = m->forward(ids, mask);
    EXPECT_TRUE(a.narrow(1, 0, 4).allclose(b.narrow(1, 0, 4), 0, 0)) << "shared_pos " << shared;
    EXPECT_FALSE(a.narrow(1, 4, 2).equal(b.narrow(1, 4, 2)));  // padded queries are computed
    const at::Tensor all = at::ones({1, 6}, at::kLong);
    EXPECT_TRUE(m->forward(ids).equal(m->forward(ids, all)));
  }
}

TEST(T5, TransformersNamesRoundTripAndLoadThroughTheNameMap) {
  const std::string dir = kFixtures + "t5_encoder";
  const T5Config c = T5Config::from_wan_json(read_json(dir + "/config.json"), dir);
  const nn::NameMap map = hf_t5_name_map(c.shared_pos);
  const auto theirs = read_all(dir + "/model.safetensors");  // transformers names
  const auto ours = map.to_ours(theirs);
  T5Encoder m(c);
  std::set<std::string> names;
  for (const auto& p : m->named_parameters()) names.insert(p.key());
  std::set<std::string> got;
  for (const auto& [k, v] : ours) got.insert(k);
  EXPECT_EQ(got, names);
  const auto back = map.to_theirs(ours);
  ASSERT_EQ(back.size(), theirs.size());
  for (const auto& [k, v] : theirs) EXPECT_TRUE(back.at(k).equal(v)) << k;
  // The Wan names of the case's `_wan_state_dict_names` are the model's own.
  const auto wan = read_json(dir + "/config.json")["_wan_state_dict_names"];
  for (auto it = wan.begin(); it != wan.end(); ++it) EXPECT_EQ(map.our_name(it.key()), it.value().get<std::string>());

  // Loading through the source gives the file's values, range by range.
  auto source = nn::name_mapped_param_source(dir + "/model.safetensors", map);
  std::vector<ParamInfo> infos;
  for (const auto& p : m->named_parameters()) infos.push_back({p.key(), p.value().sizes().vec(), 0, p.value().numel()});
  source->check(infos);
  for (const auto& info : infos) {
    at::Tensor out = at::empty({info.numel}, at::kFloat);
    const int64_t cut = info.numel / 3;
    source->read(info, 0, cut, out.narrow(0, 0, cut));
    source->read(info, cut, info.numel, out.narrow(0, cut, info.numel - cut));
    EXPECT_TRUE(out.equal(ours.at(info.name).reshape({-1}))) << info.name;
  }
  // A umT5 file under transformers names (a table per layer) maps its tables to the blocks.
  const nn::NameMap umt5 = hf_t5_name_map(false);
  EXPECT_EQ(umt5.our_name("encoder.block.3.layer.0.SelfAttention.relative_attention_bias.weight"),
            "blocks.3.pos_embedding.embedding.weight");
}

TEST(T5, ConfigErrorsNameTheField) {
  nlohmann::json j = {{"vocab_size", 10}, {"dim", 8}, {"dim_attn", 9}, {"dim_ffn", 8}, {"num_heads", 2},
                      {"encoder_layers", 1}, {"num_buckets", 32}, {"shared_pos", false}};
  try {
    T5Config::from_wan_json(j, "cfg");
    FAIL() << "dim_attn 9 with 2 heads accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dim_attn"), std::string::npos) << e.what();
  }
  j.erase("encoder_layers");
  j["dim_attn"] = 8;
  EXPECT_THROW(T5Config::from_wan_json(j, "cfg"), std::invalid_argument);
}

TEST(T5, RunsWithBf16Parameters) {
  T5Config c;
  c.vocab_size = 50;
  c.dim = 16;
  c.dim_attn = 16;
  c.num_heads = 2;
  c.dim_ffn = 24;
  c.num_layers = 2;
  T5Encoder m(c);
  m->reset_parameters(3);
  torch::NoGradGuard no_grad;
  const at::Tensor ids = at::randint(2, 50, {2, 7}, at::kLong);
  const at::Tensor mask = at::tensor({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0}, at::kLong).view({2, 7});
  const at::Tensor ref = m->forward(ids, mask);
  m->to(at::kBFloat16);
  const at::Tensor got = m->forward(ids, mask);
  EXPECT_EQ(got.scalar_type(), at::kBFloat16);
  EXPECT_LT((got.to(at::kFloat) - ref).abs().max().item<double>() / ref.abs().max().item<double>(), 0.05);
}
