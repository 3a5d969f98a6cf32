// Megatron's MMIDIDX indexed dataset: round trips, byte equality with a numpy writer written
// from Megatron's format description (IndexedDatasetBuilder / _IndexWriter), that numpy
// reader (_IndexReader's layout) reading our files, bounds and corruption errors naming the
// file, and reading by mmap without loading the corpus.
#include "data/indexed_dataset.h"

#include "io/media_test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace zeroshard::data {
namespace {

using zeroshard::testing::TempDir;
namespace t = zeroshard::testing;

using Doc = std::vector<std::vector<int64_t>>;  // a document: its sequences

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<Doc> sample_docs(int64_t max_id) {
  std::vector<Doc> docs;
  for (int d = 0; d < 9; ++d) {
    Doc doc;
    const int nseq = d % 3 == 2 ? 3 : 1;  // some documents split into sentences
    for (int s = 0; s < nseq; ++s) {
      std::vector<int64_t> seq;
      for (int k = 0; k < (d * 7 + s * 3) % 11; ++k) seq.push_back((d * 1009 + s * 101 + k * 7919) % max_id);
      if (s == nseq - 1) seq.push_back(max_id - 1);  // an EOD-like last id
      doc.push_back(seq);
    }
    docs.push_back(doc);
  }
  return docs;
}

void write_ours(const std::string& prefix, TokenDType dtype, const std::vector<Doc>& docs) {
  IndexedDatasetWriter w(prefix, dtype);
  for (const auto& doc : docs) {
    if (doc.size() == 1) {
      w.add_document(doc[0]);
    } else {
      std::vector<int64_t> all;
      std::vector<int32_t> lens;
      for (const auto& s : doc) {
        all.insert(all.end(), s.begin(), s.end());
        lens.push_back(static_cast<int32_t>(s.size()));
      }
      w.add_document(all, lens);
    }
  }
  w.finalize();
}

// Our own numpy transcription of the documented layout: "write PREFIX DTYPE DOCS.json [modes]"
// builds files as IndexedDatasetBuilder.add_document + finalize do; "read PREFIX" prints what
// _IndexReader + IndexedDataset.__getitem__ return, as JSON.
const char* kMegatronMirror = R"PY(
import json, struct, sys
import numpy
CODES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
         6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}
NAMES = {v.__name__: k for k, v in CODES.items()}
def write(prefix, dtype_name, docs_path, with_modes):
    dtype = getattr(numpy, dtype_name)
    docs = json.load(open(docs_path))
    lengths, doc_index = [], [0]
    with open(prefix + '.bin', 'wb') as data:
        for doc in docs:
            flat = [t for seq in doc for t in seq]
            data.write(numpy.array(flat, dtype=dtype).tobytes(order='C'))
            lengths.extend(len(seq) for seq in doc)
            doc_index.append(len(lengths))
    itemsize = numpy.dtype(dtype).itemsize
    pointers, p = [], 0
    for n in lengths:
        pointers.append(p)
        p += n * itemsize
    with open(prefix + '.idx', 'wb') as idx:
        idx.write(b'MMIDIDX\x00\x00')
        idx.write(struct.pack('<Q', 1))
        idx.write(struct.pack('<B', NAMES[dtype_name]))
        idx.write(struct.pack('<Q', len(lengths)))
        idx.write(struct.pack('<Q', len(doc_index)))
        idx.write(numpy.array(lengths, dtype=numpy.int32).tobytes(order='C'))
        idx.write(numpy.array(pointers, dtype=numpy.int64).tobytes(order='C'))
        idx.write(numpy.array(doc_index, dtype=numpy.int64).tobytes(order='C'))
        if with_modes:
            idx.write(numpy.array([i % 3 for i in range(len(lengths))], dtype=numpy.int8).tobytes(order='C'))
def read(prefix):
    with open(prefix + '.idx', 'rb') as f:
        assert f.read(9) == b'MMIDIDX\x00\x00'
        assert struct.unpack('<Q', f.read(8))[0] == 1
        code = struct.unpack('<B', f.read(1))[0]
        s = struct.unpack('<Q', f.read(8))[0]
        d = struct.unpack('<Q', f.read(8))[0]
        offset = f.tell()
    buf = memoryview(numpy.memmap(prefix + '.idx', mode='r', order='C'))
    lengths = numpy.frombuffer(buf, dtype=numpy.int32, count=s, offset=offset)
    pointers = numpy.frombuffer(buf, dtype=numpy.int64, count=s, offset=offset + lengths.nbytes)
    doc_index = numpy.frombuffer(buf, dtype=numpy.int64, count=d, offset=offset + lengths.nbytes + pointers.nbytes)
    assert lengths.shape[0] == doc_index[-1]
    data = memoryview(numpy.memmap(prefix + '.bin', mode='r', order='C'))
    seqs = [numpy.frombuffer(data, dtype=CODES[code], count=int(lengths[i]), offset=int(pointers[i])).tolist() for i in range(s)]
    print(json.dumps({'code': code, 'sequences': seqs, 'doc_index': doc_index.tolist()}))
if sys.argv[1] == 'write':
    write(sys.argv[2], sys.argv[3], sys.argv[4], len(sys.argv) > 5)
else:
    read(sys.argv[2])
)PY";

TEST(IndexedDataset, RoundTrip) {
  TempDir dir;
  const auto docs = sample_docs(50000);
  write_ours(dir.file("c"), optimal_token_dtype(50000), docs);
  IndexedDataset ds(dir.file("c"));
  ds.validate();
  EXPECT_EQ(ds.dtype(), TokenDType::kUInt16);
  EXPECT_EQ(ds.num_documents(), 9);
  EXPECT_FALSE(ds.multimodal());
  int64_t seq = 0;
  for (int64_t d = 0; d < 9; ++d) {
    EXPECT_EQ(ds.document_begin(d), seq);
    for (const auto& s : docs[static_cast<size_t>(d)]) {
      EXPECT_EQ(ds.get(seq), s) << "sequence " << seq;
      ++seq;
    }
  }
  EXPECT_EQ(ds.num_sequences(), seq);
  EXPECT_EQ(ds.document_begin(9), seq);
  const auto& s8 = docs[8][2];
  ASSERT_GE(s8.size(), 3u);
  const int64_t last = seq - 1;
  EXPECT_EQ(ds.get(last, 1, 2), (std::vector<int64_t>{s8[1], s8[2]}));
  EXPECT_EQ(ds.get(last, static_cast<int64_t>(s8.size())), std::vector<int64_t>{});
  EXPECT_EQ(optimal_token_dtype(65499), TokenDType::kUInt16);
  EXPECT_EQ(optimal_token_dtype(65500), TokenDType::kInt32);
  EXPECT_EQ(optimal_token_dtype(151936), TokenDType::kInt32);  // Qwen3's vocabulary
}

TEST(IndexedDataset, BytesEqualMegatronLayoutAndNumpyReadsOurs) {
  if (!t::have_python_module("numpy")) GTEST_SKIP() << "/usr/bin/python3 has no numpy: Megatron-layout check skipped";
  TempDir dir;
  t::write_bytes(dir.file("mirror.py"), kMegatronMirror);
  for (const auto& [dtype, name, vocab] :
       std::vector<std::tuple<TokenDType, std::string, int64_t>>{{TokenDType::kUInt16, "uint16", 65000},
                                                                 {TokenDType::kInt32, "int32", 151936},
                                                                 {TokenDType::kInt64, "int64", 1LL << 40},
                                                                 {TokenDType::kUInt8, "uint8", 256}}) {
    const auto docs = sample_docs(vocab);
    nlohmann::json j = docs;
    t::write_bytes(dir.file("docs.json"), j.dump());
    write_ours(dir.file("ours_" + name), dtype, docs);
    ASSERT_EQ(t::run("/usr/bin/python3 " + dir.file("mirror.py") + " write " + dir.file("py_" + name) + " " + name + " " +
                     dir.file("docs.json")),
              0);
    for (const char* ext : {".bin", ".idx"}) {
      EXPECT_EQ(t::read_bytes(dir.file("ours_" + name) + ext), t::read_bytes(dir.file("py_" + name) + ext)) << name << ext;
    }
    std::string out;
    ASSERT_EQ(t::run("/usr/bin/python3 " + dir.file("mirror.py") + " read " + dir.file("ours_" + name), &out), 0);
    const auto got = nlohmann::json::parse(out);
    EXPECT_EQ(got["code"], static_cast<int>(dtype));
    std::vector<std::vector<int64_t>> flat;
    std::vector<int64_t> doc_index{0};
    for (const auto& d : docs) {
      flat.insert(flat.end(), d.begin(), d.end());
      doc_index.push_back(static_cast<int64_t>(flat.size()));
    }
    EXPECT_EQ(got["sequences"].get<std::vector<std::vector<int64_t>>>(), flat) << name;
    EXPECT_EQ(got["doc_index"].get<std::vector<int64_t>>(), doc_index) << name;
  }
  // A multimodal index (modes after the document indices) written the documented way.
  const auto docs = sample_docs(1000);
  t::write_bytes(dir.file("docs.json"), nlohmann::json(docs).dump());
  ASSERT_EQ(t::run("/usr/bin/python3 " + dir.file("mirror.py") + " write " + dir.file("mm") + " int32 " + dir.file("docs.json") + " modes"), 0);
  IndexedDataset mm(dir.file("mm"));
  mm.validate();
  EXPECT_TRUE(mm.multimodal());
  EXPECT_EQ(mm.sequence_mode(4), 1);
  EXPECT_EQ(mm.get(0), docs[0][0]);
}

TEST(IndexedDataset, WriterErrors) {
  TempDir dir;
  {
    IndexedDatasetWriter w(dir.file("e"), TokenDType::kUInt16);
    w.add_document({1, 2, 3});
    EXPECT_NE(error_of([&] { w.add_document({5, 70000}); })
                  .find(dir.file("e") + ".bin: document 1, token 1 of its sequence: id 70000 does not fit uint16"),
              std::string::npos);
    EXPECT_NE(error_of([&] { w.add_document({1, 2}, {1, 2}); }).find("sequence lengths sum to 3 but it has 2 tokens"),
              std::string::npos);
    w.add_item({4});
    EXPECT_NE(error_of([&] { w.finalize(); }).find("1 sequence(s) after the last end_document()"), std::string::npos);
  }  // abandoned: nothing under the final names
  EXPECT_FALSE(std::filesystem::exists(dir.file("e.bin")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("e.idx")));
  EXPECT_THROW(IndexedDatasetWriter(dir.file("f"), TokenDType::kFloat32), std::invalid_argument);
  IndexedDatasetWriter w(dir.file("g"), TokenDType::kInt8);
  EXPECT_NE(error_of([&] { w.add_document({-128, 127, 128}); }).find("id 128 does not fit int8"), std::string::npos);
}

TEST(IndexedDataset, CorruptFilesAndBoundsNameTheFile) {
  TempDir dir;
  const auto docs = sample_docs(30000);
  write_ours(dir.file("c"), TokenDType::kUInt16, docs);
  const std::string idx = t::read_bytes(dir.file("c.idx"));
  const std::string bin = t::read_bytes(dir.file("c.bin"));
  const auto reopen = [&](const std::string& new_idx, const std::string& new_bin) {
    t::write_bytes(dir.file("x.idx"), new_idx);
    t::write_bytes(dir.file("x.bin"), new_bin);
    return error_of([&] { IndexedDataset ds(dir.file("x")); ds.validate(); });
  };
  const std::string x = dir.file("x");
  EXPECT_NE(reopen("MMIDIDX", bin).find(x + ".idx: 7 bytes, too small for the 34-byte MMIDIDX header"), std::string::npos);
  std::string bad = idx;
  bad[0] = 'N';
  EXPECT_NE(reopen(bad, bin).find(x + ".idx: bad magic"), std::string::npos);
  bad = idx;
  bad[9] = 2;
  EXPECT_NE(reopen(bad, bin).find(x + ".idx: version 2, expected 1"), std::string::npos);
  bad = idx;
  bad[17] = 9;
  EXPECT_NE(reopen(bad, bin).find(x + ".idx: dtype code 9 is not 1..8"), std::string::npos);
  EXPECT_NE(reopen(idx.substr(0, idx.size() - 8), bin).find(x + ".idx: " + std::to_string(idx.size() - 8) + " bytes, expected " +
                                                           std::to_string(idx.size())),
            std::string::npos);
  EXPECT_NE(reopen(idx, bin.substr(0, bin.size() - 2)).find(x + ".bin: sequence "), std::string::npos);
  EXPECT_NE(reopen(idx, bin + "zz").find(x + ".bin: " + std::to_string(bin.size() + 2) + " bytes, the index describes " +
                                         std::to_string(bin.size())),
            std::string::npos);
  // A pointer moved: caught by validate().
  bad = idx;
  IndexedDataset ok(dir.file("c"));
  const size_t p1 = 34 + static_cast<size_t>(ok.num_sequences()) * 4 + 8;  // pointer of sequence 1
  bad[p1] = static_cast<char>(bad[p1] + 2);
  EXPECT_NE(reopen(bad, bin).find(x + ".idx: sequence 1 starts at byte "), std::string::npos);

  EXPECT_NE(error_of([&] { ok.get(ok.num_sequences()); }).find(dir.file("c") + ".idx: sequence " + std::to_string(ok.num_sequences()) +
                                                               " out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ok.get(0, 0, ok.sequence_length(0) + 1); }).find(dir.file("c") + ".bin: tokens [0, "),
            std::string::npos);
  EXPECT_NE(error_of([&] { ok.document_begin(-1); }).find("document index -1 out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { ok.sequence_mode(0); }).find("not multimodal"), std::string::npos);
  EXPECT_NE(error_of([&] { IndexedDataset none(dir.file("none")); }).find(dir.file("none") + ".idx: cannot open: No such file"),
            std::string::npos);
}

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

TEST(IndexedDataset, ReadsByMmapNotIntoMemory) {
  TempDir dir;
  {
    IndexedDatasetWriter w(dir.file("big"), TokenDType::kUInt16);
    std::vector<int64_t> doc(32768);
    for (int d = 0; d < 1024; ++d) {  // 64 MiB of tokens
      for (size_t k = 0; k < doc.size(); ++k) doc[k] = static_cast<int64_t>((d * 31 + k) % 65000);
      w.add_document(doc);
    }
    w.finalize();
  }
  const long before = rss_kib();
  IndexedDataset ds(dir.file("big"));
  EXPECT_EQ(ds.bin_bytes(), 64u << 20);
  const auto a = ds.get(0, 0, 4);
  const auto b = ds.get(1023, 32760, 8);
  const long grown = rss_kib() - before;
  std::printf("64 MiB corpus opened and read at two places: resident memory grew by %ld KiB\n", grown);
  EXPECT_LT(grown, 16 * 1024);  // a quarter of the corpus at most; it is 2 MiB here
  EXPECT_EQ(a, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(b[0], (1023 * 31 + 32760) % 65000);
}

}  // namespace
}  // namespace zeroshard::data
