#include "cli/foreign_args.h"

#include "cli/launch_or_run.h"

#include <stdexcept>

namespace zeroshard::cli {

void ForeignArgs::add_to(CLI::App* sub) {
  sub->add_option("--deepspeed", deepspeed_,
                  "A DeepSpeed config JSON: its keys become zeroshard settings, or are refused by name "
                  "(docs/foreign_configs.md; `zeroshard config show` lists what each became)")
      ->check(CLI::ExistingFile);
  sub->add_option("--accelerate-config,--accelerate_config", accelerate_,
                  "An accelerate config YAML (its deepspeed_config or deepspeed_config_file included), mapped "
                  "like --deepspeed")
      ->check(CLI::ExistingFile);
  for (const std::string& name : train::megatron_flag_names()) {
    std::string dashed = name;
    for (char& c : dashed) {
      if (c == '_') c = '-';
    }
    const std::string names = "--" + name + (dashed != name ? ",--" + dashed : std::string());
    CLI::Option* o = sub->add_option(names, "ms-swift / Megatron flag (alias; docs/foreign_configs.md)")
                         ->expected(0, 1)
                         ->group("ms-swift / Megatron aliases");
    megatron_.emplace_back(name, o);
  }
}

bool ForeignArgs::any() const {
  if (!deepspeed_.empty() || !accelerate_.empty()) return true;
  for (const auto& [name, o] : megatron_) {
    if (o->count() > 0) return true;
  }
  return false;
}

train::ForeignConfig ForeignArgs::read() const {
  train::ForeignConfig all;
  if (!deepspeed_.empty()) train::merge(all, train::read_deepspeed_config(deepspeed_));
  if (!accelerate_.empty()) train::merge(all, train::read_accelerate_config(accelerate_));
  std::vector<std::pair<std::string, std::string>> flags;
  for (const auto& [name, o] : megatron_) {
    if (o->count() == 0) continue;
    if (o->count() > 1) throw std::invalid_argument("--" + name + " given " + std::to_string(o->count()) + " times");
    const auto& r = o->results();
    // Megatron's store_true form: the flag alone means true.
    flags.emplace_back("--" + name, r.empty() || r[0].empty() ? std::string("true") : r[0]);
  }
  if (!flags.empty()) train::merge(all, train::megatron_flags(flags));
  return all;
}

std::vector<train::ConfigOverride> ForeignArgs::overrides(const train::ForeignConfig& foreign,
                                                          const std::vector<std::string>& user_sets) {
  std::vector<train::ConfigOverride> out;
  for (const auto& s : foreign.settings) {
    if (s.key.empty() || s.automatic) continue;
    out.push_back({s.key + "=" + s.value, s.source, true});
  }
  for (const auto& o : user_sets) out.push_back({o, "--set", false});
  return out;
}

int nproc_with_foreign(const train::ForeignConfig& foreign, int nproc, bool nproc_given) {
  if (!foreign.nproc) return nproc;
  const int want = *foreign.nproc;
  if (launch_env().in_job() && launch_env().world_size > 1) {
    if (launch_env().world_size != want) {
      throw std::invalid_argument(foreign.nproc_source + " = " + std::to_string(want) + ", but " +
                                  comm::launcher_name(launch_env().launcher) + " started " +
                                  std::to_string(launch_env().world_size) + " ranks; make them agree");
    }
    return nproc;
  }
  if (nproc_given && nproc != want) {
    throw std::invalid_argument(foreign.nproc_source + " = " + std::to_string(want) + " contradicts --nproc " +
                                std::to_string(nproc) + "; make them agree (or drop one)");
  }
  return want;
}

}  // namespace zeroshard::cli
