// TimerLoop (cluster/timer_loop.h).
#include "cluster/timer_loop.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace sf {
namespace cluster {

TimerLoop::~TimerLoop() { Stop(); }

int64_t TimerLoop::SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int TimerLoop::Add(std::string name, Fn fn) {
  std::lock_guard<std::mutex> l(mu_);
  timers_.push_back(Timer{std::move(name), std::move(fn), 0, 0});
  woken_ = true;
  cv_.notify_all();
  return static_cast<int>(timers_.size()) - 1;
}

void TimerLoop::Poke(int id) {
  std::lock_guard<std::mutex> l(mu_);
  if (id < 0 || id >= static_cast<int>(timers_.size())) return;
  timers_[id].due_ms = 0;
  ++timers_[id].pokes;
  woken_ = true;
  cv_.notify_all();
}

int64_t TimerLoop::DueMs(int id) const {
  std::lock_guard<std::mutex> l(mu_);
  if (id < 0 || id >= static_cast<int>(timers_.size())) return kNever;
  return timers_[id].due_ms;
}

int64_t TimerLoop::RunDue(int64_t now_ms) {
  std::lock_guard<std::mutex> run(run_mu_);
  std::unique_lock<std::mutex> l(mu_);
  for (size_t i = 0; i < timers_.size(); ++i) {
    if (timers_[i].due_ms > now_ms) continue;
    // Run outside the lock (a timer may Add or Poke); the vector may grow
    // meanwhile, so the timer is found again by index afterwards.
    Fn fn = timers_[i].fn;
    const uint64_t pokes = timers_[i].pokes;
    l.unlock();
    const int64_t next = fn(now_ms);
    l.lock();
    timers_[i].due_ms = timers_[i].pokes != pokes ? 0 : next;
  }
  int64_t next = kNever;
  for (const Timer& t : timers_) next = std::min(next, t.due_ms);
  return next;
}

void TimerLoop::Start(std::function<int64_t()> clock) {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this, clock = std::move(clock)] { Loop(clock); });
}

void TimerLoop::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void TimerLoop::Loop(std::function<int64_t()> clock) {
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    woken_ = false;
    l.unlock();
    const int64_t next = RunDue(clock());
    l.lock();
    if (stopping_ || woken_) continue;
    const int64_t now = clock();
    if (next <= now) continue;
    // Waits on the steady clock even when `clock` is another: it says what
    // time it is, the wait only how long until then.
    const auto wait = next == kNever ? std::chrono::milliseconds(60000) : std::chrono::milliseconds(next - now);
    cv_.wait_for(l, wait, [&] { return stopping_ || woken_; });
  }
}

}  // namespace cluster
}  // namespace sf
