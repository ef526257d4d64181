// RunAdmission (cluster/run_admission.h): a node's partition runs, fences
// and the waits on them.
#include "cluster/run_admission.h"

#include <algorithm>
#include <climits>

namespace sf {
namespace cluster {

RunAdmission::Outcome RunAdmission::Admit(int64_t step, const net::Connection* client, Slot slot,
                                          size_t max_per_client) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto f = fences_.find(slot.first); f != fences_.end() && slot.second < f->second)
    return {Verdict::kStale, f->second};
  auto n = running_per_client_.find(client);
  if (n != running_per_client_.end() && n->second >= max_per_client) return {Verdict::kFull, 0};
  if (closed_) return {Verdict::kClosed, 0};
  running_.emplace(step, client);
  ++running_per_client_[client];
  running_slots_.emplace(slot, step);
  if (slot.first >= 0) {
    int64_t& served = served_epochs_[slot.first];
    served = std::max(served, slot.second);
  }
  return {Verdict::kAdmitted, 0};
}

bool RunAdmission::End(int64_t step, const net::Connection* client, Slot slot) {
  std::lock_guard<std::mutex> l(mu_);
  auto [b, e] = running_.equal_range(step);
  auto run = std::find_if(b, e, [client](const auto& r) { return r.second == client; });
  if (run == e) return running_.empty();
  running_.erase(run);
  for (auto [it, end] = running_slots_.equal_range(slot); it != end; ++it)
    if (it->second == step) {
      running_slots_.erase(it);
      break;
    }
  if (auto n = running_per_client_.find(client); n != running_per_client_.end() && --n->second == 0)
    running_per_client_.erase(n);
  if (waiters_ > 0) cv_.notify_all();
  return running_.empty();
}

void RunAdmission::Fence(int slot, int64_t epoch) {
  std::lock_guard<std::mutex> l(mu_);
  int64_t& fence = fences_[slot];
  fence = std::max(fence, epoch);
}

int64_t RunAdmission::FenceOf(int slot) const {
  std::lock_guard<std::mutex> l(mu_);
  auto f = fences_.find(slot);
  return f == fences_.end() ? 0 : f->second;
}

std::vector<int64_t> RunAdmission::OlderRunsLocked(int slot) const {
  auto f = fences_.find(slot);
  const int64_t fence = f == fences_.end() ? 0 : f->second;
  std::vector<int64_t> steps;
  for (auto it = running_slots_.lower_bound({slot, INT64_MIN}); it != running_slots_.end() && it->first.first == slot;
       ++it)
    if (it->first.second < fence) steps.push_back(it->second);
  return steps;
}

std::vector<int64_t> RunAdmission::OlderRuns(int slot) const {
  std::lock_guard<std::mutex> l(mu_);
  return OlderRunsLocked(slot);
}

bool RunAdmission::WaitOlderRuns(int slot, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> l(mu_);
  ++waiters_;
  const bool done = cv_.wait_until(l, deadline, [&] { return closed_ || OlderRunsLocked(slot).empty(); });
  --waiters_;
  return done;
}

int64_t RunAdmission::ServedEpoch(int slot) const {
  std::lock_guard<std::mutex> l(mu_);
  auto s = served_epochs_.find(slot);
  return s == served_epochs_.end() ? 0 : s->second;
}

size_t RunAdmission::Runs(int64_t step) const {
  std::lock_guard<std::mutex> l(mu_);
  return running_.count(step);
}

bool RunAdmission::RunsForOther(int64_t step, const net::Connection* client) const {
  std::lock_guard<std::mutex> l(mu_);
  auto [b, e] = running_.equal_range(step);
  return std::any_of(b, e, [client](const auto& r) { return r.second != client; });
}

std::set<int64_t> RunAdmission::RunningSteps() const {
  std::lock_guard<std::mutex> l(mu_);
  std::set<int64_t> steps;
  for (const auto& r : running_) steps.insert(r.first);
  return steps;
}

std::set<int64_t> RunAdmission::StepsOf(const net::Connection* client) const {
  std::lock_guard<std::mutex> l(mu_);
  std::set<int64_t> steps;
  for (const auto& r : running_)
    if (r.second == client) steps.insert(r.first);
  return steps;
}

bool RunAdmission::Idle() const {
  std::lock_guard<std::mutex> l(mu_);
  return running_.empty();
}

void RunAdmission::Close() {
  std::lock_guard<std::mutex> l(mu_);
  closed_ = true;
  cv_.notify_all();
}

void RunAdmission::WaitIdle() {
  std::unique_lock<std::mutex> l(mu_);
  ++waiters_;
  cv_.wait(l, [&] { return running_.empty(); });
  --waiters_;
}

int RunAdmission::Waiters() const {
  std::lock_guard<std::mutex> l(mu_);
  return waiters_;
}

}  // namespace cluster
}  // namespace sf
