#include "report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace zeroshard::report {

namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
const char* const kDashes[] = {"", "8 4", "3 3", "12 4 3 4", "1 3", "6 2", "10 2 2 2", "4 6"};
constexpr int kLeft = 70, kRight = 240, kTop = 20, kBottom = 50;

std::string fmt(double v) {
  char buf[32];
  if (v != 0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-3)) std::snprintf(buf, sizeof(buf), "%.2g", v);
  else std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

// Round tick positions covering [lo, hi].
std::vector<double> ticks(double lo, double hi, int target = 5) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(t);
  return out;
}

}  // namespace

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string line_chart(const std::vector<Series>& series, const LineChartOptions& o) {
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  auto ty = [&](double y) { return o.log_y ? std::log10(std::max(y, 1e-30)) : y; };
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, ty(y)), y1 = std::max(y1, ty(y));
    }
  }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1, y0 -= 1;
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  const int pw = o.width - kLeft - kRight, ph = o.height - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + (1.0 - (ty(y) - y0) / (y1 - y0)) * ph; };
  std::ostringstream svg;
  svg << "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\"" << o.height
      << "\" viewBox=\"0 0 " << o.width << " " << o.height << "\">\n";
  svg << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw << "\" height=\"" << ph
      << "\" fill=\"none\" stroke=\"#999\"/>\n";
  for (double t : ticks(x0, x1)) {
    svg << "<line x1=\"" << px(t) << "\" x2=\"" << px(t) << "\" y1=\"" << kTop + ph << "\" y2=\"" << kTop + ph + 5
        << "\" stroke=\"#999\"/><text x=\"" << px(t) << "\" y=\"" << kTop + ph + 18
        << "\" text-anchor=\"middle\" font-size=\"11\">" << fmt(t) << "</text>\n";
  }
  for (double t : ticks(y0, y1)) {
    const double shown = o.log_y ? std::pow(10.0, t) : t;
    const double yy = kTop + (1.0 - (t - y0) / (y1 - y0)) * ph;
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << yy << "\" y2=\"" << yy
        << "\" stroke=\"#eee\"/><text x=\"" << kLeft - 6 << "\" y=\"" << yy + 4
        << "\" text-anchor=\"end\" font-size=\"11\">" << fmt(shown) << "</text>\n";
  }
  svg << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << o.height - 10 << "\" text-anchor=\"middle\" font-size=\"12\">"
      << escape(o.x_label) << "</text>\n";
  svg << "<text transform=\"translate(16," << kTop + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">"
      << escape(o.y_label) << (o.log_y ? " (log)" : "") << "</text>\n";
  const size_t n = series.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& s = series[i];
    const double width = 1.5 + 2.0 * static_cast<double>(n - 1 - i);  // first widest
    svg << "<polyline class=\"series\" fill=\"none\" stroke=\"" << kColors[i % 8] << "\" stroke-width=\"" << width << "\"";
    if (*kDashes[i % 8]) svg << " stroke-dasharray=\"" << kDashes[i % 8] << "\"";
    svg << " points=\"";
    for (const auto& [x, y] : s.points) {
      if (std::isfinite(y)) svg << px(x) << "," << py(y) << " ";
    }
    svg << "\"><title>" << escape(s.name) << "</title></polyline>\n";
    const int ly = kTop + 14 + static_cast<int>(i) * 18;
    svg << "<line x1=\"" << kLeft + pw + 12 << "\" x2=\"" << kLeft + pw + 40 << "\" y1=\"" << ly - 4 << "\" y2=\"" << ly - 4
        << "\" stroke=\"" << kColors[i % 8] << "\" stroke-width=\"3\"";
    if (*kDashes[i % 8]) svg << " stroke-dasharray=\"" << kDashes[i % 8] << "\"";
    svg << "/><text x=\"" << kLeft + pw + 46 << "\" y=\"" << ly << "\" font-size=\"11\">" << escape(s.name)
        << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string stacked_bar_chart(const std::vector<Bar>& bars, const std::vector<std::string>& part_names,
                              const std::string& y_label, const std::string& reference_name, int width, int height) {
  double top = 0;
  for (const auto& b : bars) {
    double sum = 0;
    for (double p : b.parts) sum += p;
    top = std::max({top, sum, b.reference});
  }
  if (top <= 0) top = 1;
  top *= 1.08;
  const int pw = width - kLeft - kRight, ph = height - kTop - kBottom - 30;
  auto py = [&](double v) { return kTop + (1.0 - v / top) * ph; };
  std::ostringstream svg;
  svg << "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\">\n";
  for (double t : ticks(0, top)) {
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << py(t) << "\" y2=\"" << py(t)
        << "\" stroke=\"#eee\"/><text x=\"" << kLeft - 6 << "\" y=\"" << py(t) + 4
        << "\" text-anchor=\"end\" font-size=\"11\">" << fmt(t) << "</text>\n";
  }
  svg << "<text transform=\"translate(16," << kTop + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">"
      << escape(y_label) << "</text>\n";
  const double slot = bars.empty() ? pw : static_cast<double>(pw) / static_cast<double>(bars.size());
  const double bw = std::min(60.0, slot * 0.6);
  for (size_t i = 0; i < bars.size(); ++i) {
    const double cx = kLeft + slot * (static_cast<double>(i) + 0.5);
    double base = 0;
    for (size_t k = 0; k < bars[i].parts.size(); ++k) {
      const double v = bars[i].parts[k];
      svg << "<rect class=\"bar\" x=\"" << cx - bw / 2 << "\" y=\"" << py(base + v) << "\" width=\"" << bw
          << "\" height=\"" << py(base) - py(base + v) << "\" fill=\"" << kColors[k % 8] << "\"><title>"
          << escape(bars[i].label + ": " + (k < part_names.size() ? part_names[k] : "") + " " + fmt(v))
          << "</title></rect>\n";
      base += v;
    }
    if (bars[i].reference >= 0) {
      svg << "<line x1=\"" << cx - bw / 2 - 6 << "\" x2=\"" << cx + bw / 2 + 6 << "\" y1=\"" << py(bars[i].reference)
          << "\" y2=\"" << py(bars[i].reference) << "\" stroke=\"#000\" stroke-width=\"2\" stroke-dasharray=\"4 2\"/>\n";
    }
    svg << "<text x=\"" << cx << "\" y=\"" << kTop + ph + 14 << "\" text-anchor=\"middle\" font-size=\"10\">"
        << escape(bars[i].label) << "</text>\n";
  }
  for (size_t k = 0; k < part_names.size(); ++k) {
    const int ly = kTop + 14 + static_cast<int>(k) * 18;
    svg << "<rect x=\"" << kLeft + pw + 12 << "\" y=\"" << ly - 10 << "\" width=\"14\" height=\"10\" fill=\""
        << kColors[k % 8] << "\"/><text x=\"" << kLeft + pw + 32 << "\" y=\"" << ly << "\" font-size=\"11\">"
        << escape(part_names[k]) << "</text>\n";
  }
  if (!reference_name.empty()) {
    const int ly = kTop + 14 + static_cast<int>(part_names.size()) * 18;
    svg << "<line x1=\"" << kLeft + pw + 12 << "\" x2=\"" << kLeft + pw + 26 << "\" y1=\"" << ly - 5 << "\" y2=\"" << ly - 5
        << "\" stroke=\"#000\" stroke-width=\"2\" stroke-dasharray=\"4 2\"/><text x=\"" << kLeft + pw + 32 << "\" y=\""
        << ly << "\" font-size=\"11\">" << escape(reference_name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace zeroshard::report
