#include "cluster/cluster_rendezvous.h"

#include "graph/device_name.h"

namespace sf {
namespace runtime {

ClusterRendezvous::ClusterRendezvous(LocalRendezvous* local, std::string self, std::vector<std::string> tasks,
                                     uint64_t session_id, SendFn send)
    : local_(local), self_(std::move(self)), tasks_(std::move(tasks)), session_id_(session_id),
      send_(std::move(send)) {}

Result<std::string> ClusterRendezvous::Destination(const std::string& edge) {
  const size_t arrow = edge.rfind("->");
  if (arrow == std::string::npos)
    return InvalidArgument("transfer key '" + edge + "' names no receiving device");
  const std::string device = edge.substr(arrow + 2);
  std::lock_guard<std::mutex> l(mu_);
  auto it = device_address_.find(device);
  if (it != device_address_.end()) return it->second;
  auto name = ParseDeviceName(device);
  if (!name.ok()) return name.status().WithPrefix("transfer key '" + edge + "'");
  if (!name->has_task || name->task < 0 || name->task >= static_cast<int>(tasks_.size()))
    return InvalidArgument("transfer key '" + edge + "': device " + device +
                           " is on no task of the session (it has " +
                           std::to_string(tasks_.size()) + ")");
  return device_address_[device] = tasks_[name->task];
}

Status ClusterRendezvous::Send(const RendezvousKey& key, Tensor value, bool is_dead) {
  SF_ASSIGN_OR_RETURN(std::string to, Destination(key.edge));
  if (to == self_) return local_->Send(key, std::move(value), is_dead);
  net::SendTensor st;
  st.step_id = key.step_id;
  st.edge = key.edge;
  st.frame = key.frame;
  st.iteration = key.iteration;
  st.is_dead = is_dead;
  st.value = std::move(value);
  st.session_id = session_id_;
  const int64_t step = key.step_id;
  {
    // Counted first: the dial may end before send_ returns.
    std::lock_guard<std::mutex> l(mu_);
    ++waiting_[step].count;
  }
  std::weak_ptr<ClusterRendezvous> weak = weak_from_this();
  Result<bool> queued = send_(to, std::move(st), [weak, step](Status s) {
    if (auto self = weak.lock()) self->Sent(step, s);
  });
  // Gone at once (or refused, which the op reports itself). Another
  // partition of the step on this node may have called Flush while this
  // send was under way: the count reaching zero answers it here.
  if (!queued.ok() || !*queued) Release(step, Status::OK());
  return queued.ok() ? Status::OK() : queued.status();
}

void ClusterRendezvous::Sent(int64_t step_id, const Status& s) {
  // The step's receives here fail at once, not at its deadline.
  if (!s.ok()) local_->Abort(step_id, s);
  Release(step_id, s);
}

void ClusterRendezvous::Release(int64_t step_id, const Status& s) {
  std::vector<std::function<void(Status)>> flushed;
  Status failed;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = waiting_.find(step_id);
    if (it == waiting_.end()) return;
    Waiting& w = it->second;
    if (!s.ok() && w.failed.ok()) w.failed = s;
    if (--w.count > 0) return;
    if (w.flushed.empty()) {
      // A failure waits for the step's Flush, which reports it.
      if (w.failed.ok()) waiting_.erase(it);
    } else {
      flushed = std::move(w.flushed);
      failed = w.failed;
      waiting_.erase(it);
    }
  }
  for (auto& f : flushed) f(failed);
}

void ClusterRendezvous::Flush(int64_t step_id, std::function<void(Status)> done) {
  Status failed;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = waiting_.find(step_id);
    if (it != waiting_.end()) {
      if (it->second.count > 0) {
        it->second.flushed.push_back(std::move(done));
        return;
      }
      failed = it->second.failed;
      waiting_.erase(it);
    }
  }
  done(failed);
}

void ClusterRendezvous::RecvAsync(const RendezvousKey& key,
                                  std::function<void(Status, Tensor, bool)> done) {
  local_->RecvAsync(key, std::move(done));
}

void ClusterRendezvous::Abort(int64_t step_id, const Status& status) {
  local_->Abort(step_id, status);
}

}  // namespace runtime
}  // namespace sf
