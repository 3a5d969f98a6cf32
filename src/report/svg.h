// Minimal SVG charts for the run report: a line chart (several series over steps) and a
// stacked bar chart with optional reference marks. Pure text, no scripts.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace zeroshard::report {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y)
};

struct LineChartOptions {
  std::string x_label, y_label;
  bool log_y = false;
  int width = 900, height = 360;
};

// Series are drawn in order, each in its own color and dash pattern, the first widest, so
// curves that coincide stay visible on top of each other.
std::string line_chart(const std::vector<Series>& series, const LineChartOptions& options);

struct Bar {
  std::string label;
  std::vector<double> parts;  // stacked bottom to top, in the order of part_names
  double reference = -1;      // drawn as a mark across the bar when >= 0
};

std::string stacked_bar_chart(const std::vector<Bar>& bars, const std::vector<std::string>& part_names,
                              const std::string& y_label, const std::string& reference_name, int width = 900,
                              int height = 360);

// Escapes text for HTML/SVG.
std::string escape(const std::string& text);

}  // namespace zeroshard::report
