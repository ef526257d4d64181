// PlacementLeader: a node's part in placement. Every node with etcd runs
// one: it follows the cluster's shard map (PREFIX/map, cluster/shard_map.h)
// and campaigns in etcd's election (PREFIX/leader). The one that leads
// computes the map from the members and carries out its moves, once for
// the whole cluster. A slot moves while its old holder serves it: the new
// holder is made the slot's backup, synced by the old holder (options.sync:
// a whole copy, then every change), and once synced the two swap roles in
// one epoch; the old holder fences itself when it sees that map, and the
// new one refuses its rounds from then on. A slot whose holder died moves
// at once: to its synced backup when it has one (promoted: nothing lost),
// else with nothing to copy (sessions restore it from a checkpoint). New
// backups are synced the same way, by a thread of their own (a copy never
// holds up a failover), and marked synced in the map one by one. Each write
// is a transaction on the map's mod_revision and the leader key's
// create_revision, so a deposed leader writes nothing. A new leader finishes
// the moves its predecessor left marked: handovers, and fence-then-copy
// moves of older versions (the old holder copies the slot's state to the
// new one after its fence, options.move).
//
// Thread-safety: every method may be called from any thread; callbacks run
// on its own threads, never under its lock.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/member_table.h"
#include "cluster/shard_map.h"
#include "net/credentials.h"
#include "shardflow/status.h"

namespace sf {
namespace cluster {

struct PlacementOptions {
  std::string etcd;                           // "host:port[,...]" (required)
  std::optional<net::Credential> credential;  // none: plaintext (insecure clusters)
  std::string cluster = "default";
  std::string address;                        // this node's (the leader key's value)
  std::string name;                           // this node's member name: its candidate key leader/NAME ("": by lease)
  int slots = 64;                             // the map's slots, in [1, kMaxSlots]
  int lease_ttl_s = 2;                        // the leader's lease
  int request_timeout_ms = 5000;
  // After marking slots moving and before fencing their old holders: the
  // time sessions get to learn of it (a node tells them at once) and stop
  // starting steps there, so that a fence rarely refuses a step.
  int move_grace_ms = 300;
  // 2: every slot gets a backup on another member (with two or more), which
  // takes its holder's place when the holder dies; 1: none.
  int replicas = 1;
  // Has `holder` copy slot's whole state to its new backup (and send it
  // every change from then on); OK once the backup is synced, or why not.
  std::function<Status(int slot, const std::string& holder, const std::string& backup, int64_t epoch)> sync;
  // Has `from` copy slot's state to `to` after it stopped serving the slot
  // at epoch (the old holder's fence); OK, or why not (retried later). For
  // fence-then-copy moves an older version's leader left marked.
  std::function<Status(int slot, const std::string& from, const std::string& to, int64_t epoch)> move;
  // A handover's fence: has `from` stop serving slot at epoch and wait for
  // the slot's older runs, copying nothing (`to` is its synced backup);
  // bounded by a few seconds, since the handover is safe without it (it
  // only spares those runs a retry). Null: `move` serves.
  std::function<Status(int slot, const std::string& from, const std::string& to, int64_t epoch)> hand_over;
  // Whether the node at address still answers (null: never asked). A
  // holder etcd no longer lists (its lease ended while etcd or the node
  // stalled) that answers still has its state: its slots move with a copy,
  // never as lost.
  std::function<bool(const std::string& address)> answers;
  // Every map read or watched, newest last.
  std::function<void(const ShardMap&)> on_map;
  std::function<void(const std::string&)> log;  // null: silent
};

class PlacementLeader {
 public:
  // Connects, reads the map and watches it, and starts campaigning.
  // InvalidArgument for bad options; etcd's errors naming it.
  static Result<std::unique_ptr<PlacementLeader>> Start(PlacementOptions options);
  // Stop().
  ~PlacementLeader();
  // Resigns, stops the threads; idempotent.
  void Stop();

  // The members now (etcd's list, from the node's registry): a leader
  // replans with them.
  void SetMembers(const std::vector<MemberRecord>& members);
  // The newest map seen (empty before the first is written).
  ShardMap Map() const;
  // Reads the map from etcd now and passes it on (on_map) if newer; the
  // call's error otherwise.
  Status Refresh();
  // Whether this node leads now.
  bool leading() const;

  struct Impl;

 private:
  explicit PlacementLeader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The cluster's shard map as etcd holds it (`shardflow cluster map`); an
// empty map when none is written yet, etcd's errors naming it.
Result<ShardMap> ReadShardMap(const std::string& etcd, const std::optional<net::Credential>& credential,
                              const std::string& cluster, int timeout_ms = 5000);

}  // namespace cluster
}  // namespace sf
