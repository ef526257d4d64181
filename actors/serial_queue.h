// SerialQueue: one thread running posted functions in order, started by
// the first Post. A cluster session's callbacks run on one, never on a
// connection's I/O thread. Thread-safety: Post and Stop may be called from any
// thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace sf {
namespace runtime {

class SerialQueue {
 public:
  ~SerialQueue() { Stop(); }
  // Runs fn on the queue's thread after what was posted before.
  // REQUIRES: Stop has not been called (the session stops its queues only
  // once no step is in flight, so nothing posts after).
  void Post(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(fn));
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    cv_.notify_one();
  }
  // Runs what is queued, then ends the thread.
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      l.unlock();
      fn();
      l.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // GUARDED_BY(mu_)
  bool stop_ = false;                        // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace runtime
}  // namespace sf
