// FrozenStorage::File's reading of converted parameters (shard/file_backed.h) and its converted
// copy (shard/converted_copy.h), on a fused projection concatenated from pieces that lie in two
// files of an index (as diffusers' to_q / to_k / to_v of a FLUX.1 block may): converted through a
// bounded scratch it is bitwise the whole read rounded once; a change to any file it reads (not
// only the first piece's) is named before the values are used; the copy holds the same bits in
// place, is reused while its sources are unchanged, and is rewritten when one changes.
#include "io/safetensors.h"
#include "nn/name_map.h"
#include "shard/converted_copy.h"
#include "shard/file_backed.h"
#include "shard/flat_param.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <utime.h>

#include <filesystem>
#include <fstream>

using namespace zeroshard;
namespace fs = std::filesystem;

namespace {

// Pieces larger than the conversion's scratch, so its chunks cross the pieces' boundaries.
constexpr int64_t kRows = 700, kCols = 1500;

struct Folder {
  std::string dir, index, first_file, second_file;
  at::Tensor q, k, v;  // float32, as stored
};

Folder make_folder(const std::string& name) {
  Folder f;
  f.dir = (fs::temp_directory_path() / ("zs_file_backed_" + name + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(f.dir);
  fs::create_directories(f.dir);
  at::manual_seed(7);
  f.q = at::randn({kRows, kCols});
  f.k = at::randn({kRows, kCols});
  f.v = at::randn({kRows, kCols});
  auto write = [](const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
    std::vector<io::TensorEntry> entries;
    for (const auto& [n, t] : tensors) entries.push_back({n, at::kFloat, t.sizes().vec()});
    io::SafetensorsWriter w(path, entries);
    for (const auto& [n, t] : tensors) w.write(n, t);
    w.finish();
  };
  f.first_file = f.dir + "/model-00001-of-00002.safetensors";
  f.second_file = f.dir + "/model-00002-of-00002.safetensors";
  write(f.first_file, {{"block.to_q.weight", f.q}});
  write(f.second_file, {{"block.to_k.weight", f.k}, {"block.to_v.weight", f.v}});
  nlohmann::json index;
  index["weight_map"]["block.to_q.weight"] = "model-00001-of-00002.safetensors";
  index["weight_map"]["block.to_k.weight"] = "model-00002-of-00002.safetensors";
  index["weight_map"]["block.to_v.weight"] = "model-00002-of-00002.safetensors";
  f.index = f.dir + "/model.safetensors.index.json";
  std::ofstream(f.index) << index.dump();
  return f;
}

std::shared_ptr<ParamSource> fused_source(const Folder& f, std::vector<shard::ParamSlot>* slots) {
  nn::NameMap map;
  map.concat("block.qkv.weight", {"block.to_q.weight", "block.to_k.weight", "block.to_v.weight"});
  auto source = nn::name_mapped_param_source(f.index, map);
  shard::ParamSlot s;
  s.name = "block.qkv.weight";
  s.shape = {3 * kRows, kCols};
  s.numel = 3 * kRows * kCols;
  s.offset = 0;
  s.param = at::zeros(s.shape);
  slots->assign(1, s);
  source->check({s});
  return source;
}

// The bits a Memory storage computes with: the fp32 values rounded once to bf16.
at::Tensor expected(const Folder& f) { return at::cat({f.q, f.k, f.v}, 0).to(at::kBFloat16).reshape({-1}); }

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

void set_mtime(const std::string& path, time_t when) {
  struct utimbuf t {when, when};
  ASSERT_EQ(::utime(path.c_str(), &t), 0) << path;
}

}  // namespace

TEST(FileBacked, AConcatenationAcrossFilesIsConvertedBitwiseAndEveryFileIsChecked) {
  const Folder f = make_folder("concat");
  std::vector<shard::ParamSlot> slots;
  auto source = fused_source(f, &slots);
  const ParamLocation loc = source->locate(slots[0]);
  EXPECT_FALSE(loc.whole);
  EXPECT_EQ(loc.file, f.first_file);
  EXPECT_EQ(loc.also_reads, std::vector<std::string>{f.second_file});

  shard::MappedFiles files;
  shard::FileBacked backed(slots, source, files, at::kBFloat16);
  ASSERT_EQ(backed.converted_numel(), slots[0].numel);
  ASSERT_GT(backed.converted_numel(), shard::FileBacked::kConvertChunk) << "the conversion should take several chunks";
  at::Tensor buffer = at::empty({backed.converted_numel()}, at::kBFloat16);
  backed.load(slots, buffer);
  EXPECT_TRUE(same_bits(buffer, expected(f)));

  // The second piece's file changes: named, though the parameter's location is the first file.
  set_mtime(f.second_file, 1000000000);
  try {
    backed.load(slots, buffer);
    FAIL() << "a changed file was read";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(f.second_file), std::string::npos) << e.what();
  }
  fs::remove_all(f.dir);
}

TEST(FileBacked, TheConvertedCopyHoldsTheSameBitsInPlaceAndIsRewrittenWhenASourceChanges) {
  const Folder f = make_folder("copy");
  std::vector<shard::ParamSlot> slots;
  auto source = fused_source(f, &slots);
  const std::string copy_dir = f.dir + "/copy";
  auto comm = make_local_communicator();
  const std::vector<shard::CopyUnit> units = {{"blocks.0", {slots[0]}}};

  const shard::ConvertedCopy first = shard::make_converted_copy(source, units, copy_dir, at::kBFloat16, *comm);
  EXPECT_EQ(first.units_written, 1);
  EXPECT_EQ(first.params, slots[0].numel);
  EXPECT_NE(first.note.find(copy_dir), std::string::npos) << first.note;
  const ParamLocation loc = first.source->locate(slots[0]);
  EXPECT_EQ(loc.file, copy_dir + "/blocks.0.safetensors");
  EXPECT_EQ((std::vector<std::string>{f.first_file, f.second_file}), loc.also_reads);
  shard::MappedFiles files;
  shard::FileBacked backed(slots, first.source, files, at::kBFloat16);
  EXPECT_EQ(backed.converted_numel(), 0) << "the copy is used in place";
  EXPECT_EQ(backed.mapped_bytes(), slots[0].numel * 2);
  at::Tensor in_place = backed.read_flat(slots, 0, slots[0].numel);
  EXPECT_TRUE(same_bits(in_place, expected(f)));

  // Unchanged sources: reused, not written again.
  const auto written_at = fs::last_write_time(loc.file);
  const shard::ConvertedCopy again = shard::make_converted_copy(source, units, copy_dir, at::kBFloat16, *comm);
  EXPECT_EQ(again.units_written, 0);
  EXPECT_EQ(again.units_reused, 1);
  EXPECT_EQ(fs::last_write_time(loc.file), written_at);

  // Under fp32 compute the copy is another file's worth: rewritten, and fp32.
  const shard::ConvertedCopy fp32 = shard::make_converted_copy(source, units, copy_dir, at::kFloat, *comm);
  EXPECT_EQ(fp32.units_written, 1);

  // A source changed (new values, new time): the copy is written again from them.
  at::Tensor k2 = f.k * 2;
  {
    std::vector<io::TensorEntry> entries = {{"block.to_k.weight", at::kFloat, k2.sizes().vec()},
                                            {"block.to_v.weight", at::kFloat, f.v.sizes().vec()}};
    io::SafetensorsWriter w(f.second_file, entries);
    w.write("block.to_k.weight", k2);
    w.write("block.to_v.weight", f.v);
    w.finish();
  }
  std::vector<shard::ParamSlot> slots2;
  auto source2 = fused_source(f, &slots2);
  const shard::ConvertedCopy changed = shard::make_converted_copy(source2, units, copy_dir, at::kBFloat16, *comm);
  EXPECT_EQ(changed.units_written, 1);
  shard::MappedFiles files2;
  shard::FileBacked backed2(slots2, changed.source, files2, at::kBFloat16);
  Folder f2 = f;
  f2.k = k2;
  EXPECT_TRUE(same_bits(backed2.read_flat(slots2, 0, slots2[0].numel), expected(f2)));
  fs::remove_all(f.dir);
}
