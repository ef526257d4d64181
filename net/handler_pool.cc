// Handler threads for a network endpoint (net/handler_pool.h).
#include "net/handler_pool.h"

namespace sf {
namespace net {

void Strand::Add(std::function<void()> fn) {
  bool schedule = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    q_.push_back(std::move(fn));
    if (!scheduled_) schedule = scheduled_ = true;
  }
  if (schedule) pool_->Schedule(shared_from_this());
}

bool Strand::RunSome() {
  for (int i = 0; i < 16; ++i) {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (q_.empty()) {
        scheduled_ = false;
        return false;
      }
      fn = std::move(q_.front());
      q_.pop_front();
    }
    fn();
  }
  std::lock_guard<std::mutex> l(mu_);
  if (q_.empty()) {
    scheduled_ = false;
    return false;
  }
  return true;
}

}  // namespace net
}  // namespace sf
