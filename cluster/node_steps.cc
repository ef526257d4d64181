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
  return admission.RunsForOther(step, c.get());
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
  if (admission.Runs(step) > 0) return true;
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

bool ClusterNode::Impl::CheckStallLocked() {
  const int64_t last = last_tick_ms.load(), gap = NowMs() - last;
  if (etcd_mode() && last > 0 && gap > StallMs() && !stalled) {
    stalled = true;
    stalled_ms = gap;
    Log("stalled for " + std::to_string(gap) + " ms, past the lease: serving nothing until the shard map is read again");
    idle.notify_all();  // the housekeeping thread reads it
  }
  return stalled;
}

void ClusterNode::Impl::HousekeepingLoop() {
  std::unique_lock<std::mutex> l(mu);
  last_tick_ms = NowMs();
  while (!stopped) {
    idle.wait_for(l, std::chrono::milliseconds(250), [&] { return stopped || stalled; });
    if (stopped) break;
    CheckStallLocked();
    last_tick_ms = NowMs();
    if (stalled && placement_ready.load()) {
      // The map as etcd has it now: its fences apply before anything is served again.
      l.unlock();
      Status read = placement_ready.load()->Refresh();
      l.lock();
      if (read.ok()) {
        stalled = false;
        Log("read the shard map again after the stall: serving");
      } else {
        Log("reading the shard map after a stall: " + read.ToString());
        idle.wait_for(l, std::chrono::milliseconds(100), [&] { return stopped; });
      }
      last_tick_ms = NowMs();
      continue;
    }
    if (opts.ns_expiry_s > 0) {
      l.unlock();
      ExpireNamespaces();
      l.lock();
    }
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
