#include "examples/common/svg_plot.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace sf::examples {

Status WriteSvgPlot(const std::string& path, const std::vector<Panel>& panels) {
  const double pw = 420, ph = 300, ml = 55, mr = 15, mt = 30, mb = 40;
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"};
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << pw * panels.size() << "' height='" << ph
    << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n";
  for (size_t p = 0; p < panels.size(); ++p) {
    const Panel& panel = panels[p];
    const double ox = p * pw;
    double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
    for (const auto& se : panel.series)
      for (size_t i = 0; i < se.x.size(); ++i) {
        x0 = std::min(x0, se.x[i]); x1 = std::max(x1, se.x[i]);
        y0 = std::min(y0, se.y[i]); y1 = std::max(y1, se.y[i]);
      }
    if (x0 > x1) { x0 = 0; x1 = 1; y0 = 0; y1 = 1; }
    if (x1 == x0) x1 = x0 + 1;
    if (y1 == y0) y1 = y0 + 1;
    const double pad = (y1 - y0) * 0.05;
    y0 -= pad; y1 += pad;
    auto X = [&](double v) { return ox + ml + (v - x0) / (x1 - x0) * (pw - ml - mr); };
    auto Y = [&](double v) { return mt + (1 - (v - y0) / (y1 - y0)) * (ph - mt - mb); };
    s << "<text x='" << ox + pw / 2 << "' y='18' text-anchor='middle' font-size='13'>" << panel.title << "</text>\n";
    s << "<rect x='" << ox + ml << "' y='" << mt << "' width='" << pw - ml - mr << "' height='" << ph - mt - mb
      << "' fill='none' stroke='#888'/>\n";
    for (int t = 0; t <= 4; ++t) {
      const double v = y0 + (y1 - y0) * t / 4;
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3g", v);
      s << "<text x='" << ox + ml - 4 << "' y='" << Y(v) + 4 << "' text-anchor='end'>" << buf << "</text>\n";
      const double xv = x0 + (x1 - x0) * t / 4;
      std::snprintf(buf, sizeof buf, "%.3g", xv);
      s << "<text x='" << X(xv) << "' y='" << ph - mb + 14 << "' text-anchor='middle'>" << buf << "</text>\n";
    }
    s << "<text x='" << ox + pw / 2 << "' y='" << ph - 8 << "' text-anchor='middle'>" << panel.x_label << "</text>\n";
    for (size_t k = 0; k < panel.series.size(); ++k) {
      const Series& se = panel.series[k];
      const char* color = kColors[k % 4];
      s << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' points='";
      for (size_t i = 0; i < se.x.size(); ++i) s << X(se.x[i]) << "," << Y(se.y[i]) << " ";
      s << "'/>\n<text x='" << ox + ml + 8 << "' y='" << mt + 14 + 14 * k << "' fill='" << color << "'>"
        << se.name << "</text>\n";
    }
  }
  s << "</svg>\n";
  std::ofstream f(path);
  if (!f) return InvalidArgument("cannot write plot " + path);
  f << s.str();
  return f ? Status::OK() : InvalidArgument("failed writing plot " + path);
}

}  // namespace sf::examples
