// `zeroshard report` on the four strategies' parity runs, rendered by headless Chromium.
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>

#include <regex>

using namespace zeroshard::testing;

namespace {

// The text of every <section id="..."> ... </section>.
std::map<std::string, std::string> sections(const std::string& html) {
  std::map<std::string, std::string> out;
  std::regex re("<section id=\"([a-z-]+)\">([\\s\\S]*?)</section>");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), re); it != std::sregex_iterator(); ++it) {
    out[(*it)[1]] = (*it)[2];
  }
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

}  // namespace

TEST(Report, FourStrategiesCoincideAndChromiumRendersOneChartPerSection) {
  std::string dirs;
  for (const std::string s : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
    TrainRun r = train(" --set train.steps=12 --set train.micro_batch_size=2 --set parallel.strategy=" + s, 2, "report_" + s);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    dirs += " " + r.dir;
  }
  const std::string page = make_temp_dir("report") + "/report.html";
  std::string out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " report" + dirs + " -o " + page, &out), 0) << out;
  const std::string html = read_text(page);
  EXPECT_EQ(html.find("<script"), std::string::npos) << "self-contained and static";

  // What the browser built from it, not just our text.
  std::string dom;
  const int code = run_command("chromium --headless --no-sandbox --disable-gpu --dump-dom file://" + page + " 2>/dev/null",
                               &dom);
  ASSERT_EQ(code, 0) << "headless Chromium (Debian package `chromium`) must load the page:\n" << dom;
  auto parts = sections(dom);
  for (const std::string id : {"loss", "step-time", "memory", "throughput"}) {
    ASSERT_TRUE(parts.count(id)) << "section " << id << " missing from the rendered DOM";
    EXPECT_EQ(count(parts[id], "<svg class=\"chart\""), 1u) << id;
  }
  // Identical losses: the four polylines have the same points, drawn on top of each other.
  std::regex points("<polyline class=\"series\"[^>]* points=\"([^\"]*)\"");
  std::vector<std::string> curves;
  const std::string& loss = parts["loss"];
  for (auto it = std::sregex_iterator(loss.begin(), loss.end(), points); it != std::sregex_iterator(); ++it) {
    curves.push_back((*it)[1]);
  }
  ASSERT_EQ(curves.size(), 4u);
  EXPECT_GT(count(curves[0], ","), 10u);
  for (size_t k = 1; k < 4; ++k) EXPECT_EQ(curves[k], curves[0]) << "strategy " << k << "'s loss curve";
  // Memory: 4 runs x 2 ranks, three parts each, each with the ZeRO formula mark.
  EXPECT_EQ(count(parts["memory"], "<rect class=\"bar\""), 24u);

  // A folder that is not a run: a clear error.
  EXPECT_NE(run_command(std::string(ZS_BINARY) + " report /tmp -o " + page, &out), 0);
  EXPECT_NE(out.find("'/tmp' is not a run folder (no metrics.jsonl)"), std::string::npos) << out;
}
