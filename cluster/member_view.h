// MemberView: what a node tells its sessions about the membership: the
// members etcd lists (itself first), which of them are draining, and the
// sessions that asked (watchers), told of every change.
//
// Thread-safety: every method may be called from any thread; it has its own
// lock, never held while it sends.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cluster/member_table.h"
#include "cluster/shard_map.h"
#include "net/peer_rpc.h"

namespace sf {
namespace cluster {

class MemberView {
 public:
  // self: this node, first in every list (its incarnation set by Update).
  explicit MemberView(net::Member self);
  // The node's name and address once known (Start sets them after listening).
  void SetSelf(const std::string& name, const std::string& address);

  // Replaces the list with etcd's; true when it changed. *self_leaving says
  // whether etcd marks this node draining; log gets one line per member
  // that joined or left.
  bool Update(const std::vector<MemberRecord>& records, bool* self_leaving,
              const std::function<void(const std::string&)>& log);
  // Marks this node draining in the list it serves.
  void MarkSelfLeaving();
  // The cluster places by a shard map of `slots` slots (etcd clusters).
  void SetMapSlots(int slots);
  // The newest shard map; true when it is newer than the one held.
  bool SetMap(const ShardMap& map);
  // The members, itself first.
  std::vector<net::Member> Members() const;
  // The members and which are draining, as a session is told them.
  net::Membership Snapshot() const;
  // Adds c to the sessions told of changes (once; at most kMaxWatchers live).
  void Watch(const net::ConnectionPtr& c);
  // Tells every live watcher the current Snapshot (one-way; a watcher that
  // went away is dropped).
  void NotifyWatchers();

  static constexpr size_t kMaxWatchers = 4096;

 private:
  mutable std::mutex mu_;
  std::vector<net::Member> members_;                    // GUARDED_BY(mu_), self first
  std::set<std::string> leaving_;                       // GUARDED_BY(mu_), by address
  ShardMap map_;                                        // GUARDED_BY(mu_)
  int map_slots_ = 0;                                   // GUARDED_BY(mu_)
  std::vector<std::weak_ptr<net::Connection>> watchers_;  // GUARDED_BY(mu_)
};

}  // namespace cluster
}  // namespace sf
