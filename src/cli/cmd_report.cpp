// `zeroshard report`: runs as one static HTML page with SVG charts (src/report/).
#include "cli/command.h"
#include "report/report.h"

#include <cstdio>

namespace zeroshard::cli {

Command add_report(CLI::App& app) {
  struct Args {
    std::vector<std::string> runs;
    std::string out = "report.html";
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("report", "Render runs as one self-contained HTML page with SVG charts");
  sub->add_option("runs", a->runs, "Run folders (with metrics.jsonl) to compare")->required();
  sub->add_option("-o,--output", a->out, "The HTML file to write");
  return {sub, [a] {
            report::write_report(a->runs, a->out);
            std::printf("wrote %s (%zu runs)\n", a->out.c_str(), a->runs.size());
            return 0;
          }};
}

}  // namespace zeroshard::cli
