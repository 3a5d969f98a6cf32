// The streaming jsonl reader: records with their line numbers and offsets, BOM/CRLF/blank
// lines, malformed lines naming file:line with nlohmann's message, collect-errors mode.
#include "data/jsonl.h"

#include "io/media_test_util.h"

#include <gtest/gtest.h>

namespace zeroshard::data {
namespace {

using zeroshard::testing::TempDir;
namespace t = zeroshard::testing;

TEST(Jsonl, ReadsRecordsWithLinesAndOffsets) {
  TempDir dir;
  const std::string text = "\xEF\xBB\xBF{\"text\": \"a\"}\r\n\n   \n{\"text\": \"b\", \"n\": 2}\n{\"text\": \"caf\xC3\xA9\"}";
  t::write_bytes(dir.file("a.jsonl"), text);
  JsonlReader r(dir.file("a.jsonl"));
  JsonlRecord rec;
  ASSERT_TRUE(r.next(rec));
  EXPECT_EQ(rec.line, 1);
  EXPECT_EQ(rec.offset, 0u);
  EXPECT_EQ(rec.value["text"], "a");
  ASSERT_TRUE(r.next(rec));
  EXPECT_EQ(rec.line, 4);  // blank lines 2 and 3 skipped but counted
  EXPECT_EQ(rec.offset, text.find("{\"text\": \"b\""));
  EXPECT_EQ(rec.value["n"], 2);
  ASSERT_TRUE(r.next(rec));
  EXPECT_EQ(rec.line, 5);
  EXPECT_EQ(rec.value["text"], "caf\xC3\xA9");
  EXPECT_FALSE(r.next(rec));
  EXPECT_TRUE(r.errors().empty());
  EXPECT_EQ(r.lines_read(), 5);
}

TEST(Jsonl, MalformedLineNamesFileLineAndParserMessage) {
  TempDir dir;
  t::write_bytes(dir.file("b.jsonl"), "{\"a\": 1}\n{\"a\": 2,}\n[1, 2]\n{\"a\": tru}\n\n{\"a\": 5}\n");
  try {
    read_jsonl(dir.file("b.jsonl"));
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(dir.file("b.jsonl") + ":2: malformed JSON: [json.exception.parse_error.101] parse error at line 1, column 9"),
              std::string::npos)
        << m;
  }
  JsonlOptions o;
  o.collect_errors = true;
  std::vector<JsonlError> errors;
  const auto records = read_jsonl(dir.file("b.jsonl"), o, &errors);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].line, 1);
  EXPECT_EQ(records[1].line, 6);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].line, 2);
  EXPECT_EQ(errors[1].line, 3);
  EXPECT_NE(errors[1].message.find(":3: expected a JSON object, got array"), std::string::npos) << errors[1].message;
  EXPECT_EQ(errors[2].line, 4);
  EXPECT_NE(errors[2].message.find("invalid literal"), std::string::npos) << errors[2].message;

  o.skip_blank_lines = false;
  o.require_object = false;
  read_jsonl(dir.file("b.jsonl"), o, &errors);
  ASSERT_EQ(errors.size(), 3u);  // [1, 2] is fine now, the blank line 5 is not
  EXPECT_EQ(errors[2].line, 5);
  EXPECT_THROW(read_jsonl(dir.file("b.jsonl"), o), std::invalid_argument);  // collect without a vector
}

TEST(Jsonl, MissingFileAndEmptyFile) {
  TempDir dir;
  try {
    JsonlReader r(dir.file("none.jsonl"));
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("none.jsonl: cannot open jsonl file: No such file or directory"), std::string::npos);
  }
  t::write_bytes(dir.file("empty.jsonl"), "");
  EXPECT_TRUE(read_jsonl(dir.file("empty.jsonl")).empty());
}

TEST(Jsonl, StreamsALargeFileLineByLine) {
  TempDir dir;
  {
    std::ofstream out(dir.file("big.jsonl"));
    for (int i = 0; i < 20000; ++i) out << "{\"id\": " << i << ", \"text\": \"" << std::string(static_cast<size_t>(i % 50), 'x') << "\"}\n";
  }
  JsonlReader r(dir.file("big.jsonl"));
  JsonlRecord rec;
  int64_t n = 0, sum = 0;
  while (r.next(rec)) {
    ASSERT_EQ(rec.line, n + 1);
    sum += rec.value["id"].get<int64_t>();
    ++n;
  }
  EXPECT_EQ(n, 20000);
  EXPECT_EQ(sum, 20000LL * 19999 / 2);
}

}  // namespace
}  // namespace zeroshard::data
