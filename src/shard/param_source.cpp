#include "zeroshard/shard.h"

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

}  // namespace

std::shared_ptr<ParamSource> param_source_from_init(std::function<void(const std::string&, at::Tensor&)> fn) {
  return std::make_shared<InitFunctionSource>(std::move(fn));
}

}  // namespace zeroshard
