#include "train/config_keys.h"

#include "util/text.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <stdexcept>

namespace zeroshard::train {

std::string float_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

void ConfigKeys::add(ConfigKey key) {
  if (find(key.name) != nullptr) throw std::logic_error("config key '" + key.name + "' registered twice");
  keys_.push_back(std::move(key));
}

void ConfigKeys::add_int(const std::string& name, int64_t* p, int64_t lo, int64_t hi, const std::string& help) {
  add({name, "int", "integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", help, model_scope_,
       [=](const std::string& v) {
         size_t used = 0;
         long long x = 0;
         try {
           x = std::stoll(v, &used);
         } catch (...) {
           used = 0;
         }
         if (used != v.size() || v.empty()) throw std::invalid_argument("'" + v + "' is not an integer");
         if (x < lo || x > hi) {
           throw std::invalid_argument(v + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
         }
         *p = x;
       },
       [=] { return std::to_string(*p); }});
}

void ConfigKeys::add_float(const std::string& name, double* p, double lo, double hi, const std::string& help) {
  add({name, "float", "number in [" + float_text(lo) + ", " + float_text(hi) + "]", help, model_scope_,
       [=](const std::string& v) {
         size_t used = 0;
         double x = 0;
         try {
           x = std::stod(v, &used);
         } catch (...) {
           used = 0;
         }
         if (used != v.size() || v.empty()) throw std::invalid_argument("'" + v + "' is not a number");
         if (!(x >= lo && x <= hi)) {
           throw std::invalid_argument(v + " is out of range [" + float_text(lo) + ", " + float_text(hi) + "]");
         }
         *p = x;
       },
       [=] { return float_text(*p); }});
}

void ConfigKeys::add_bool(const std::string& name, bool* p, const std::string& help) {
  add({name, "bool", "true or false", help, model_scope_,
       [=](const std::string& v) {
         if (v == "true" || v == "1" || v == "yes" || v == "on") *p = true;
         else if (v == "false" || v == "0" || v == "no" || v == "off") *p = false;
         else throw std::invalid_argument("'" + v + "' is not a boolean (true/false)");
       },
       [=] { return std::string(*p ? "true" : "false"); }});
}

void ConfigKeys::add_string(const std::string& name, std::string* p, std::vector<std::string> choices,
                            const std::string& help) {
  std::string allowed = "any string";
  if (!choices.empty()) {
    allowed = "one of:";
    for (auto& ch : choices) allowed += " " + ch;
  }
  add({name, "string", allowed, help, model_scope_,
       [=](const std::string& v) {
         if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end()) {
           throw std::invalid_argument("'" + v + "' is not allowed");
         }
         *p = v;
       },
       [=] { return *p; }});
}

void ConfigKeys::add_custom(const std::string& name, const std::string& type, const std::string& allowed,
                            const std::string& help, std::function<void(const std::string&)> set,
                            std::function<std::string()> get) {
  add({name, type, allowed, help, model_scope_, std::move(set), std::move(get)});
}

void ConfigKeys::add_path(const std::string& name, std::string* p, const std::string& help) {
  add({name, "path", "a file or folder (in a config file: relative to the file's folder)", help, model_scope_,
       [=](const std::string& v) { *p = v; }, [=] { return *p; }});
}

std::string resolve_config_paths(const ConfigKey& key, const std::string& value, const std::string& config_file) {
  namespace fs = std::filesystem;
  const fs::path folder = fs::path(config_file).parent_path();
  auto resolve = [&folder](const std::string& item) {
    if (item.empty() || folder.empty() || fs::path(item).is_absolute()) return item;
    return (folder / item).lexically_normal().string();
  };
  if (key.type == "path") return resolve(value);
  if (key.type != "paths") return value;
  std::vector<std::string> items = util::split_trimmed(value);
  for (std::string& item : items) {
    char* end = nullptr;
    (void)std::strtod(item.c_str(), &end);
    const bool number = !item.empty() && end == item.c_str() + item.size();  // a weight (data.datasets)
    if (!number) item = resolve(item);
  }
  return util::join(items, ",");
}

const ConfigKey* ConfigKeys::find(const std::string& name) const {
  for (const auto& k : keys_) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string closest_name(const std::string& name, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& k : names) {
    size_t d = edit_distance(name, k);
    // also compare the last path component, so "train.stpes" and "stpes" both find train.steps
    const auto dot = k.rfind('.');
    if (dot != std::string::npos) d = std::min(d, edit_distance(name, k.substr(dot + 1)) + 1);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

const ConfigKey& ConfigKeys::get(const std::string& name, const std::string& where) const {
  if (const ConfigKey* k = find(name)) return *k;
  std::vector<std::string> names;
  for (const auto& k : keys_) names.push_back(k.name);
  const std::string best = closest_name(name, names);
  throw std::invalid_argument(where + ": unknown config key '" + name + "'" +
                              (best.empty() ? std::string() : "; did you mean '" + best + "'?"));
}

}  // namespace zeroshard::train
