// Writes simple line charts as SVG (no plotting dependency).
#pragma once

#include <string>
#include <vector>

#include "shardflow/status.h"

namespace sf::examples {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

struct Panel {
  std::string title, x_label;
  std::vector<Series> series;
};

// Writes panels side by side into one SVG file; an error names the file.
Status WriteSvgPlot(const std::string& path, const std::vector<Panel>& panels);

}  // namespace sf::examples
