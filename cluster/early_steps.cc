// EarlySteps (cluster/early_steps.h).
#include "cluster/early_steps.h"

#include <utility>

namespace sf {
namespace cluster {

EarlySteps::EarlySteps(std::string node, Limits limits) : node_(std::move(node)), limits_(limits) {}

Status EarlySteps::Admit(int64_t step, int64_t bytes, int64_t now_ms) {
  std::lock_guard<std::mutex> l(mu_);
  if (ended_.count(step)) return FailedPrecondition("step " + std::to_string(step) + " has ended on node " + node_);
  auto it = early_.find(step);
  if (it == early_.end()) {
    if (early_.size() >= limits_.max_steps)
      return ResourceExhausted("step " + std::to_string(step) + " runs no partition on node " + node_ + " and " +
                               std::to_string(limits_.max_steps) + " such steps are waiting already");
    it = early_.emplace(step, Early{now_ms, 0}).first;
  }
  if (bytes_ + bytes > limits_.max_bytes) {
    // A step admitted just now for this tensor holds nothing: not kept.
    if (it->second.bytes == 0) early_.erase(it);
    return ResourceExhausted("step " + std::to_string(step) + " runs no partition on node " + node_ +
                             " and tensors of such steps hold " + std::to_string(bytes_) + " bytes already");
  }
  it->second.bytes += bytes;
  bytes_ += bytes;
  return Status::OK();
}

void EarlySteps::ForgetLocked(int64_t step) {
  auto it = early_.find(step);
  if (it == early_.end()) return;
  bytes_ -= it->second.bytes;
  early_.erase(it);
}

void EarlySteps::Forget(int64_t step) {
  std::lock_guard<std::mutex> l(mu_);
  ForgetLocked(step);
}

void EarlySteps::End(int64_t step) {
  std::lock_guard<std::mutex> l(mu_);
  ForgetLocked(step);
  if (!ended_.insert(step).second) return;
  ended_order_.push_back(step);
  if (ended_order_.size() > limits_.max_ended) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

std::vector<int64_t> EarlySteps::Expire(int64_t now_ms) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<int64_t> expired;
  for (auto it = early_.begin(); it != early_.end();) {
    if (now_ms - it->second.first_ms < limits_.ttl_ms) {
      ++it;
      continue;
    }
    expired.push_back(it->first);
    bytes_ -= it->second.bytes;
    it = early_.erase(it);
  }
  return expired;
}

size_t EarlySteps::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return early_.size();
}

int64_t EarlySteps::bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return bytes_;
}

}  // namespace cluster
}  // namespace sf
