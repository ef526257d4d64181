// ShardMap: which member holds each slot of the cluster, decided by the
// placement leader alone (cluster/placement_leader.h) and kept in etcd
// under PREFIX/map; every node and session follows it. A slot is a logical
// task ("/job:worker/task:S"): the variables, table shards and partitions a
// session places on task S live on the slot's holder. The map's epoch is
// its key's mod_revision in etcd, so a newer map always has a larger epoch.
//
// A slot moves while its old holder serves it: the new holder becomes its
// backup, is copied the slot's state and kept up to date; then a handover
// (cluster/placement_leader.h): the entry names both ends ("to" and "from"),
// sessions stop placing steps there, the old holder stops serving the slot
// (a fence) once its runs ended, and the map names the new holder alone.
// A move marked without a handover (by an older version) is fence-then-copy:
// the same, with the old holder copying the slot's state to the new one.
//
// With replication (--replicas 2) a slot also has a backup on another
// member: the holder (its primary) sends it every change of the slot before
// a step that made it is acknowledged (cluster/slot_replicas.h). A backup is
// `synced` once the holder copied it the slot's whole state; only a synced
// backup takes its holder's place when the holder dies (nothing lost).
//
// Thread-safety: a value type; the functions are pure.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "shardflow/cluster.h"
#include "shardflow/status.h"

namespace sf {
namespace cluster {

struct ShardMap {
  int64_t epoch = 0;                 // the key's mod_revision (0: not from etcd)
  std::vector<std::string> holder;   // by slot: the member address serving it
  std::vector<std::string> from;     // by slot: "" or the address it is moving from
  // By slot: 0, or the epoch after which the slot's state was lost (its
  // holder died and it moved without a copy): a session placed by that
  // epoch or an older one restores the slot's variables from a checkpoint.
  std::vector<int64_t> lost_after;
  std::vector<std::string> backup;   // by slot: "" or the member holding its replica
  std::vector<uint8_t> synced;       // by slot: 1 once the backup holds the slot's whole state
  // By slot, while it moves: 1 when its new holder was the old holder's
  // synced backup (a handover: nothing to copy, and nothing is lost if the
  // old holder dies before it ends).
  std::vector<uint8_t> handover;
  bool moving() const;               // any slot moving
  // Equal placements (a missing backup or synced entry counts as none).
  bool operator==(const ShardMap& o) const;
};

// The map's text in etcd: "v1 SLOTS\n" then one line per slot: "HOLDER",
// "+BACKUP" (synced) or "+?BACKUP" (being copied) with a replica, "<FROM"
// appended while it moves ("<=FROM" for a handover), "!EPOCH" appended once
// its state was lost.
std::string EncodeShardMap(const ShardMap& m);
// Parses EncodeShardMap's text (epoch is left 0); DataLoss naming what is
// wrong (a version, count or line that does not parse, more than kMaxSlots).
Result<ShardMap> DecodeShardMap(const std::string& text);

// The next placement: every slot on a member of `live` (non-empty), every
// prefix of the slots spread evenly (a session of n tasks uses slots 0..n-1),
// keeping each slot where it is while its holder's share of the slots before
// it allows (else it goes to a least loaded member, its synced backup when
// that is one); no moves in progress; lost marks kept. With replicas >= 2 and
// two or more live members each slot has a backup on another member (kept
// while it is live and not the holder; synced only if its holder is
// unchanged), backups spread evenly. `old` may be empty or shorter than slots.
ShardMap PlanShardMap(const ShardMap& old, const std::vector<std::string>& live, int slots, int replicas = 1);

inline constexpr int kMaxSlots = 4096;

// A node refuses a step of a partition placed by an older map than its
// slot's fence with Aborted carrying this text: nothing of that partition
// ran, and the session follows the new map before its next step. The step
// fails (its parts on other nodes may have run: it is not run again).
inline constexpr const char (&kStaleEpoch)[sizeof(kStaleShardMap)] = kStaleShardMap;
// Whether s is such a refusal.
bool IsStaleEpoch(const Status& s);

}  // namespace cluster
}  // namespace sf
