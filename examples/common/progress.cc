#include "examples/common/progress.h"

#include <unistd.h>

#include <cstdio>

namespace sf::examples {

ProgressBar::ProgressBar(int64_t total, std::string label, bool force)
    : total_(total), label_(std::move(label)), enabled_(force || isatty(2)),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void ProgressBar::Update(int64_t done, double loss) {
  done_ = done;
  loss_ = loss;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
  last_draw_ = now;
  Draw(done, loss, "");
}

void ProgressBar::Finish(const std::string& suffix) {
  Draw(done_, loss_, suffix);
  if (enabled_) std::fputc('\n', stderr);
}

void ProgressBar::Draw(int64_t done, double loss, const std::string& suffix) {
  if (!enabled_) return;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int width = 30;
  const int filled = total_ > 0 ? static_cast<int>(width * done / total_) : width;
  std::string bar(filled, '=');
  if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
  std::fprintf(stderr, "\r%s [%s] %lld/%lld %.1f steps/s loss %.4f %s", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_),
               secs > 0 ? done / secs : 0.0, loss, suffix.c_str());
  std::fflush(stderr);
}

}  // namespace sf::examples
