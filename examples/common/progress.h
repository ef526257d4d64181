// A one-line progress bar on stderr (stdout stays clean for --json).
#pragma once

#include <chrono>
#include <string>

namespace sf::examples {

class ProgressBar {
 public:
  // total steps; label printed before the bar. Disabled when stderr is not a
  // terminal unless force is set, so logs stay readable.
  ProgressBar(int64_t total, std::string label, bool force = false);
  // Redraws at most 10 times a second: "label [=====>   ] 120/469 35.1 steps/s loss 0.4213".
  void Update(int64_t done, double loss);
  // Draws the final state and ends the line.
  void Finish(const std::string& suffix = "");

 private:
  void Draw(int64_t done, double loss, const std::string& suffix);
  int64_t total_;
  std::string label_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t done_ = 0;
  double loss_ = 0;
};

}  // namespace sf::examples
