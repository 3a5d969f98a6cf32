#include "data/text_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

namespace zeroshard::data {

namespace fs = std::filesystem;

std::string ByteTokenizer::decode(const std::vector<int64_t>& tokens) {
  std::string s;
  s.reserve(tokens.size());
  for (int64_t t : tokens) s.push_back(static_cast<char>(static_cast<uint8_t>(t)));
  return s;
}

static std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read data file '" + p.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string synthetic_text(int64_t bytes, uint64_t seed) {
  static const char* subjects[] = {"the cat", "a dog", "the old man", "my sister", "the teacher", "a small bird",
                                   "the engineer", "our neighbour"};
  static const char* verbs[] = {"sees", "likes", "carries", "paints", "finds", "builds", "reads", "follows"};
  static const char* objects[] = {"a red ball", "the blue box", "a long letter", "the green door", "an old map",
                                  "the white boat", "a heavy stone", "the yellow kite"};
  static const char* places[] = {"in the garden", "near the river", "at the station", "on the hill",
                                 "under the bridge", "by the sea"};
  std::mt19937_64 rng(seed);
  std::string out;
  out.reserve(static_cast<size_t>(bytes) + 128);
  while (static_cast<int64_t>(out.size()) < bytes) {
    std::string s = std::string(subjects[rng() % 8]) + " " + verbs[rng() % 8] + " " + objects[rng() % 8];
    if (rng() % 2) s += std::string(" ") + places[rng() % 6];
    s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    out += s + (rng() % 5 == 0 ? ".\n" : ". ");
  }
  out.resize(static_cast<size_t>(bytes));
  return out;
}

std::vector<uint8_t> load_corpus(const TextSourceOptions& o) {
  std::string text;
  if (o.source == "synthetic") {
    text = synthetic_text(o.synthetic_bytes, o.seed);
  } else if (o.source == "file") {
    if (o.path.empty()) throw std::runtime_error("data.source=file needs data.path");
    text = read_file(o.path);
  } else if (o.source == "system_text") {
    const fs::path dir = o.path.empty() ? fs::path("/usr/share/common-licenses") : fs::path(o.path);
    if (!fs::is_directory(dir)) {
      throw std::runtime_error("data.source=system_text: directory '" + dir.string() +
                               "' not found (Debian's base-files ships it); use data.source=synthetic");
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (fs::is_regular_file(e.path())) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    std::set<fs::path> targets;  // licenses are often symlinked under two names: read once
    for (const auto& f : files) {
      if (!targets.insert(fs::canonical(f)).second) continue;
      text += read_file(f);
      text += "\n";
    }
  } else {
    throw std::runtime_error("data.source '" + o.source + "' is not one of: system_text, synthetic, file");
  }
  if (text.empty()) throw std::runtime_error("data source '" + o.source + "' (" + o.path + ") is empty");
  return std::vector<uint8_t>(text.begin(), text.end());
}

}  // namespace zeroshard::data
