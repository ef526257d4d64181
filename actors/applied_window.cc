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
  if (set_.insert(origin).second) order_.push_back({origin, now_ms});
}

}  // namespace runtime
}  // namespace sf
