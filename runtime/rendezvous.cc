#include "runtime/rendezvous.h"

namespace sf {
namespace runtime {

Status LocalRendezvous::Send(const RendezvousKey& key, Tensor value, bool is_dead) {
  std::vector<Callback> waiters;
  Tensor v;
  {
    std::lock_guard<std::mutex> l(mu_);
    StepTable& st = steps_[key.step_id];
    if (!st.aborted.ok()) return st.aborted;
    Entry& e = st.entries[std::make_tuple(key.edge, key.frame, key.iteration)];
    if (e.sent)
      return InvalidArgument("'" + key.edge + "' was sent twice in frame '" + key.frame +
                             "' iteration " + std::to_string(key.iteration));
    e.sent = true;
    e.value = std::move(value);
    e.is_dead = is_dead;
    waiters.swap(e.waiters);
    v = e.value;
  }
  // Callbacks run outside the lock: they may schedule work or send again.
  for (auto& w : waiters) w(Status::OK(), v, is_dead);
  return Status::OK();
}

void LocalRendezvous::RecvAsync(const RendezvousKey& key, Callback done) {
  Status aborted;
  Tensor v;
  bool is_dead = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    StepTable& st = steps_[key.step_id];
    aborted = st.aborted;
    if (aborted.ok()) {
      Entry& e = st.entries[std::make_tuple(key.edge, key.frame, key.iteration)];
      if (!e.sent) {
        e.waiters.push_back(std::move(done));
        return;
      }
      v = e.value;
      is_dead = e.is_dead;
    }
  }
  done(aborted, std::move(v), is_dead);
}

void LocalRendezvous::Abort(int64_t step_id, const Status& status) {
  std::vector<Callback> waiters;
  Status st_status;
  {
    std::lock_guard<std::mutex> l(mu_);
    StepTable& st = steps_[step_id];
    if (!st.aborted.ok()) return;
    st.aborted = status.ok() ? Aborted("step aborted") : status;
    st_status = st.aborted;
    for (auto& kv : st.entries)
      for (auto& w : kv.second.waiters) waiters.push_back(std::move(w));
    st.entries.clear();
  }
  for (auto& w : waiters) w(st_status, Tensor(), false);
}

void LocalRendezvous::Cleanup(int64_t step_id) {
  std::lock_guard<std::mutex> l(mu_);
  steps_.erase(step_id);
}

}  // namespace runtime
}  // namespace sf
