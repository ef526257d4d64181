// ProgressReports (cluster/progress_reports.h).
#include "cluster/progress_reports.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

namespace sf {
namespace cluster {

ProgressReports::ProgressReports(int min_interval_ms) : min_interval_ms_(std::max(1, min_interval_ms)) {}

std::shared_ptr<ProgressReports::Watch> ProgressReports::Add(int interval_ms, int64_t now_ms,
                                                            std::function<void(uint64_t)> tell) {
  auto w = std::make_shared<Watch>();
  w->interval_ms = std::max(interval_ms, min_interval_ms_);
  w->reported_ms = now_ms;
  w->tell = std::move(tell);
  std::lock_guard<std::mutex> l(mu_);
  watched_.emplace(w.get(), w);
  return w;
}

void ProgressReports::Remove(const std::shared_ptr<Watch>& w) {
  if (!w) return;
  std::lock_guard<std::mutex> l(mu_);
  watched_.erase(w.get());
}

int64_t ProgressReports::Report(int64_t now_ms) {
  std::vector<std::pair<std::shared_ptr<Watch>, uint64_t>> due;
  int tick_ms = std::numeric_limits<int>::max();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (watched_.empty()) return std::numeric_limits<int64_t>::max();
    for (const auto& [key, w] : watched_) {
      tick_ms = std::min(tick_ms, w->interval_ms / 2);
      if (now_ms - w->reported_ms < w->interval_ms || w->finished.exchange(0, std::memory_order_relaxed) == 0)
        continue;
      w->reported_ms = now_ms;
      due.push_back({w, ++w->reports});
    }
  }
  for (auto& [w, reports] : due) w->tell(reports);
  return now_ms + std::max(min_interval_ms_ / 2, std::max(1, tick_ms));
}

size_t ProgressReports::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return watched_.size();
}

}  // namespace cluster
}  // namespace sf
