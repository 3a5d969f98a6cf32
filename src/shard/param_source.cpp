#include "zeroshard/param_source.h"

namespace zeroshard {

namespace {

class InitFunctionSource : public ParamSource {
 public:
  explicit InitFunctionSource(std::function<void(const std::string&, at::Tensor&)> fn) : fn_(std::move(fn)) {}

  void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) override {
    // The whole parameter is computed (its values depend on the generator's sequence), then
    // only the requested range kept.
    at::Tensor full = at::empty(param.shape, at::kFloat);
    fn_(param.name, full);
    out.copy_(full.reshape({-1}).narrow(0, begin, end - begin));
  }

 private:
  std::function<void(const std::string&, at::Tensor&)> fn_;
};

class CombinedSource : public ParamSource {
 public:
  CombinedSource(std::shared_ptr<ParamSource> first, std::shared_ptr<ParamSource> second,
                 std::function<bool(const std::string&)> take_from_second)
      : first_(std::move(first)), second_(std::move(second)), take_from_second_(std::move(take_from_second)) {}

  void check(const std::vector<ParamInfo>& params) override {
    std::vector<ParamInfo> a, b;
    for (const auto& p : params) (take_from_second_(p.name) ? b : a).push_back(p);
    first_->check(a);
    second_->check(b);
  }
  void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) override {
    (take_from_second_(param.name) ? second_ : first_)->read(param, begin, end, std::move(out));
  }
  ParamLocation locate(const ParamInfo& param) const override {
    return (take_from_second_(param.name) ? second_ : first_)->locate(param);
  }
  std::vector<std::string> notes() const override {
    std::vector<std::string> all = first_->notes(), more = second_->notes();
    all.insert(all.end(), more.begin(), more.end());
    return all;
  }

 private:
  std::shared_ptr<ParamSource> first_, second_;
  std::function<bool(const std::string&)> take_from_second_;
};

// Serves "<prefix>name" from a source that knows "name" (a sub-model's own file).
class PrefixedSource : public ParamSource {
 public:
  PrefixedSource(std::shared_ptr<ParamSource> inner, std::string prefix)
      : inner_(std::move(inner)), prefix_(std::move(prefix)) {}

  void check(const std::vector<ParamInfo>& params) override {
    std::vector<ParamInfo> stripped;
    for (const auto& p : params) stripped.push_back(strip(p));
    inner_->check(stripped);
  }
  void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) override {
    inner_->read(strip(param), begin, end, std::move(out));
  }
  ParamLocation locate(const ParamInfo& param) const override { return inner_->locate(strip(param)); }
  std::vector<std::string> notes() const override { return inner_->notes(); }

 private:
  ParamInfo strip(const ParamInfo& p) const {
    if (p.name.rfind(prefix_, 0) != 0) {
      throw std::invalid_argument("parameter '" + p.name + "' was routed to a source for '" + prefix_ + "*' only");
    }
    ParamInfo s = p;
    s.name = p.name.substr(prefix_.size());
    return s;
  }
  std::shared_ptr<ParamSource> inner_;
  std::string prefix_;
};

}  // namespace

std::shared_ptr<ParamSource> prefixed_param_source(std::shared_ptr<ParamSource> inner, const std::string& prefix) {
  return std::make_shared<PrefixedSource>(std::move(inner), prefix);
}

std::shared_ptr<ParamSource> combine_param_sources(std::shared_ptr<ParamSource> first,
                                                   std::shared_ptr<ParamSource> second,
                                                   std::function<bool(const std::string&)> take_from_second) {
  return std::make_shared<CombinedSource>(std::move(first), std::move(second), std::move(take_from_second));
}

std::shared_ptr<ParamSource> param_source_from_init(std::function<void(const std::string&, at::Tensor&)> fn) {
  return std::make_shared<InitFunctionSource>(std::move(fn));
}

}  // namespace zeroshard
