// `zeroshard reference-check CASE_DIR`: a model against an upstream reference case
// (src/reference/reference_check.h).
#include "cli/command.h"
#include "reference/reference_check.h"

#include <cstdio>
#include <iostream>

namespace zeroshard::cli {

Command add_reference_check(CLI::App& app) {
  struct Args {
    std::string dir, dtype = "fp32";
    bool list = false, quiet = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "reference-check",
      "Check a model against a reference case (config.json, model/inputs/expected.safetensors computed with the "
      "upstream code): prints max|diff|/max|ref| per output and gradient, exits 1 beyond the case's tolerance");
  sub->add_option("case", a->dir, "The case folder");
  sub->add_option("--dtype", a->dtype, "fp32 (the tolerance applies) or fp64 (convention bugs stand out)")
      ->check(CLI::IsMember({"fp32", "fp64"}));
  sub->add_flag("--list", a->list, "List the known case kinds");
  sub->add_flag("--quiet", a->quiet, "Print only the tensors beyond tolerance and the summary");
  return {sub, [a] {
            if (a->list) {
              for (const auto& k : reference::reference_kinds()) std::printf("%-24s %s\n", k.kind.c_str(), k.what.c_str());
              return 0;
            }
            if (a->dir.empty()) throw std::invalid_argument("reference-check: give a case folder (or --list)");
            reference::CheckOptions co;
            co.dtype = a->dtype == "fp64" ? at::kDouble : at::kFloat;
            co.verbose = !a->quiet;
            return reference::reference_check(a->dir, std::cout, co) ? 0 : 1;
          }};
}

}  // namespace zeroshard::cli
