// Slurm's list syntaxes: hostlist expressions ("node[01-03,07],gpu5") and compressed
// per-node counts ("2(x3),1"). Declared in comm/launch_env.h.
#include "comm/launch_env.h"
#include "util/text.h"

#include <cctype>
#include <limits>
#include <stdexcept>

namespace zeroshard::comm {
namespace {

constexpr size_t kMaxHosts = 1 << 20;  // a list expanding past this is a typo, not a cluster

uint64_t parse_count(const std::string& what, const std::string& v) {
  if (!util::all_digits(v) || v.size() > 18) {
    throw std::invalid_argument(what + ": '" + v + "' is not a non-negative integer");
  }
  return std::stoull(v);
}

// Splits at commas outside brackets.
std::vector<std::string> split_top(const std::string& expr, const std::string& what) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : expr) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) throw std::invalid_argument(what + " '" + expr + "': unbalanced or nested brackets");
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) throw std::invalid_argument(what + " '" + expr + "': unclosed '['");
  out.push_back(cur);
  for (const auto& item : out) {
    if (item.empty()) throw std::invalid_argument(what + " '" + expr + "': empty entry");
  }
  return out;
}

// "01-03" or "7": the numbers, zero-padded to the written width of the low bound.
void expand_range(const std::string& range, const std::string& expr, std::vector<std::string>& out) {
  const auto dash = range.find('-');
  const std::string lo_text = range.substr(0, dash);
  const std::string hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
  if (!util::all_digits(lo_text) || !util::all_digits(hi_text) || lo_text.size() > 18 || hi_text.size() > 18) {
    throw std::invalid_argument("hostlist '" + expr + "': '" + range + "' is not a number or a range lo-hi");
  }
  const uint64_t lo = std::stoull(lo_text), hi = std::stoull(hi_text);
  if (hi < lo) throw std::invalid_argument("hostlist '" + expr + "': range '" + range + "' runs backwards");
  if (hi - lo >= kMaxHosts) throw std::invalid_argument("hostlist '" + expr + "': range '" + range + "' is too long");
  for (uint64_t i = lo; i <= hi; ++i) {
    std::string s = std::to_string(i);
    if (s.size() < lo_text.size()) s.insert(0, lo_text.size() - s.size(), '0');
    out.push_back(s);
  }
}

// One name with brackets: literal pieces and, per bracket, its list of alternatives.
struct Pattern {
  std::vector<std::string> literals;               // literals.size() == groups.size() + 1
  std::vector<std::vector<std::string>> groups;
};

Pattern parse_pattern(const std::string& item, const std::string& expr) {
  Pattern p;
  p.literals.emplace_back();
  size_t i = 0;
  while (i < item.size()) {
    if (item[i] == '[') {
      const auto close = item.find(']', i);
      const std::string body = item.substr(i + 1, close - i - 1);
      if (body.empty()) throw std::invalid_argument("hostlist '" + expr + "': empty brackets");
      std::vector<std::string> alts;
      size_t start = 0;
      while (true) {
        const auto comma = body.find(',', start);
        expand_range(body.substr(start, comma - start), expr, alts);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      p.groups.push_back(std::move(alts));
      p.literals.emplace_back();
      i = close + 1;
    } else {
      p.literals.back() += item[i++];
    }
  }
  return p;
}

std::string pattern_name(const Pattern& p, const std::vector<size_t>& pick) {
  std::string s = p.literals[0];
  for (size_t g = 0; g < p.groups.size(); ++g) s += p.groups[g][pick[g]] + p.literals[g + 1];
  return s;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& expr) {
  std::vector<std::string> out;
  for (const std::string& item : split_top(expr, "hostlist")) {
    const Pattern p = parse_pattern(item, expr);
    std::vector<size_t> pick(p.groups.size(), 0);
    while (true) {
      out.push_back(pattern_name(p, pick));
      if (out.size() > kMaxHosts) throw std::invalid_argument("hostlist '" + expr + "' expands to too many hosts");
      // Odometer: the last bracket varies fastest; done when every bracket wrapped around.
      bool done = true;
      for (size_t g = p.groups.size(); g-- > 0;) {
        if (++pick[g] < p.groups[g].size()) {
          done = false;
          break;
        }
        pick[g] = 0;
      }
      if (done) break;
    }
  }
  return out;
}

std::string first_host(const std::string& expr) {
  const std::string item = split_top(expr, "hostlist").front();
  const Pattern p = parse_pattern(item, expr);
  return pattern_name(p, std::vector<size_t>(p.groups.size(), 0));
}

std::vector<int> expand_tasks_per_node(const std::string& expr) {
  std::vector<int> out;
  for (const std::string& item : split_top(expr, "tasks per node")) {
    const auto paren = item.find('(');
    const std::string count_text = item.substr(0, paren);
    uint64_t repeat = 1;
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') {
        throw std::invalid_argument("tasks per node '" + expr + "': '" + item + "' is not N or N(xM)");
      }
      repeat = parse_count("tasks per node '" + expr + "' repeat", item.substr(paren + 2, item.size() - paren - 3));
    }
    const uint64_t count = parse_count("tasks per node '" + expr + "' count", count_text);
    if (count < 1 || count > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      throw std::invalid_argument("tasks per node '" + expr + "': count '" + count_text + "' out of range");
    }
    if (repeat < 1 || repeat > kMaxHosts || out.size() + repeat > kMaxHosts) {
      throw std::invalid_argument("tasks per node '" + expr + "': repeat count in '" + item + "' out of range");
    }
    out.insert(out.end(), repeat, static_cast<int>(count));
  }
  return out;
}

}  // namespace zeroshard::comm
