// TimerLoop: the one place where a node's time passes. A timer is a
// function of the time now (ms on a monotonic clock) that does its work and
// returns when it is due next; the loop runs the due ones, in the order they
// were added, on its one thread against the steady clock, and a test calls
// RunDue with the times it makes up instead. A node's housekeeping (early
// steps, namespaces, stalls), progress reports and drain are its timers.
//
// Thread-safety: every method may be called from any thread. Timers run on
// the loop's thread (or RunDue's caller), one at a time and outside the
// loop's lock: a timer may Add or Poke. A timer must not block for long
// (every other timer waits for it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sf {
namespace cluster {

class TimerLoop {
 public:
  // A due time that never comes: the timer waits for a Poke.
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  // Does a timer's work at now_ms; returns the time it is due next (kNever: until poked).
  using Fn = std::function<int64_t(int64_t now_ms)>;

  TimerLoop() = default;
  // Stops the thread.
  ~TimerLoop();
  TimerLoop(const TimerLoop&) = delete;
  TimerLoop& operator=(const TimerLoop&) = delete;

  // Adds a timer, due at once; its id for Poke. name is for logs and tests.
  int Add(std::string name, Fn fn);
  // Makes timer id due at once (its work changed); no-op for an unknown id.
  void Poke(int id);
  // Runs every timer due at or before now_ms; the earliest time a timer is
  // due after them (kNever when none is).
  int64_t RunDue(int64_t now_ms);
  // When timer id is due next; kNever for an unknown id or one waiting for a Poke.
  int64_t DueMs(int id) const;

  // Starts the thread that runs due timers at the times `clock` (ms) says
  // until Stop; a second Start does nothing.
  void Start(std::function<int64_t()> clock = SteadyMs);
  // Stops the thread once the timer running (if any) returns; no timer
  // runs after it from the loop's thread. Idempotent. REQUIRES: not called
  // from a timer (it would wait for itself).
  void Stop();

  // Milliseconds on the steady clock.
  static int64_t SteadyMs();

 private:
  struct Timer {
    std::string name;
    Fn fn;
    int64_t due_ms = 0;
    uint64_t pokes = 0;  // a Poke while the timer runs keeps it due at once
  };
  void Loop(std::function<int64_t()> clock);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Timer> timers_;   // GUARDED_BY(mu_); by id
  bool stopping_ = false;       // GUARDED_BY(mu_)
  bool woken_ = false;          // GUARDED_BY(mu_): Add or Poke since the loop last looked
  std::mutex run_mu_;           // one RunDue at a time
  std::thread thread_;
};

}  // namespace cluster
}  // namespace sf
