// Test helpers for time. A test waits for what it expects to happen with a
// deadline, never for a fixed time:
//
//   REQUIRE(testing::WaitFor([&] { return server.downs > 0; }, std::chrono::seconds(10)));
//
// returns as soon as the condition holds, and fails the test (instead of
// hanging it) when it never does. Where the thing waited for can notify, a
// Flag waits without polling. The one exception is PauseFor: a fixed delay
// that is itself the point (a step must stay blocked that long, a kill lands
// at a random moment, a peer stays stopped past its timeout). Every use of it
// says why the time is the point.
// Thread-safety: Flag may be set and waited on from any threads.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace sf::testing {

// Calls cond until it returns true or `deadline` has passed, every `poll`;
// returns whether it returned true. cond runs at least once, and once more at
// the deadline. For a loaded machine, give a deadline many times what the
// condition normally takes: it costs nothing when the condition holds.
inline bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds deadline,
                    std::chrono::milliseconds poll = std::chrono::milliseconds(5)) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    if (cond()) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= end) return false;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(poll, end - now));
  }
}

// A flag one thread sets (once) and others wait on, woken when it is set.
class Flag {
 public:
  void Set() {
    std::lock_guard<std::mutex> l(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool IsSet() const {
    std::lock_guard<std::mutex> l(mu_);
    return set_;
  }
  // Waits until the flag is set or `deadline` has passed (at once when it is
  // not positive); returns whether it is set.
  bool WaitFor(std::chrono::milliseconds deadline) const {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, deadline, [&] { return set_; });
  }
  // The same with a point in time for the deadline.
  bool WaitUntil(std::chrono::steady_clock::time_point deadline) const {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_until(l, deadline, [&] { return set_; });
  }
  // Waits until the flag is set, however long that takes (for a helper thread
  // that lives until the test tells it to end, never for a test's own wait).
  void Wait() const {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return set_; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool set_ = false;  // GUARDED_BY(mu_)
};

// A deliberate delay, not a wait for a condition: the fixed time is what the
// test needs (nothing may happen within it, or something must happen at that
// moment). Each caller says why.
inline void PauseFor(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

// The same delay, cut short when `stop` is set (a helper thread's pause that
// must not hold up the end of the test); returns whether `stop` is set.
inline bool PauseFor(std::chrono::milliseconds d, const Flag& stop) { return stop.WaitFor(d); }

// Starts call with a callback and blocks until the callback has run once
// (an asynchronous service's answer); what it was given.
template <typename T>
T Await(const std::function<void(std::function<void(T)>)>& call) {
  std::promise<T> p;
  auto f = p.get_future();
  call([&p](T r) { p.set_value(std::move(r)); });
  return f.get();
}

}  // namespace sf::testing
