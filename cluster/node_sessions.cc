// NodeSessions (cluster/node_sessions.h).
#include "cluster/node_sessions.h"

#include <vector>

namespace sf {
namespace cluster {

NodeSessions::NodeSessions(std::string node, Limits limits) : node_(std::move(node)), limits_(limits) {}

Result<NodeSessions::Runtime> NodeSessions::Add(uint64_t session, uint64_t handle, Slot slot,
                                                const net::Connection* client, const std::string& who,
                                                const std::string& ns) {
  std::lock_guard<std::mutex> l(mu_);
  auto existing = sessions_.find(session);
  if (existing == sessions_.end()) {
    size_t mine = 0;
    for (const auto& kv : sessions_) mine += kv.second.client == client;
    if (mine >= limits_.sessions_per_client)
      return ResourceExhausted("client " + who + " has " + std::to_string(mine) + " sessions on node " + node_ +
                               " already (at most " + std::to_string(limits_.sessions_per_client) + ")");
    if (sessions_.size() >= limits_.sessions)
      return ResourceExhausted("node " + node_ + " holds " + std::to_string(sessions_.size()) +
                               " sessions already (at most " + std::to_string(limits_.sessions) + ")");
  } else if (existing->second.client != client) {
    return PermissionDenied("session " + std::to_string(session) + " on node " + node_ +
                            " belongs to another client");
  } else if (!existing->second.handles.count(handle) &&
             existing->second.handles.size() >= limits_.partitions_per_session) {
    return ResourceExhausted("session " + std::to_string(session) + " has " +
                             std::to_string(limits_.partitions_per_session) + " partitions on node " + node_ +
                             " already");
  }
  const bool new_handle = existing == sessions_.end() || !existing->second.handles.count(handle);
  if (new_handle && partitions_ >= limits_.partitions)
    return ResourceExhausted("node " + node_ + " holds " + std::to_string(partitions_) +
                             " partitions already (at most " + std::to_string(limits_.partitions) + ")");
  Session& s = sessions_[session];
  s.client = client;
  s.ns = ns;
  if (s.handles.insert(handle).second) ++partitions_;
  if (slot.first >= 0) s.slot_of[handle] = slot;
  return s.rt;
}

void NodeSessions::SetRuntime(uint64_t session, Runtime rt) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(session);
  if (it != sessions_.end()) it->second.rt = std::move(rt);
}

bool NodeSessions::Has(uint64_t session) const {
  std::lock_guard<std::mutex> l(mu_);
  return sessions_.count(session) > 0;
}

std::shared_ptr<runtime::PartitionHost> NodeSessions::HostOf(uint64_t session) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(session);
  return it == sessions_.end() ? nullptr : it->second.rt.host;
}

NodeSessions::Partition NodeSessions::Find(uint64_t session, uint64_t handle, const net::Connection* client) const {
  std::lock_guard<std::mutex> l(mu_);
  Partition p;
  auto it = sessions_.find(session);
  // Another client's session is as unknown to this one as no session.
  if (it == sessions_.end() || it->second.client != client) return p;
  p.host = it->second.rt.host;
  p.ns = it->second.ns;
  if (auto h = it->second.slot_of.find(handle); h != it->second.slot_of.end()) p.slot = h->second;
  return p;
}

bool NodeSessions::IsOthers(uint64_t session, const net::Connection* client) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(session);
  return it != sessions_.end() && it->second.client != client;
}

bool NodeSessions::Close(uint64_t session, const net::Connection* client) {
  return CloseWhere([&](uint64_t id, const Session& s) { return id == session && s.client == client; }) > 0;
}

size_t NodeSessions::CloseClient(const net::Connection* client) {
  return CloseWhere([&](uint64_t, const Session& s) { return s.client == client; });
}

size_t NodeSessions::CloseNamespace(const std::string& ns) {
  return CloseWhere([&](uint64_t, const Session& s) { return s.ns == ns; });
}

void NodeSessions::Clear() {
  CloseWhere([](uint64_t, const Session&) { return true; });
}

size_t NodeSessions::CloseWhere(const std::function<bool(uint64_t, const Session&)>& close) {
  // Dropped outside the lock: a session's last reference to its host stops the host's actor.
  std::vector<Session> closed;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (!close(it->first, it->second)) {
        ++it;
        continue;
      }
      partitions_ -= it->second.handles.size();
      closed.push_back(std::move(it->second));
      it = sessions_.erase(it);
    }
  }
  return closed.size();
}

std::map<std::string, int64_t> NodeSessions::CountByNamespace() const {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, int64_t> out;
  for (const auto& kv : sessions_) ++out[kv.second.ns];
  return out;
}

size_t NodeSessions::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return sessions_.size();
}

bool NodeSessions::empty() const {
  std::lock_guard<std::mutex> l(mu_);
  return sessions_.empty();
}

}  // namespace cluster
}  // namespace sf
