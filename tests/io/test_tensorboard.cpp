// Event files written by EventWriter, read back by an independent Python reader
// (tests/io/read_tfevents.py: its own bitwise CRC-32C, Debian's python3-protobuf on code that
// protoc generates here), and the same reader failing on files with a planted fault.
#include "io/tensorboard.h"
#include "util/crc32.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#ifndef ZS_SOURCE_DIR
#error "build with -DZS_SOURCE_DIR=\"<repository root>\""
#endif

namespace zeroshard::io {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/zs-tb-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

struct Proc {
  int status = -1;
  std::string out;
};

Proc run(const std::string& cmd) {
  Proc r;
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return r;
}

// protoc's Python module for the event proto, once per test.
std::string python_module(const fs::path& dir) {
  const std::string src = std::string(ZS_SOURCE_DIR) + "/src/io";
  fs::create_directories(dir);
  const Proc r = run("protoc -I" + src + " --python_out=" + dir.string() + " " + src + "/tensorboard_event.proto");
  EXPECT_EQ(r.status, 0) << r.out;
  return dir.string();
}

Proc read_events(const std::string& file, const std::string& pb2) {
  return run("/usr/bin/python3 " + std::string(ZS_SOURCE_DIR) + "/tests/io/read_tfevents.py " + file + " " + pb2);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void spill(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

TEST(Crc32c, KnownValues) {
  // The check value of the CRC catalogue and RFC 3720's test patterns (B.4).
  EXPECT_EQ(util::crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(util::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(util::crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::string inc(32, '\0');
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i);
  EXPECT_EQ(util::crc32c(inc.data(), inc.size()), 0x46DD794Eu);
  // Incremental use gives the same CRC as one call.
  EXPECT_EQ(util::crc32c(inc.data() + 5, 27, util::crc32c(inc.data(), 5)), 0x46DD794Eu);
}

TEST(EventWriter, PythonReaderSeesWhatWasWritten) {
  TempDir d;
  const std::string pb2 = python_module(d.path / "pb2");
  std::string path;
  const nlohmann::json line = {{"step", 7},
                               {"loss", 2.5},
                               {"lr", 0.001},
                               {"skipped", false},
                               {"note", "text is no scalar"},
                               {"ranks", {{{"rank", 0}, {"compute_s", 0.25}}, {{"rank", 1}, {"compute_s", 0.5}}}}};
  {
    EventWriter w((d.path / "run").string(), /*resume_step=*/5);
    path = w.path();
    w.add_scalars({{"loss", 3.25}, {"grad_norm", 1e-3}}, 5, 1700000000.5);
    w.add_scalars({{"loss", std::nan("")}}, 6);
    const auto [step, scalars] = metrics_scalars(line);
    w.add_scalars(scalars, step);
  }
  const std::string name = fs::path(path).filename().string();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_TRUE(std::regex_match(name, std::regex("events\\.out\\.tfevents\\.[0-9]{10}\\." + std::string(host)))) << name;

  const Proc r = read_events(path, pb2);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto events = nlohmann::json::parse(r.out);
  ASSERT_EQ(events.size(), 5u) << r.out;
  EXPECT_EQ(events[0]["kind"], "file_version");
  EXPECT_EQ(events[0]["file_version"], "brain.Event:2");
  EXPECT_GT(events[0]["wall_time"].get<double>(), 1.6e9);
  EXPECT_EQ(events[1]["kind"], "session_log");
  EXPECT_EQ(events[1]["session_log"], "START");
  EXPECT_EQ(events[1]["step"], 5);
  EXPECT_EQ(events[2]["step"], 5);
  EXPECT_EQ(events[2]["wall_time"].get<double>(), 1700000000.5);
  ASSERT_EQ(events[2]["scalars"].size(), 2u);
  EXPECT_EQ(events[2]["scalars"][0][0], "loss");
  EXPECT_EQ(events[2]["scalars"][0][1].get<double>(), static_cast<double>(3.25f));
  EXPECT_EQ(events[2]["scalars"][1][0], "grad_norm");
  EXPECT_EQ(events[2]["scalars"][1][1].get<double>(), static_cast<double>(static_cast<float>(1e-3)));
  EXPECT_EQ(events[3]["step"], 6);
  EXPECT_EQ(events[3]["scalars"][0][1], "nan") << events[3];  // a NaN loss stays NaN
  // The metrics line: numbers and booleans under their keys, ranks under ranks/<r>/, text left out.
  EXPECT_EQ(events[4]["step"], 7);
  std::map<std::string, double> got;
  for (const auto& tv : events[4]["scalars"]) got[tv[0].get<std::string>()] = tv[1].get<double>();
  const std::map<std::string, double> want = {{"loss", 2.5f},
                                              {"lr", static_cast<float>(0.001)},
                                              {"skipped", 0.0},
                                              {"ranks/0/compute_s", 0.25f},
                                              {"ranks/1/compute_s", 0.5f}};
  EXPECT_EQ(got, want);
}

TEST(EventWriter, PlantedFaultsMakeTheReaderFail) {
  TempDir d;
  const std::string pb2 = python_module(d.path / "pb2");
  std::string path;
  {
    EventWriter w(d.path.string());
    path = w.path();
    for (int s = 1; s <= 3; ++s) w.add_scalars({{"loss", 1.0 / s}}, s);
  }
  const std::string good = slurp(path);
  ASSERT_EQ(read_events(path, pb2).status, 0);
  // Record 0 is the version; its length is the first 8 bytes.
  const uint64_t len0 = static_cast<unsigned char>(good[0]) | (static_cast<uint64_t>(static_cast<unsigned char>(good[1])) << 8);
  const size_t rec1 = 16 + len0;  // start of record 1
  struct Fault {
    std::string name;
    size_t offset;
    std::string expected;
  };
  for (const Fault& f : {Fault{"a data byte of record 1", rec1 + 12 + 3, "record 1: data CRC mismatch"},
                         Fault{"a length byte of record 1", rec1 + 1, "record 1: length CRC mismatch"},
                         Fault{"the data CRC of record 0", 12 + len0 + 1, "record 0: data CRC mismatch"}}) {
    std::string bad = good;
    bad[f.offset] = static_cast<char>(bad[f.offset] ^ 0x20);
    const std::string bad_path = (d.path / "bad").string();
    spill(bad_path, bad);
    const Proc r = read_events(bad_path, pb2);
    EXPECT_EQ(r.status, 1) << f.name << ": " << r.out;
    EXPECT_NE(r.out.find(f.expected), std::string::npos) << f.name << ": " << r.out;
  }
  const std::string cut_path = (d.path / "cut").string();
  spill(cut_path, good.substr(0, good.size() - 3));
  const Proc r = read_events(cut_path, pb2);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("record 3: truncated"), std::string::npos) << r.out;
}

TEST(EventWriter, TwoWritersNeverShareAFile) {
  TempDir d;
  EventWriter a(d.path.string());
  EventWriter b(d.path.string());
  EXPECT_NE(a.path(), b.path());
}

TEST(EventWriter, MetricsLineNeedsAStep) {
  EXPECT_THROW(metrics_scalars(nlohmann::json{{"loss", 1.0}}), std::invalid_argument);
  EXPECT_THROW(metrics_scalars(nlohmann::json{{"step", 1.5}}), std::invalid_argument);
}

}  // namespace
}  // namespace zeroshard::io
