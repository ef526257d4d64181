#include "actors/applied_window.h"

namespace sf {
namespace runtime {

bool AppliedWindow::Seen(const UpdateOrigin& origin) const {
  return !origin.none() && set_.count(origin) > 0;
}

void AppliedWindow::Record(const UpdateOrigin& origin, int64_t now_ms) {
  if (origin.none()) return;
  while (!order_.empty() && (order_.size() >= kMaxOrigins || now_ms - order_.front().ms > kKeepMs)) {
    set_.erase(order_.front().origin);
    order_.pop_front();
  }
  if (!set_.insert(origin).second) return;
  order_.push_back({origin, now_ms});
  if (track_recent_ && recent_.size() < kMaxOrigins) recent_.push_back(origin);
}

std::vector<UpdateOrigin> AppliedWindow::All() {
  track_recent_ = true;
  recent_.clear();
  std::vector<UpdateOrigin> out;
  out.reserve(order_.size());
  for (const Entry& e : order_) out.push_back(e.origin);
  return out;
}

std::vector<UpdateOrigin> AppliedWindow::TakeRecent() {
  track_recent_ = true;
  std::vector<UpdateOrigin> out;
  out.swap(recent_);
  return out;
}

}  // namespace runtime
}  // namespace sf
