// DiffSynth dataset folders: RFC 4180 CSV details, the media/prompt columns and extra columns,
// metadata.json / metadata.jsonl, and errors naming file:line, the column and the row; parity
// of the CSV reading with pandas when /usr/bin/python3 has it.
#include "data/metadata_csv.h"

#include "io/media_test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zeroshard::data {
namespace {

using zeroshard::testing::TempDir;
namespace t = zeroshard::testing;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

void touch(const TempDir& dir, const std::string& rel) {
  std::filesystem::create_directories(std::filesystem::path(dir.file(rel)).parent_path());
  t::write_bytes(dir.file(rel), "x");
}

TEST(MetadataCsv, Rfc4180Fields) {
  const std::string text =
      "\xEF\xBB\xBFvideo,prompt,score\r\n"
      "a.mp4,\"a cat, sitting\",1\r\n"
      "\r\n"
      "b.mp4,\"she said \"\"hi\"\"\nand left\",\r\n"
      "\"c,1.mp4\",plain text with \"inner\" quotes,3\r"
      "d.mp4,\"\",4";
  const CsvTable tb = parse_csv(text, "m.csv");
  EXPECT_EQ(tb.header, (std::vector<std::string>{"video", "prompt", "score"}));
  ASSERT_EQ(tb.rows.size(), 4u);
  EXPECT_EQ(tb.rows[0][1], "a cat, sitting");
  EXPECT_EQ(tb.rows[1][1], "she said \"hi\"\nand left");
  EXPECT_EQ(tb.rows[1][2], "");
  EXPECT_EQ(tb.rows[2][0], "c,1.mp4");
  EXPECT_EQ(tb.rows[2][1], "plain text with \"inner\" quotes");
  EXPECT_EQ(tb.rows[3][1], "");
  EXPECT_EQ(tb.row_lines, (std::vector<int64_t>{2, 4, 6, 7}));  // the quoted line break counts
}

TEST(MetadataCsv, CsvErrorsNameLine) {
  EXPECT_NE(error_of([] { parse_csv("image,prompt\na.png,x\nb.png,y,z\n", "m.csv"); })
                .find("m.csv:3: 3 fields, but the header has 2 ('image', 'prompt')"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_csv("image,prompt\na.png\n", "m.csv"); }).find("m.csv:2: 1 fields, but the header has 2"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_csv("image,prompt\na.png,\"open\nquote\n", "m.csv"); })
                .find("m.csv:2: unterminated quoted field 2 (no closing quote before the end of the file)"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_csv("image,prompt\n\na.png,\"x\"y\n", "m.csv"); })
                .find("m.csv:3: unexpected character 'y' after the closing quote of field 2"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_csv("image,prompt,image\n", "m.csv"); }).find("m.csv:1: duplicate column 'image'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_csv("image,,prompt\n", "m.csv"); }).find("m.csv:1: header column 2 has no name"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_csv("\n\n", "m.csv"); }).find("m.csv: empty CSV file"), std::string::npos);
}

TEST(MetadataCsv, FolderWithVideosPromptsAndExtraColumns) {
  TempDir dir;
  touch(dir, "clips/a.mp4");
  touch(dir, "clips/b.MOV");
  touch(dir, "still.png");
  t::write_bytes(dir.file("metadata.csv"),
                 "video,prompt,camera\nclips/a.mp4,\"a dog, running\",pan\nclips/b.MOV,second,static\nstill.png,an image,\n");
  const MediaDataset ds = load_media_dataset(dir.path());
  EXPECT_EQ(ds.metadata_path, dir.file("metadata.csv"));
  EXPECT_EQ(ds.media_column, "video");
  EXPECT_EQ(ds.columns, (std::vector<std::string>{"video", "prompt", "camera"}));
  ASSERT_EQ(ds.samples.size(), 3u);
  EXPECT_EQ(ds.samples[0].media_path, dir.file("clips/a.mp4"));
  EXPECT_EQ(ds.samples[0].kind, MediaKind::kVideo);
  EXPECT_EQ(ds.samples[0].prompt, "a dog, running");
  EXPECT_EQ(ds.samples[0].location, "metadata.csv:2");
  EXPECT_EQ(ds.samples[0].extra, (std::vector<std::pair<std::string, std::string>>{{"camera", "pan"}}));
  EXPECT_EQ(ds.samples[1].kind, MediaKind::kVideo);
  EXPECT_EQ(ds.samples[2].kind, MediaKind::kImage);  // DiffSynth's video operator takes images too
  EXPECT_EQ(ds.samples[2].row, 2);
}

TEST(MetadataCsv, MissingFilesAndBadRowsAreNamed) {
  TempDir dir;
  touch(dir, "a.jpg");
  t::write_bytes(dir.file("metadata.csv"), "image,prompt\na.jpg,one\ngone.jpg,two\nb.gif.txt,three\nlost/c.webp,four\n,five\n");
  std::string e = error_of([&] { load_media_dataset(dir.path()); });
  // The first bad row that is not a missing file stops the load.
  EXPECT_NE(e.find("metadata.csv:4: column 'image': " + dir.file("b.gif.txt") + ": unsupported media file extension 'txt'"),
            std::string::npos)
      << e;

  MediaDatasetOptions collect;
  collect.collect_errors = true;
  const MediaDataset ds = load_media_dataset(dir.path(), "", collect);
  ASSERT_EQ(ds.samples.size(), 1u);
  ASSERT_EQ(ds.errors.size(), 4u);
  EXPECT_EQ(ds.errors[0], "metadata.csv:3 (row 1): column 'image': file 'gone.jpg' does not exist (" + dir.file("gone.jpg") + ")");
  EXPECT_NE(ds.errors[1].find("metadata.csv:4: column 'image'"), std::string::npos);
  EXPECT_EQ(ds.errors[2], "metadata.csv:5 (row 3): column 'image': file 'lost/c.webp' does not exist (" + dir.file("lost/c.webp") + ")");
  EXPECT_EQ(ds.errors[3], "metadata.csv:6: column 'image': empty media path");

  // Only missing files: all listed in one error.
  t::write_bytes(dir.file("metadata.csv"), "image,prompt\na.jpg,one\ngone.jpg,two\nlost/c.webp,four\n");
  e = error_of([&] { load_media_dataset(dir.path()); });
  EXPECT_NE(e.find(dir.file("metadata.csv") + ": 2 media file(s) missing:\n  metadata.csv:3 (row 1): column 'image': file 'gone.jpg'"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("\n  metadata.csv:4 (row 2): column 'image': file 'lost/c.webp'"), std::string::npos) << e;
  MediaDatasetOptions nocheck;
  nocheck.check_files = false;
  EXPECT_EQ(load_media_dataset(dir.path(), "", nocheck).samples.size(), 3u);
}

TEST(MetadataCsv, AnEmptyOrBlankPromptIsABadRow) {
  TempDir dir;
  touch(dir, "a.jpg");
  t::write_bytes(dir.file("metadata.csv"), "image,prompt\na.jpg,one\na.jpg,\na.jpg,\" \t \"\na.jpg,four\n");
  EXPECT_NE(error_of([&] { load_media_dataset(dir.path()); }).find("metadata.csv:3: column 'prompt': empty prompt"),
            std::string::npos);
  MediaDatasetOptions collect;
  collect.collect_errors = true;
  const MediaDataset ds = load_media_dataset(dir.path(), "", collect);
  ASSERT_EQ(ds.samples.size(), 2u);
  EXPECT_EQ(ds.samples[1].row, 3);
  EXPECT_EQ(ds.errors, (std::vector<std::string>{"metadata.csv:3: column 'prompt': empty prompt",
                                                 "metadata.csv:4: column 'prompt': empty prompt"}));
  std::filesystem::remove(dir.file("metadata.csv"));
  t::write_bytes(dir.file("metadata.jsonl"), "{\"image\": \"a.jpg\", \"prompt\": \"x\"}\n{\"image\": \"a.jpg\", \"prompt\": \"\"}\n");
  EXPECT_NE(error_of([&] { load_media_dataset(dir.path()); }).find("metadata.jsonl:2: column 'prompt': empty prompt"),
            std::string::npos);
}

TEST(MetadataCsv, ColumnChoice) {
  TempDir dir;
  touch(dir, "a.png");
  t::write_bytes(dir.file("metadata.csv"), "file_name,text\na.png,x\n");
  EXPECT_NE(error_of([&] { load_media_dataset(dir.path()); }).find("no 'image' column (columns: 'file_name', 'text')"),
            std::string::npos);
  MediaDatasetOptions o;
  o.media_column = "file_name";
  o.prompt_column = "text";
  EXPECT_EQ(load_media_dataset(dir.path(), "", o).samples.at(0).prompt, "x");
  t::write_bytes(dir.file("metadata.csv"), "video,image,prompt\na.png,a.png,x\n");
  EXPECT_NE(error_of([&] { load_media_dataset(dir.path()); }).find("has both a 'video' and an 'image' column"), std::string::npos);
  t::write_bytes(dir.file("metadata.json"), "[]");
  EXPECT_NE(error_of([&] { load_media_dataset(dir.path()); }).find("expected exactly one of metadata.csv, metadata.json, metadata.jsonl, found 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_media_dataset(dir.file("nope")); }).find("dataset folder does not exist"), std::string::npos);
}

TEST(MetadataCsv, JsonAndJsonlMetadata) {
  TempDir dir;
  touch(dir, "v/a.mp4");
  touch(dir, "v/b.webm");
  t::write_bytes(dir.file("metadata.json"),
                 R"([{"video": "v/a.mp4", "prompt": "first", "fps": 24}, {"prompt": "second", "video": "v/b.webm", "tag": "x"}])");
  MediaDataset ds = load_media_dataset(dir.path());
  ASSERT_EQ(ds.samples.size(), 2u);
  EXPECT_EQ(ds.samples[0].extra, (std::vector<std::pair<std::string, std::string>>{{"fps", "24"}}));
  EXPECT_EQ(ds.samples[1].prompt, "second");
  EXPECT_EQ(ds.samples[1].location, "metadata.json item 1");
  EXPECT_EQ(ds.columns, (std::vector<std::string>{"fps", "prompt", "video", "tag"}));  // nlohmann sorts keys

  std::filesystem::remove(dir.file("metadata.json"));
  t::write_bytes(dir.file("metadata.jsonl"), "{\"video\": \"v/a.mp4\", \"prompt\": \"first\"}\n\n{\"video\": \"v/b.webm\", \"prompt\": 7}\n");
  EXPECT_NE(error_of([&] { load_media_dataset(dir.path()); }).find("metadata.jsonl:3: column 'prompt': expected a string, got 7"),
            std::string::npos);
  t::write_bytes(dir.file("metadata.jsonl"), "{\"video\": \"v/a.mp4\", \"prompt\": \"first\"}\n{\"video\": \"v/b.webm\" \"prompt\": 7}\n");
  EXPECT_NE(error_of([&] { load_media_dataset(dir.path()); }).find("metadata.jsonl:2: malformed JSON"), std::string::npos);
  t::write_bytes(dir.file("metadata.jsonl"), "{\"video\": \"v/a.mp4\", \"prompt\": \"first\"}\n{\"video\": \"v/b.webm\"}\n");
  EXPECT_NE(error_of([&] { load_media_dataset(dir.path()); }).find("metadata.jsonl:2: no 'prompt' field"), std::string::npos);
}

// pandas.read_csv (what DiffSynth uses) reads the same strings from an awkward file.
TEST(MetadataCsv, SameStringsAsPandas) {
  if (!t::have_python_module("pandas")) GTEST_SKIP() << "/usr/bin/python3 has no pandas: parity not checked";
  TempDir dir;
  const std::string text =
      "\xEF\xBB\xBFvideo,prompt\r\n"
      "a.mp4,\"a cat, sitting\"\r\n"
      "b.mp4,\"she said \"\"hi\"\"\r\nand left\"\r\n"
      "\"c,1.mp4\",caf\xC3\xA9 \xE2\x80\x94 ok\r\n";
  t::write_bytes(dir.file("m.csv"), text);
  std::string out;
  ASSERT_EQ(t::run("/usr/bin/python3 -c \"import pandas, json, sys; m = pandas.read_csv(sys.argv[1]); "
                   "print(json.dumps([m.iloc[i].to_dict() for i in range(len(m))]))\" " + dir.file("m.csv"),
                   &out),
            0);
  const auto pd = nlohmann::json::parse(out);
  const CsvTable tb = read_csv(dir.file("m.csv"));
  ASSERT_EQ(pd.size(), tb.rows.size());
  for (size_t r = 0; r < tb.rows.size(); ++r) {
    EXPECT_EQ(pd[r]["video"].get<std::string>(), tb.rows[r][0]);
    EXPECT_EQ(pd[r]["prompt"].get<std::string>(), tb.rows[r][1]);
  }
}

}  // namespace
}  // namespace zeroshard::data
