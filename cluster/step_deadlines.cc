#include "cluster/step_deadlines.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace sf {
namespace runtime {

StepDeadlines::StepDeadlines(int timeout_ms) : timeout_ms_(std::max(1, timeout_ms)) {}

StepDeadlines::~StepDeadlines() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t StepDeadlines::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Four reports per deadline: one late or lost report does not expire a step.
int StepDeadlines::report_ms() const { return std::max(1, timeout_ms_ / 4); }

uint64_t StepDeadlines::Watch(int64_t step, std::function<void(int64_t)> expire) {
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t token = next_token_++;
  runs_[token] = Run{step, std::move(expire)};
  Step& s = steps_[step];
  s.last_ms = NowMs();
  ++s.runs;
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  return token;
}

void StepDeadlines::Progress(int64_t step) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = steps_.find(step);
  if (it != steps_.end()) it->second.last_ms = NowMs();
}

void StepDeadlines::Finish(uint64_t token) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = runs_.find(token);
  if (it == runs_.end()) return;
  auto s = steps_.find(it->second.step);
  if (s != steps_.end() && --s->second.runs == 0) steps_.erase(s);
  runs_.erase(it);
}

void StepDeadlines::Loop() {
  // A check every quarter deadline (at least every second): a step expires
  // between timeout_ms and 1.25 timeout_ms after its last progress.
  const auto tick = std::chrono::milliseconds(std::clamp(timeout_ms_ / 4, 5, 1000));
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    cv_.wait_for(l, tick, [&] { return stopping_; });
    if (stopping_) break;
    const int64_t now = NowMs();
    std::vector<std::pair<std::function<void(int64_t)>, int64_t>> expired;
    for (auto it = runs_.begin(); it != runs_.end();) {
      auto s = steps_.find(it->second.step);
      const int64_t idle = s == steps_.end() ? 0 : now - s->second.last_ms;
      if (idle < timeout_ms_) {
        ++it;
        continue;
      }
      expired.push_back({std::move(it->second.expire), idle});
      if (--s->second.runs == 0) steps_.erase(s);
      it = runs_.erase(it);
    }
    if (expired.empty()) continue;
    l.unlock();
    for (auto& [fn, idle] : expired) fn(idle);
    l.lock();
  }
}

}  // namespace runtime
}  // namespace sf
