// Tokenizer driver for the parity harness (tokenizer_parity.mjs) and the throughput benchmark.
//
//   tokenize_driver --tokenizer DIR_OR_tokenizer.json [--input FILE] [--output FILE]
//                   (DIR: its tokenizer.json, or CLIP's vocab.json + merges.txt, as BpeTokenizer::from_file)
//                   [--add-special-tokens] [--roundtrip] [--bench-seconds S]
//
// Input: one text per line, either a JSON string or {"bytes": [b0, b1, ...]} for byte strings
// that are not valid UTF-8 (JSON strings cannot carry those). Output: one JSON array of ids per
// line, in input order. --roundtrip also checks decode(encode(x)) == normalized_text(x) (x with
// U+FFFD substitutions for invalid input and the normalizer applied; == x for valid, already
// normalized x), reports each failing line on stderr and exits 1; it prints how many texts
// came back byte-identical.
// --decoded FILE also writes, per text, decode(ids) (a JSON string per line; invalid UTF-8
// cannot occur there, decode() replaces it).
// --bench-seconds S encodes the whole input repeatedly for at least S seconds after one warm-up
// pass (one thread) and prints one JSON line with MB/s to stderr.
// --chat: each input line is {"messages": [...], "add_generation_prompt"?: bool,
// "enable_thinking"?: bool}; the output line is {"ids": [...], "mask": [...]} from
// encode_qwen3_chat (or encode_qwen3_generation_prompt, with an empty mask).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "text/bpe_tokenizer.h"
#include "text/chat_template.h"
#include "text/utf8.h"

namespace {

using zeroshard::text::BpeTokenizer;

std::vector<std::string> read_texts(std::istream& in) {
  std::vector<std::string> texts;
  std::string line;
  std::size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw std::runtime_error("input line " + std::to_string(lineno) + ": " + e.what());
    }
    if (j.is_string()) {
      texts.push_back(j.get<std::string>());
    } else if (j.is_object() && j.contains("bytes")) {
      std::string s;
      for (const auto& b : j.at("bytes")) s.push_back(static_cast<char>(b.get<int>()));
      texts.push_back(std::move(s));
    } else {
      throw std::runtime_error("input line " + std::to_string(lineno) + ": expected a JSON string or {\"bytes\": [...]}");
    }
  }
  return texts;
}

int run_chat(BpeTokenizer& tok, std::istream& in, std::ostream& out) {
  std::string line;
  std::size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const std::string where = "chat input line " + std::to_string(lineno);
    const auto messages = zeroshard::text::chat_messages_from_json(j.at("messages"), where);
    nlohmann::json o;
    if (j.value("add_generation_prompt", false)) {
      std::optional<bool> thinking;
      if (j.contains("enable_thinking")) thinking = j.at("enable_thinking").get<bool>();
      o["ids"] = zeroshard::text::encode_qwen3_generation_prompt(tok, messages, thinking, where);
      o["mask"] = nlohmann::json::array();
    } else {
      const auto enc = zeroshard::text::encode_qwen3_chat(tok, messages, where);
      o["ids"] = enc.ids;
      o["mask"] = enc.loss_mask;
    }
    out << o.dump() << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path, input, output, decoded_path;
  bool add_special = false, roundtrip = false, chat = false;
  double bench_seconds = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--tokenizer") tokenizer_path = next();
    else if (a == "--input") input = next();
    else if (a == "--output") output = next();
    else if (a == "--decoded") decoded_path = next();
    else if (a == "--add-special-tokens") add_special = true;
    else if (a == "--roundtrip") roundtrip = true;
    else if (a == "--chat") chat = true;
    else if (a == "--bench-seconds") bench_seconds = std::stod(next());
    else {
      std::cerr << "unknown argument " << a << "\n";
      return 2;
    }
  }
  if (tokenizer_path.empty()) {
    std::cerr << "usage: tokenize_driver --tokenizer PATH [--input FILE] [--output FILE] [--add-special-tokens] "
                 "[--roundtrip] [--decoded FILE] [--bench-seconds S]\n";
    return 2;
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    BpeTokenizer tok = BpeTokenizer::from_file(tokenizer_path);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (chat) {
      std::ofstream cout_file;
      if (!output.empty()) cout_file.open(output, std::ios::binary);
      std::ostream& cout_stream = output.empty() ? std::cout : cout_file;
      if (input.empty()) return run_chat(tok, std::cin, cout_stream);
      std::ifstream in(input, std::ios::binary);
      if (!in) throw std::runtime_error(input + ": cannot open");
      return run_chat(tok, in, cout_stream);
    }
    std::vector<std::string> texts;
    if (input.empty()) {
      texts = read_texts(std::cin);
    } else {
      std::ifstream in(input, std::ios::binary);
      if (!in) throw std::runtime_error(input + ": cannot open");
      texts = read_texts(in);
    }
    std::ofstream out_file;
    if (!output.empty()) out_file.open(output, std::ios::binary);
    std::ostream& out = output.empty() ? std::cout : out_file;
    std::ofstream decoded_file;
    if (!decoded_path.empty()) decoded_file.open(decoded_path, std::ios::binary);
    int failures = 0;
    std::size_t identical = 0;
    std::vector<int32_t> ids;
    std::string line;
    for (std::size_t t = 0; t < texts.size(); ++t) {
      ids.clear();
      tok.encode_append(texts[t], ids, add_special);
      line.assign(1, '[');
      for (std::size_t k = 0; k < ids.size(); ++k) {
        if (k) line += ',';
        line += std::to_string(ids[k]);
      }
      line += "]\n";
      out << line;
      if (decoded_file.is_open()) decoded_file << nlohmann::json(tok.decode(ids)).dump() << "\n";
      if (roundtrip && !add_special) {
        const std::string expected = tok.normalized_text(texts[t]);
        const std::string back = tok.decode(ids);
        identical += back == texts[t];
        if (back != expected) {
          ++failures;
          if (failures <= 10) {
            std::cerr << "roundtrip mismatch at text " << t << ": "
                      << nlohmann::json(zeroshard::text::utf8_escape_for_message(expected, 200)).dump() << " -> "
                      << nlohmann::json(zeroshard::text::utf8_escape_for_message(back, 200)).dump() << "\n";
          }
        }
      }
    }
    out.flush();
    if (roundtrip) {
      std::cerr << "roundtrip: " << texts.size() - failures << "/" << texts.size()
                << " decode(encode(x)) == normalized_text(x); " << identical << " byte-identical to x\n";
    }
    if (bench_seconds > 0) {
      std::size_t bytes_per_pass = 0;
      for (const auto& s : texts) bytes_per_pass += s.size();
      // First pass with an empty cache ("cold"), then repeated passes ("warm").
      BpeTokenizer fresh(tok);
      auto c0 = std::chrono::steady_clock::now();
      std::size_t ntok = 0;
      for (const auto& s : texts) {
        ids.clear();
        fresh.encode_append(s, ids);
        ntok += ids.size();
      }
      const double cold = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
      std::size_t passes = 0;
      const auto w0 = std::chrono::steady_clock::now();
      double warm = 0;
      do {
        for (const auto& s : texts) {
          ids.clear();
          fresh.encode_append(s, ids);
        }
        ++passes;
        warm = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      } while (warm < bench_seconds);
      std::fprintf(stderr,
                   "{\"impl\":\"zeroshard C++\",\"bytes\":%zu,\"texts\":%zu,\"tokens\":%zu,\"load_s\":%.3f,"
                   "\"cold_MBps\":%.2f,\"warm_MBps\":%.2f,\"warm_passes\":%zu}\n",
                   bytes_per_pass, texts.size(), ntok, load_s, bytes_per_pass / cold / 1e6,
                   bytes_per_pass * passes / warm / 1e6, passes);
    }
    if (failures) {
      std::cerr << failures << " roundtrip mismatches\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "tokenize_driver: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
