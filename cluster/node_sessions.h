// NodeSessions: the cluster sessions a node serves partitions for, each
// owned by the client connection that registered it, with its partitions
// (handles), the slot and map epoch each was placed by, its namespace, and
// the host and rendezvous its steps run in. What one client, and all, may
// make a node hold is bounded (Limits). A part of ClusterNode
// (cluster/node_impl.h) with one job and its own lock.
//
// Thread-safety: every method may be called from any thread. The lock is
// held for the method only and calls out to nothing (a session dropped
// drops its references to its host and rendezvous, whose last one stops
// the host's actor); where the node's `mu` is held too it is taken first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "shardflow/status.h"

namespace sf {
namespace net {
class Connection;
}  // namespace net
namespace runtime {
class ClusterRendezvous;
class PartitionHost;
}  // namespace runtime
namespace cluster {

class NodeSessions {
 public:
  struct Limits {
    size_t sessions_per_client = 256;
    size_t sessions = 4096;
    size_t partitions_per_session = 4096;
    size_t partitions = 65536;
  };
  // (slot, map epoch that placed the partition); slot -1: placed by no map.
  using Slot = std::pair<int, int64_t>;
  // What a session's steps run in: null until the node makes them (SetHost).
  struct Runtime {
    std::shared_ptr<runtime::PartitionHost> host;
    std::shared_ptr<runtime::ClusterRendezvous> rendezvous;
  };
  // A run's partition as its client sees it: host null when the session is
  // unknown or another client's.
  struct Partition {
    std::shared_ptr<runtime::PartitionHost> host;
    std::string ns;
    Slot slot{-1, 0};
  };

  // node names the node in errors.
  NodeSessions(std::string node, Limits limits);

  // Adds partition `handle`, placed by `slot`, to `session` of client
  // (`who` names it in errors), making the session (of namespace ns) when
  // it is new; its Runtime (empty for a new session). PermissionDenied when
  // the session is another client's; ResourceExhausted naming the bound
  // when the session, or the partition, would pass one.
  Result<Runtime> Add(uint64_t session, uint64_t handle, Slot slot, const net::Connection* client,
                      const std::string& who, const std::string& ns);
  // Sets a session's host and rendezvous (once Add made it); no-op for an unknown session.
  void SetRuntime(uint64_t session, Runtime rt);

  // Whether session is known.
  bool Has(uint64_t session) const;
  // session's host; null when it is unknown or has none yet.
  std::shared_ptr<runtime::PartitionHost> HostOf(uint64_t session) const;
  // client's partition `handle` of session (see Partition).
  Partition Find(uint64_t session, uint64_t handle, const net::Connection* client) const;
  // Whether session is known and another client's than client.
  bool IsOthers(uint64_t session, const net::Connection* client) const;

  // Closes session if it is client's; whether it was.
  bool Close(uint64_t session, const net::Connection* client);
  // Closes client's sessions (it went away); how many.
  size_t CloseClient(const net::Connection* client);
  // Closes the sessions of namespace ns; how many.
  size_t CloseNamespace(const std::string& ns);
  // Closes every session.
  void Clear();

  // How many sessions each namespace has open.
  std::map<std::string, int64_t> CountByNamespace() const;
  size_t size() const;
  bool empty() const;

 private:
  struct Session {
    const net::Connection* client = nullptr;
    std::set<uint64_t> handles;
    std::map<uint64_t, Slot> slot_of;  // by handle
    std::string ns;
    Runtime rt;
  };
  // Closes the sessions close(id, session) says; how many.
  size_t CloseWhere(const std::function<bool(uint64_t, const Session&)>& close);

  const std::string node_;
  const Limits limits_;
  mutable std::mutex mu_;
  std::map<uint64_t, Session> sessions_;  // GUARDED_BY(mu_)
  size_t partitions_ = 0;                 // GUARDED_BY(mu_): handles over all sessions
};

}  // namespace cluster
}  // namespace sf
