// `zeroshard tokenize`: a text's token ids and pieces under a tokenizer.json (given, or the one a
// config's data.tokenizer names), optionally through the Qwen3 chat template, for users to check
// what the model will see.
#include "cli/command.h"
#include "text/bpe_tokenizer.h"
#include "text/chat_template.h"
#include "train/config.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

namespace zeroshard::cli {

namespace {

// A JSON string literal of raw bytes (invalid UTF-8 shown as \ufffd by the JSON library's replace).
std::string json_quoted(const std::string& bytes) {
  return nlohmann::json(bytes).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string tokenizer_of_config(const std::string& path, const std::vector<std::string>& overrides) {
  train::TrainConfig cfg = train::load_config(path, overrides);
  const train::ConfigKeys keys = train::config_keys(cfg);
  const train::ConfigKey* key = keys.find("data.tokenizer");
  if (key == nullptr) throw std::invalid_argument(path + ": model.series " + cfg.series + " has no data.tokenizer");
  const std::string t = key->get();
  if (t.empty()) throw std::invalid_argument(path + ": data.tokenizer is not set");
  return t;
}

}  // namespace

Command add_tokenize(CLI::App& app) {
  struct Args {
    std::string tokenizer, config, file, system, text;
    std::vector<std::string> overrides;
    bool chat = false, ids_only = false, special = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("tokenize", "Print the token ids and pieces of a text (a tokenizer.json, or the config's "
                                             "data.tokenizer), optionally through the chat template");
  sub->add_option("text", a->text, "The text (default: --file, or standard input)");
  sub->add_option("-t,--tokenizer", a->tokenizer, "tokenizer.json or the folder holding it");
  sub->add_option("-c,--config", a->config, "A config whose data.tokenizer to use")->check(CLI::ExistingFile);
  sub->add_option("--set", a->overrides, "Override a config key (repeatable)");
  sub->add_option("--file", a->file, "Read the text from this file")->check(CLI::ExistingFile);
  sub->add_flag("--chat", a->chat, "The text is a user turn: render the Qwen3 chat template with the generation prompt");
  sub->add_option("--system", a->system, "With --chat: a system message first");
  sub->add_flag("--add-special-tokens", a->special, "Apply the tokenizer's post-processor (e.g. a BOS token)");
  sub->add_flag("--ids-only", a->ids_only, "Print only the ids, space-separated");
  return {sub, [a] {
            std::string path = a->tokenizer;
            if (path.empty() && !a->config.empty()) path = tokenizer_of_config(a->config, a->overrides);
            if (path.empty()) throw std::invalid_argument("tokenize: give --tokenizer or a --config with data.tokenizer");
            if (std::filesystem::is_directory(path)) path = (std::filesystem::path(path) / "tokenizer.json").string();
            std::string text = a->text;
            if (!a->file.empty()) {
              std::ifstream in(a->file, std::ios::binary);
              text.assign(std::istreambuf_iterator<char>(in), {});
            } else if (text.empty()) {
              text.assign(std::istreambuf_iterator<char>(std::cin), {});
            }
            text::BpeTokenizer tok = text::BpeTokenizer::from_file(path);
            std::vector<int32_t> ids;
            if (a->chat) {
              std::vector<text::ChatMessage> messages;
              if (!a->system.empty()) messages.push_back({"system", a->system, std::nullopt});
              messages.push_back({"user", text, std::nullopt});
              ids = text::encode_qwen3_generation_prompt(tok, messages, std::nullopt, "tokenize");
              text = text::render_qwen3_chat(messages, true, std::nullopt, "tokenize");
            } else {
              ids = tok.encode(text, a->special);
            }
            if (a->ids_only) {
              for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
              std::printf("\n");
              return 0;
            }
            std::printf("tokenizer %s (%d ids)\ntext %s\n%zu tokens\n", path.c_str(), tok.vocab_size(), json_quoted(text).c_str(),
                        ids.size());
            std::printf("%6s %8s  %-28s %s\n", "index", "id", "token", "text");
            for (size_t i = 0; i < ids.size(); ++i) {
              const std::string piece = tok.decode_bytes(&ids[i], 1);
              std::printf("%6zu %8d  %-28s %s%s\n", i, ids[i], json_quoted(tok.id_to_token(ids[i])).c_str(), json_quoted(piece).c_str(),
                          tok.is_special(ids[i]) ? "  (special)" : "");
            }
            std::printf("ids");
            for (int32_t id : ids) std::printf(" %d", id);
            std::printf("\ndecoded %s\n", json_quoted(tok.decode(ids)).c_str());
            return 0;
          }};
}

}  // namespace zeroshard::cli
