// A node's admission of peers' tensors and aborts for steps that do not run
// here (yet), and their expiry (cluster/node_impl.h).
#include "cluster/node_impl.h"

namespace sf {

void ClusterNode::Impl::ForgetEarlyLocked(int64_t step) {
  auto it = early_steps.find(step);
  if (it == early_steps.end()) return;
  early_bytes -= it->second.bytes;
  early_steps.erase(it);
}

bool ClusterNode::Impl::ForeignStepLocked(const net::ConnectionPtr& c, int64_t step) const {
  if (c->peer_role() == net::Role::kNode) return false;
  auto [b, e] = running.equal_range(step);
  for (auto it = b; it != e; ++it)
    if (it->second != c.get()) return true;
  return false;
}

bool ClusterNode::Impl::ForeignStep(const net::ConnectionPtr& c, uint64_t session_id, int64_t step) {
  if (c->peer_role() == net::Role::kNode) return false;
  std::lock_guard<std::mutex> l(mu);
  auto s = sessions.find(session_id);
  return (s != sessions.end() && s->second.client != c.get()) || ForeignStepLocked(c, step);
}

bool ClusterNode::Impl::AdmitPeerStep(int64_t step, int64_t bytes, std::string* why, const uint64_t* session) {
  std::lock_guard<std::mutex> l(mu);
  if (session) {
    auto s = sessions.find(*session);
    if (s == sessions.end() || !s->second.host) {
      *why = "session " + std::to_string(*session) + " has no partition on node " + opts.name;
      return false;
    }
  }
  if (running.count(step)) return true;
  if (ended_steps.count(step)) {
    *why = "step " + std::to_string(step) + " has ended on node " + opts.name;
    return false;
  }
  auto it = early_steps.find(step);
  if (it == early_steps.end()) {
    if (early_steps.size() >= kMaxEarlySteps) {
      *why = "step " + std::to_string(step) + " runs no partition here and " + std::to_string(kMaxEarlySteps) +
             " such steps are waiting already";
      return false;
    }
    it = early_steps.emplace(step, EarlyStep{NowMs(), 0}).first;
  }
  if (early_bytes + bytes > kMaxEarlyBytes) {
    *why = "step " + std::to_string(step) + " runs no partition here and tensors of such steps hold " +
           std::to_string(early_bytes) + " bytes already";
    return false;
  }
  it->second.bytes += bytes;
  early_bytes += bytes;
  return true;
}

void ClusterNode::Impl::ExpireEarlyLocked(std::vector<int64_t>* expired) {
  const int64_t now = NowMs();
  for (auto it = early_steps.begin(); it != early_steps.end();) {
    if (now - it->second.first_ms < kEarlyStepTtlMs) {
      ++it;
      continue;
    }
    expired->push_back(it->first);
    early_bytes -= it->second.bytes;
    it = early_steps.erase(it);
  }
}

void ClusterNode::Impl::HousekeepingLoop() {
  std::unique_lock<std::mutex> l(mu);
  while (!stopped) {
    idle.wait_for(l, std::chrono::milliseconds(250), [&] { return stopped; });
    if (stopped) break;
    std::vector<int64_t> expired;
    ExpireEarlyLocked(&expired);
    if (expired.empty()) continue;
    l.unlock();
    for (int64_t step : expired) rendezvous.Cleanup(step);
    Log("forgot " + std::to_string(expired.size()) + " steps that peers sent tensors for but never ran here");
    l.lock();
  }
}

}  // namespace sf
