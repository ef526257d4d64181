// A node's admission of peers' tensors and aborts for steps that do not run
// here (yet), and its housekeeping timer: their expiry, idle namespaces,
// stalls (cluster/node_impl.h).
#include "cluster/node_impl.h"

namespace sf {

bool ClusterNode::Impl::ForeignStepLocked(const net::ConnectionPtr& c, int64_t step) const {
  if (c->peer_role() == net::Role::kNode) return false;
  return admission.RunsForOther(step, c.get());
}

bool ClusterNode::Impl::ForeignStep(const net::ConnectionPtr& c, uint64_t session_id, int64_t step) {
  if (c->peer_role() == net::Role::kNode) return false;
  std::lock_guard<std::mutex> l(mu);
  return sessions.IsOthers(session_id, c.get()) || ForeignStepLocked(c, step);
}

Status ClusterNode::Impl::AdmitPeerStep(int64_t step, int64_t bytes, const uint64_t* session) {
  std::lock_guard<std::mutex> l(mu);
  if (session) {
    if (!sessions.HostOf(*session))
      return NotFound("session " + std::to_string(*session) + " has no partition on node " + opts.name);
  }
  // Under mu: a run admitted meanwhile (under mu too) forgets the step's early state after this.
  if (admission.Runs(step) > 0) return Status::OK();
  return early.Admit(step, bytes, NowMs());
}

bool ClusterNode::Impl::CheckStallLocked(int64_t now_ms) {
  const int64_t last = last_tick_ms.load(), gap = now_ms - last;
  if (etcd_mode() && last > 0 && gap > StallMs() && !stalled) {
    stalled = true;
    stalled_ms = gap;
    Log("stalled for " + std::to_string(gap) + " ms, past the lease: serving nothing until the shard map is read again");
    timers.Poke(housekeeping_timer);  // it reads the map again
  }
  return stalled;
}

int64_t ClusterNode::Impl::Housekeep(int64_t now_ms) {
  std::unique_lock<std::mutex> l(mu);
  if (stopped) return cluster::TimerLoop::kNever;
  CheckStallLocked(now_ms);
  last_tick_ms = now_ms;
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
    }
    // The read took a while: the next tick's gap counts from its end.
    const int64_t now = cluster::TimerLoop::SteadyMs();
    last_tick_ms = now;
    return now + (read.ok() ? kHousekeepingMs : 100);
  }
  l.unlock();
  if (opts.ns_expiry_s > 0) ExpireNamespaces(now_ms);
  const std::vector<int64_t> expired = early.Expire(now_ms);
  if (!expired.empty()) {
    for (int64_t step : expired) rendezvous.Cleanup(step);
    Log("forgot " + std::to_string(expired.size()) + " steps that peers sent tensors for but never ran here");
  }
  return now_ms + kHousekeepingMs;
}

}  // namespace sf
