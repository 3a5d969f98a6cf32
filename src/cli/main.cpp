// The `zeroshard` command line: the subcommands live in src/cli/cmd_<name>.cpp.
#include "cli/command.h"
#include "cli/launch_or_run.h"
#include "util/heap.h"
#include "util/optional_parts.h"
#include "util/torch_version.h"
#include "zeroshard/comm.h"
#include "zeroshard/launch.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

// libtorch allocates activations, gradients and gathered parameters with malloc. glibc serves
// blocks above its mmap threshold (at most 32 MiB) with fresh mmaps, unmapped on free, and
// shrinks the heap when its free top grows past the trim threshold: either way the next block
// of that size is new memory that the kernel zero-fills page by page on first touch. Training
// reallocates the same sizes every step (a unit's fp32 gradient, the tied embedding's gathered
// copy and gradient, the logits), so that costs more than the math: 2.3 s -> 1.0 s per step on
// configs/llama/bench.yaml with the 32 MiB threshold, and, with every block kept in the heap
// and the heap never trimmed, 23% -> 6% of the machine's cycles in the kernel's page clearing
// at 8 layers of Qwen3-0.6B (docs/benchmarks.md). The heap then keeps its high-water mark for
// reuse, as a caching allocator would; it goes back to the system when the process exits.
// ZEROSHARD_MALLOC_DEFAULT=1 keeps glibc's defaults (src/util/heap.h).
void configure_allocator() { zeroshard::util::heap_for_steps(); }

// `zeroshard --version`: the libtorch it was built against and the optional parts it has.
std::string version_text() {
  std::string text = std::string("zeroshard, built against libtorch ") + TORCH_VERSION + "\noptional parts:\n" +
                     zeroshard::util::optional_parts_text();
  text.pop_back();  // CLI11 ends the line
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zeroshard::cli;
  configure_allocator();
  set_command_line(argc, argv);
  CLI::App app{"zeroshard: sharded data-parallel training (ZeRO 0-3) on libtorch + Gloo"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text());
  const std::vector<Command> commands = {add_train(app),  add_prepare(app), add_sample(app),
                                         add_export(app), add_inspect(app), add_config(app),
                                         add_report(app), add_reference_check(app), add_plan(app),
                                         add_tokenize(app), add_seed_weights(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error (an unknown option, a value out of range,
    // a missing argument) exits 1, as every other error does (docs/robustness.md).
    return app.exit(e) == 0 ? 0 : 1;
  }
  try {
    for (const auto& c : commands) {
      if (c.app->parsed()) return c.run();
    }
  } catch (const std::exception& e) {
    // libtorch errors print without their C++ backtrace; a rank that only lost a peer exits
    // with kExitPeerLost so the launcher blames the rank that failed first.
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    // " (rank N)" when a launcher started this process as one rank of several (its variables
    // refused name themselves in the message instead).
    std::string who;
    try {
      const auto& env = launch_env();
      if (env.world_size > 1) who = " (rank " + std::to_string(env.rank) + ")";
    } catch (const std::exception&) {
    }
    std::fprintf(stderr, "zeroshard: error%s: %s\n", who.c_str(), c10_error ? c10_error->what_without_backtrace() : e.what());
    return dynamic_cast<const zeroshard::CommError*>(&e) ? zeroshard::kExitPeerLost : 1;
  }
  return 0;
}
