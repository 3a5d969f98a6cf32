// Typed config keys: a name ("train.steps": YAML nesting = the dotted --set path), a type, the
// range or choices it accepts, a help line, and setters/getters bound to a field of a config
// struct. The trainer's sections and each model series register their keys here (the series in
// their own folder), so loading, `config show`, config.json and the resume check iterate one list.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::train {

struct ConfigKey {
  std::string name;
  // int, float, bool, string, enum, list; path (a file or folder) and paths (a list of them, numbers
  // among them kept as they are): written in a config file, a relative one is relative to that
  // file's folder (resolve_config_paths).
  std::string type;
  std::string allowed;  // human-readable range or choices
  std::string help;
  // Describes the model (a checkpoint's model must agree with it on resume; `sample` rebuilds the
  // model from these) rather than where its first values came from or how it is trained.
  bool describes_model = false;
  std::function<void(const std::string&)> set;  // throws std::invalid_argument saying what is wrong
  std::function<std::string()> get;
};

class ConfigKeys {
 public:
  // Keys registered while a scope is open describe the model (ConfigKey::describes_model).
  class ModelScope {
   public:
    explicit ModelScope(ConfigKeys& k) : keys_(k), previous_(k.model_scope_) { k.model_scope_ = true; }
    ~ModelScope() { keys_.model_scope_ = previous_; }
    ModelScope(const ModelScope&) = delete;
    ModelScope& operator=(const ModelScope&) = delete;

   private:
    ConfigKeys& keys_;
    bool previous_;
  };

  void add_int(const std::string& name, int64_t* field, int64_t lo, int64_t hi, const std::string& help);
  void add_float(const std::string& name, double* field, double lo, double hi, const std::string& help);
  void add_bool(const std::string& name, bool* field, const std::string& help);
  // choices empty: any string.
  void add_string(const std::string& name, std::string* field, std::vector<std::string> choices,
                  const std::string& help);
  // A file or folder (type "path").
  void add_path(const std::string& name, std::string* field, const std::string& help);
  // An enum parsed once from its names.
  template <class E>
  void add_enum(const std::string& name, E* field, std::vector<std::pair<std::string, E>> choices,
                const std::string& help) {
    std::string allowed = "one of:";
    for (const auto& c : choices) allowed += " " + c.first;
    add({name, "enum", allowed, help, model_scope_,
         [field, choices](const std::string& v) {
           for (const auto& c : choices) {
             if (c.first == v) {
               *field = c.second;
               return;
             }
           }
           throw std::invalid_argument("'" + v + "' is not allowed");
         },
         [field, choices] {
           for (const auto& c : choices) {
             if (c.second == *field) return c.first;
           }
           return std::string("?");
         }});
  }
  // Anything else (lists, aliases): the caller's parser and printer.
  void add_custom(const std::string& name, const std::string& type, const std::string& allowed, const std::string& help,
                  std::function<void(const std::string&)> set, std::function<std::string()> get);

  const std::vector<ConfigKey>& all() const { return keys_; }
  const ConfigKey* find(const std::string& name) const;
  // The key, or std::invalid_argument "<where>: unknown config key 'x'; did you mean 'y'?".
  const ConfigKey& get(const std::string& name, const std::string& where) const;

 private:
  void add(ConfigKey key);
  std::vector<ConfigKey> keys_;
  bool model_scope_ = false;
};

// `value` of a key of type path or paths, as written in the config file `config_file`: each
// relative path joined to the file's folder (lexically normal; absolute ones and, in a paths list,
// numbers kept as they are). Other types: `value` unchanged.
std::string resolve_config_paths(const ConfigKey& key, const std::string& value, const std::string& config_file);

// Shortest text that parses back to the same double.
std::string float_text(double v);
// The closest of `names` to `name` (edit distance, also against each name's last component).
std::string closest_name(const std::string& name, const std::vector<std::string>& names);

}  // namespace zeroshard::train
