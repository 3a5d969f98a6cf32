#include "nn/name_map.h"

#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

namespace zeroshard::nn {

namespace {

// A pattern as tokens: literal text, `*` (one dot-free component) or `**` (anything non-empty).
struct Token {
  enum Type { Literal, Star, DoubleStar } type = Literal;
  std::string text;
};

std::vector<Token> tokenize(const std::string& pattern) {
  std::vector<Token> out;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern[i] == '*') {
      const bool dbl = i + 1 < pattern.size() && pattern[i + 1] == '*';
      out.push_back({dbl ? Token::DoubleStar : Token::Star, ""});
      i += dbl ? 2 : 1;
      continue;
    }
    if (out.empty() || out.back().type != Token::Literal) out.push_back({Token::Literal, ""});
    out.back().text += pattern[i++];
  }
  return out;
}

std::string wildcards_of(const std::string& pattern) {
  std::string w;
  for (const auto& t : tokenize(pattern)) {
    if (t.type != Token::Literal) w += t.type == Token::Star ? "*," : "**,";
  }
  return w;
}

bool match_from(const std::vector<Token>& tokens, size_t ti, const std::string& name, size_t pos,
                std::vector<std::string>& captures) {
  if (ti == tokens.size()) return pos == name.size();
  const Token& t = tokens[ti];
  if (t.type == Token::Literal) {
    return name.compare(pos, t.text.size(), t.text) == 0 && match_from(tokens, ti + 1, name, pos + t.text.size(), captures);
  }
  // Longest first, at least one character; `*` stops at a dot.
  size_t limit = name.size();
  if (t.type == Token::Star) {
    const size_t dot = name.find('.', pos);
    limit = dot == std::string::npos ? name.size() : dot;
  }
  for (size_t end = limit; end > pos; --end) {
    captures.push_back(name.substr(pos, end - pos));
    if (match_from(tokens, ti + 1, name, end, captures)) return true;
    captures.pop_back();
  }
  return false;
}

bool match(const std::string& pattern, const std::string& name, std::vector<std::string>& captures) {
  captures.clear();
  return match_from(tokenize(pattern), 0, name, 0, captures);
}

std::string substitute(const std::string& pattern, const std::vector<std::string>& captures) {
  std::string out;
  size_t c = 0;
  for (const auto& t : tokenize(pattern)) {
    if (t.type == Token::Literal) {
      out += t.text;
    } else {
      if (c >= captures.size()) throw std::logic_error("name map: pattern '" + pattern + "' has more wildcards than matched");
      out += captures[c++];
    }
  }
  return out;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) { return io::shape_text(shape); }

// The dim-0 sizes of a fused tensor's pieces: from the rule's function, or equal pieces.
std::vector<int64_t> piece_rows(const NameMap::Rule& r, const std::vector<int64_t>& fused, size_t pieces,
                                const std::string& name) {
  if (fused.empty()) throw std::invalid_argument("name map: '" + name + "' is a scalar; it cannot be cut along dim 0");
  std::vector<int64_t> rows;
  if (r.rows) {
    rows = r.rows(fused);
  } else {
    if (fused[0] % static_cast<int64_t>(pieces) != 0) {
      throw std::invalid_argument("name map: '" + name + "' " + shape_str(fused) + " does not split into " +
                                  std::to_string(pieces) + " equal pieces along dim 0");
    }
    rows.assign(pieces, fused[0] / static_cast<int64_t>(pieces));
  }
  int64_t sum = 0;
  for (int64_t x : rows) sum += x;
  if (rows.size() != pieces || sum != fused[0]) {
    throw std::invalid_argument("name map: the pieces of '" + name + "' " + shape_str(fused) +
                                " do not add up to its dim 0 (" + std::to_string(rows.size()) + " pieces, " +
                                std::to_string(sum) + " rows)");
  }
  return rows;
}

at::Tensor swap_dim0_halves(const at::Tensor& t, const std::string& name) {
  if (t.dim() == 0 || t.size(0) % 2 != 0) {
    throw std::invalid_argument("name map: '" + name + "' " + shape_str(t.sizes().vec()) +
                                " has no two equal halves along dim 0 to swap");
  }
  const int64_t h = t.size(0) / 2;
  return at::cat({t.narrow(0, h, h), t.narrow(0, 0, h)}, 0);
}

}  // namespace

// --- rules ------------------------------------------------------------------------------------

namespace {
void check_same_wildcards(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const std::string w = wildcards_of(a.at(0));
  for (const auto* side : {&a, &b}) {
    for (const auto& p : *side) {
      if (wildcards_of(p) != w) {
        throw std::invalid_argument("name map: patterns '" + a.at(0) + "' and '" + p +
                                    "' do not hold the same wildcards in the same order");
      }
    }
  }
}
}  // namespace

NameMap& NameMap::rename(const std::string& ours, const std::string& theirs) {
  check_same_wildcards({ours}, {theirs});
  rules_.push_back({Kind::Rename, {ours}, {theirs}, {}, {}, {}, {}});
  return *this;
}

NameMap& NameMap::reshape(const std::string& ours, const std::string& theirs, ShapeFn to_theirs, ShapeFn to_ours) {
  check_same_wildcards({ours}, {theirs});
  if (!to_theirs || !to_ours) throw std::invalid_argument("name map: reshape '" + ours + "' needs both shape functions");
  rules_.push_back({Kind::Rename, {ours}, {theirs}, std::move(to_theirs), std::move(to_ours), {}, {}});
  return *this;
}

NameMap& NameMap::concat(const std::string& ours, const std::vector<std::string>& theirs, RowsFn rows) {
  if (theirs.size() < 2) throw std::invalid_argument("name map: concat '" + ours + "' needs at least two pieces");
  check_same_wildcards({ours}, theirs);
  rules_.push_back({Kind::Concat, {ours}, theirs, {}, {}, std::move(rows), {}});
  return *this;
}

NameMap& NameMap::split(const std::vector<std::string>& ours, const std::string& theirs, RowsFn rows) {
  if (ours.size() < 2) throw std::invalid_argument("name map: split '" + theirs + "' needs at least two pieces");
  check_same_wildcards(ours, {theirs});
  rules_.push_back({Kind::Split, ours, {theirs}, {}, {}, std::move(rows), {}});
  return *this;
}

NameMap& NameMap::swap_halves(const std::string& ours, const std::string& theirs) {
  check_same_wildcards({ours}, {theirs});
  rules_.push_back({Kind::SwapHalves, {ours}, {theirs}, {}, {}, {}, {}});
  return *this;
}

NameMap& NameMap::add(const Rule& rule) {
  rules_.push_back(rule);
  return *this;
}

NameMap& NameMap::ignore(const std::string& theirs, const std::string& why) {
  if (why.empty()) throw std::invalid_argument("name map: ignore '" + theirs + "' needs its reason");
  rules_.push_back({Kind::Ignore, {}, {theirs}, {}, {}, {}, why});
  return *this;
}

// --- resolution -------------------------------------------------------------------------------

namespace {
// `from` / `to`: the rule's patterns on the name's side / the other side.
NameMap::Resolved resolve(const std::vector<NameMap::Rule>& rules, const std::string& name, bool from_ours) {
  std::vector<std::string> caps;
  for (const auto& r : rules) {
    const auto& from = from_ours ? r.ours : r.theirs;
    const auto& to = from_ours ? r.theirs : r.ours;
    for (size_t i = 0; i < from.size(); ++i) {
      if (!match(from[i], name, caps)) continue;
      NameMap::Resolved out;
      out.rule = &r;
      for (const auto& p : to) out.other.push_back(substitute(p, caps));
      if (from.size() > 1) {
        for (const auto& p : from) out.siblings.push_back(substitute(p, caps));
        out.piece = i;
      }
      return out;
    }
  }
  NameMap::Resolved same;
  same.other = {name};
  return same;
}
}  // namespace

NameMap::Resolved NameMap::resolve_ours(const std::string& name) const { return resolve(rules_, name, true); }
NameMap::Resolved NameMap::resolve_theirs(const std::string& name) const { return resolve(rules_, name, false); }

std::string NameMap::their_name(const std::string& ours) const {
  const Resolved r = resolve_ours(ours);
  if (r.other.size() != 1 || !r.siblings.empty()) {
    throw std::invalid_argument("name map: '" + ours + "' is part of a concatenated tensor; it has no single name on the other side");
  }
  return r.other[0];
}

std::string NameMap::our_name(const std::string& theirs) const {
  const Resolved r = resolve_theirs(theirs);
  if (r.rule != nullptr && r.rule->kind == Kind::Ignore) {
    throw std::invalid_argument("name map: '" + theirs + "' is not a tensor of ours (ignored: " + r.rule->why + ")");
  }
  if (r.other.size() != 1 || !r.siblings.empty()) {
    throw std::invalid_argument("name map: '" + theirs + "' is part of a concatenated tensor; it has no single name on the other side");
  }
  return r.other[0];
}

// --- whole tensors ----------------------------------------------------------------------------

namespace {

// Converts every tensor of `in` to the other side (from_ours: ours -> theirs), then checks that
// each produced name resolves back to what it came from (the map is a bijection on these names).
std::map<std::string, at::Tensor> convert(const NameMap& map, const std::map<std::string, at::Tensor>& in,
                                          bool from_ours) {
  const char* side = from_ours ? "our" : "their";
  std::map<std::string, at::Tensor> out;
  std::map<std::string, std::vector<std::string>> origin;  // produced name -> the input names it came from
  auto put = [&](const std::string& name, const at::Tensor& t, std::vector<std::string> from) {
    if (!out.emplace(name, t).second) {
      throw std::invalid_argument(std::string("name map: two ") + side + " tensors map to '" + name + "' (one is '" +
                                  from.at(0) + "')");
    }
    origin[name] = std::move(from);
  };
  for (const auto& [name, t] : in) {
    const NameMap::Resolved r = from_ours ? map.resolve_ours(name) : map.resolve_theirs(name);
    if (r.rule == nullptr) {
      put(name, t, {name});
      continue;
    }
    const NameMap::Rule& rule = *r.rule;
    if (rule.kind == NameMap::Kind::Ignore) continue;  // their tensor that is not ours
    if (rule.kind == NameMap::Kind::Rename) {
      const ShapeFn& fn = from_ours ? rule.to_theirs : rule.to_ours;
      at::Tensor v = t;
      if (fn) {
        const std::vector<int64_t> shape = fn(t.sizes().vec());
        if (numel_of(shape) != t.numel()) {
          throw std::invalid_argument("name map: reshape of '" + name + "' " + shape_str(t.sizes().vec()) + " to " +
                                      shape_str(shape) + " changes its element count");
        }
        v = t.reshape(shape);
      }
      put(r.other[0], v, {name});
    } else if (rule.kind == NameMap::Kind::SwapHalves) {
      put(r.other[0], swap_dim0_halves(t, name), {name});
    } else if (r.siblings.empty()) {
      // `name` is fused; the other side holds it as pieces: cut it.
      const std::vector<int64_t> rows = piece_rows(rule, t.sizes().vec(), r.other.size(), name);
      int64_t at_row = 0;
      for (size_t i = 0; i < r.other.size(); ++i) {
        put(r.other[i], t.narrow(0, at_row, rows[i]).contiguous(), {name});
        at_row += rows[i];
      }
    } else {
      // `name` is one piece of a tensor fused on the other side: the first piece builds it.
      if (r.piece != 0) {
        if (in.count(r.siblings[0]) == 0) {
          throw std::invalid_argument(std::string("name map: ") + side + " tensor '" + name + "' is a piece of '" +
                                      r.other[0] + "', but its first piece '" + r.siblings[0] + "' is missing");
        }
        continue;
      }
      std::vector<at::Tensor> pieces;
      for (const auto& s : r.siblings) {
        const auto it = in.find(s);
        if (it == in.end()) {
          throw std::invalid_argument(std::string("name map: ") + side + " tensor '" + s + "' is missing: '" +
                                      r.other[0] + "' is concatenated from " + std::to_string(r.siblings.size()) +
                                      " pieces");
        }
        pieces.push_back(it->second);
      }
      put(r.other[0], at::cat(pieces, 0), r.siblings);
    }
  }
  // The inverse must lead back: every produced name resolves to the names it came from.
  for (const auto& [name, from] : origin) {
    const NameMap::Resolved back = from_ours ? map.resolve_theirs(name) : map.resolve_ours(name);
    bool ok = false;
    if (!back.siblings.empty()) {
      ok = from.size() == 1 && back.other.size() == 1 && back.other[0] == from[0];  // a piece of a fused input
    } else {
      ok = back.other == from;
    }
    if (!ok) {
      throw std::invalid_argument("name map: not invertible on '" + from.at(0) + "': it maps to '" + name +
                                  "', which maps back to '" + back.other.at(0) +
                                  "' (a rule's output collides with a name another rule or the identity produces)");
    }
  }
  return out;
}

}  // namespace

std::map<std::string, at::Tensor> NameMap::to_theirs(const std::map<std::string, at::Tensor>& ours) const {
  return convert(*this, ours, true);
}

std::map<std::string, at::Tensor> NameMap::to_ours(const std::map<std::string, at::Tensor>& theirs) const {
  return convert(*this, theirs, false);
}

// --- the parameter source ---------------------------------------------------------------------

namespace {

class NameMappedSource : public ParamSource {
 public:
  NameMappedSource(const std::string& path, NameMap map) : set_(path), path_(set_.path()), map_(std::move(map)) {
    // Their tensors the map ignores, counted per rule (in the rules' order) for notes().
    std::map<const NameMap::Rule*, int64_t> ignored;
    for (const auto& [name, w] : set_.tensors()) {
      const NameMap::Resolved r = map_.resolve_theirs(name);
      if (r.rule != nullptr && r.rule->kind == NameMap::Kind::Ignore) ++ignored[r.rule];
    }
    for (const auto& rule : map_.rules()) {
      const auto it = ignored.find(&rule);
      if (it == ignored.end()) continue;
      notes_.push_back(path_ + ": " + std::to_string(it->second) + " tensor" + (it->second == 1 ? "" : "s") + " '" +
                       rule.theirs.at(0) + "' left unread (" + rule.why + ")");
    }
  }

  std::vector<std::string> notes() const override { return notes_; }

  void check(const std::vector<ParamInfo>& params) override {
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& p : params) shapes[p.name] = p.shape;
    std::set<std::string> used;
    plans_.clear();
    for (const auto& p : params) plans_[p.name] = plan(p, shapes, used);
    for (const auto& [name, w] : set_.tensors()) {
      if (used.count(name)) continue;
      std::string ours;
      try {
        const NameMap::Resolved r = map_.resolve_theirs(name);
        if (r.rule != nullptr && r.rule->kind == NameMap::Kind::Ignore) continue;  // counted in notes()
        ours = r.other.empty() ? "" : r.other[0];
      } catch (const std::exception&) {
      }
      throw std::runtime_error(w.file->path() + ": tensor '" + name + "' is not a parameter of this model" +
                               (ours.empty() ? "" : " (through the name map it would be '" + ours + "')") +
                               " (wrong model config, or a file for another model)");
    }
  }

  void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) override {
    const auto it = plans_.find(param.name);
    if (it == plans_.end()) {
      throw std::logic_error(path_ + ": parameter '" + param.name + "' read before check() planned it");
    }
    at::Tensor flat = out.view({-1});
    for (const Segment& s : it->second) {
      const int64_t lo = std::max(begin, s.our_begin), hi = std::min(end, s.our_begin + s.length);
      if (lo >= hi) continue;
      s.file->read_range(*s.entry, s.their_begin + (lo - s.our_begin), s.their_begin + (hi - s.our_begin),
                         flat.narrow(0, lo - begin, hi - lo));
    }
  }

  // Whole where one segment is all of the parameter (a rename, a reshape, a piece of a fused
  // tensor); pieces concatenated or halves swapped are read with a conversion.
  ParamLocation locate(const ParamInfo& param) const override {
    const auto it = plans_.find(param.name);
    if (it == plans_.end() || it->second.empty()) return {};
    const Segment& s = it->second.front();
    ParamLocation l = s.file->location(*s.entry, s.their_begin);
    l.whole = it->second.size() == 1 && s.our_begin == 0 && s.length == numel_of(param.shape);
    for (const Segment& other : it->second) {
      const std::string& f = other.file->path();
      if (f != l.file && std::find(l.also_reads.begin(), l.also_reads.end(), f) == l.also_reads.end()) {
        l.also_reads.push_back(f);
      }
    }
    return l;
  }

 private:
  // Elements [our_begin, our_begin + length) of our parameter are elements [their_begin, ...)
  // of their tensor `entry`.
  struct Segment {
    const io::SafetensorsFile* file;
    const io::TensorEntry* entry;
    int64_t their_begin, our_begin, length;
  };

  const io::SafetensorsSet::Where& find(const std::string& theirs, const ParamInfo& p) const {
    const io::SafetensorsSet::Where* w = set_.find(theirs);
    if (w == nullptr) {
      const auto& all = set_.tensors();
      throw std::runtime_error(path_ + ": has no tensor '" + theirs + "' (our parameter '" + p.name + "', shape " +
                               shape_str(p.shape) + ", through the name map); it holds " + std::to_string(all.size()) +
                               " tensors" + (all.empty() ? "" : ", e.g. '" + all.begin()->first + "'"));
    }
    const auto& e = *w->entry;
    if (e.dtype != at::kFloat && e.dtype != at::kBFloat16 && e.dtype != at::kHalf && e.dtype != at::kDouble) {
      throw std::runtime_error(w->file->path() + ": tensor '" + theirs + "' has dtype " +
                               io::safetensors_dtype(e.dtype) + "; parameters load from F32, BF16, F16 or F64");
    }
    return *w;
  }

  [[noreturn]] void shape_error(const ParamInfo& p, const std::string& theirs, const std::vector<int64_t>& have,
                                const std::string& expected) const {
    throw std::runtime_error(path_ + ": tensor '" + theirs + "' has shape " + shape_str(have) + " but our parameter '" +
                             p.name + "' " + shape_str(p.shape) + " needs " + expected);
  }

  std::vector<Segment> plan(const ParamInfo& p, const std::map<std::string, std::vector<int64_t>>& shapes,
                            std::set<std::string>& used) const {
    const NameMap::Resolved r = map_.resolve_ours(p.name);
    const int64_t n = numel_of(p.shape);
    std::vector<Segment> segs;
    auto trailing = [](const std::vector<int64_t>& s) { return std::vector<int64_t>(s.begin() + (s.empty() ? 0 : 1), s.end()); };
    if (r.rule == nullptr || r.rule->kind == NameMap::Kind::Rename || r.rule->kind == NameMap::Kind::SwapHalves) {
      const std::string& theirs = r.other.at(0);
      const auto& [file, e] = find(theirs, p);
      std::vector<int64_t> expect = p.shape;
      if (r.rule != nullptr && r.rule->to_theirs) expect = r.rule->to_theirs(p.shape);
      if (e->shape != expect || numel_of(expect) != n) shape_error(p, theirs, e->shape, shape_str(expect));
      if (r.rule != nullptr && r.rule->kind == NameMap::Kind::SwapHalves) {
        if (p.shape.empty() || p.shape[0] % 2 != 0) shape_error(p, theirs, e->shape, "an even dim 0 to swap halves");
        segs.push_back({file, e, n / 2, 0, n / 2});
        segs.push_back({file, e, 0, n / 2, n / 2});
      } else {
        segs.push_back({file, e, 0, 0, n});
      }
      used.insert(theirs);
    } else if (r.siblings.empty()) {
      // Ours is their pieces concatenated along dim 0.
      int64_t rows = 0, at_elem = 0;
      for (const auto& theirs : r.other) {
        const auto& [file, e] = find(theirs, p);
        if (e->shape.empty() || trailing(e->shape) != trailing(p.shape)) {
          shape_error(p, theirs, e->shape, "the trailing dimensions " + shape_str(trailing(p.shape)));
        }
        segs.push_back({file, e, 0, at_elem, e->numel()});
        rows += e->shape[0];
        at_elem += e->numel();
        used.insert(theirs);
      }
      if (p.shape.empty() || rows != p.shape[0]) {
        shape_error(p, r.other.back(), {}, std::to_string(p.shape.empty() ? 0 : p.shape[0]) +
                                               " rows from its pieces, they hold " + std::to_string(rows));
      }
    } else {
      // Ours is one dim-0 piece of their fused tensor: after its siblings before it.
      const std::string& theirs = r.other.at(0);
      const auto& [file, e] = find(theirs, p);
      int64_t offset = 0, rows = 0;
      for (size_t i = 0; i < r.siblings.size(); ++i) {
        const auto it = shapes.find(r.siblings[i]);
        if (it == shapes.end()) {
          throw std::runtime_error(path_ + ": our parameter '" + p.name + "' is cut from '" + theirs +
                                   "' after '" + r.siblings[i] + "', which is not a parameter of this model");
        }
        if (it->second.empty() || trailing(it->second) != trailing(e->shape)) {
          shape_error(p, theirs, e->shape, "the trailing dimensions of its piece '" + r.siblings[i] + "' " +
                                               shape_str(it->second));
        }
        if (i < r.piece) offset += numel_of(it->second);
        rows += it->second[0];
      }
      if (rows != e->shape[0]) {
        shape_error(p, theirs, e->shape, std::to_string(rows) + " rows in all (its pieces' rows summed)");
      }
      segs.push_back({file, e, offset, 0, n});
      used.insert(theirs);
    }
    return segs;
  }

  io::SafetensorsSet set_;
  std::string path_;
  NameMap map_;
  std::vector<std::string> notes_;
  std::map<std::string, std::vector<Segment>> plans_;
};

}  // namespace

std::shared_ptr<ParamSource> name_mapped_param_source(const std::string& path, NameMap map) {
  return std::make_shared<NameMappedSource>(path, std::move(map));
}

}  // namespace zeroshard::nn
