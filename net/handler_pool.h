// Handler threads for a network endpoint: a small pool that runs each
// connection's work on a Strand, one task at a time and in order, so a
// handler that blocks holds up only its own peer.
//
// Thread-safety: every method may be called from any thread; Join must not
// be called from a task (a pool thread calling it is detached instead).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace sf {
namespace net {

class HandlerPool;

// Runs its tasks one at a time, in order, on the pool's threads.
class Strand : public std::enable_shared_from_this<Strand> {
 public:
  explicit Strand(HandlerPool* pool) : pool_(pool) {}
  // Queues fn after the strand's other tasks; never fails.
  void Add(std::function<void()> fn);
  // Runs up to a few tasks; true when more remain (the strand is requeued).
  bool RunSome();

 private:
  HandlerPool* pool_;
  std::mutex mu_;
  std::deque<std::function<void()>> q_;  // GUARDED_BY(mu_)
  bool scheduled_ = false;               // GUARDED_BY(mu_)
};

class HandlerPool {
 public:
  // Starts max(1, n) threads.
  explicit HandlerPool(int n) {
    for (int i = 0; i < std::max(1, n); ++i) threads_.emplace_back([this] { Work(); });
  }
  // Queues a strand that has tasks to run.
  void Schedule(std::shared_ptr<Strand> s) {
    std::lock_guard<std::mutex> l(mu_);
    ready_.push_back(std::move(s));
    cv_.notify_one();
  }
  // Runs what is queued, then ends the threads; a pool thread calling it is
  // left for Join to detach.
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
  }
  // Waits for the threads to end (after Stop).
  void Join() {
    const auto self = std::this_thread::get_id();
    for (auto& t : threads_) {
      if (!t.joinable()) continue;
      if (t.get_id() == self) t.detach();
      else t.join();
    }
  }
  // True on one of the pool's threads.
  bool OnPoolThread() const {
    for (const auto& t : threads_)
      if (t.get_id() == std::this_thread::get_id()) return true;
    return false;
  }

 private:
  void Work() {
    for (;;) {
      std::shared_ptr<Strand> s;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !ready_.empty(); });
        if (ready_.empty()) return;  // stopping and drained
        s = std::move(ready_.front());
        ready_.pop_front();
      }
      if (s->RunSome()) Schedule(std::move(s));
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Strand>> ready_;  // GUARDED_BY(mu_)
  bool stop_ = false;                          // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace net
}  // namespace sf
