// SlotReplicas: a slot holder's side of replication (shardflow node
// --replicas 2; cluster/shard_map.h). When a partition run of slot S ends,
// Sync(S) sends S's backup every change of S's variables since the last
// round, with the update origins their shards applied (so a promoted
// backup applies a step run again once, kernels/update_origin.h), and
// answers once the backup applied them: the run is acknowledged only then.
// Rounds run on one thread for all slots, and whole copies to new backups
// on another (a copy of a big slot must not hold up the other slots' steps),
// one round of a slot at a time: the runs that end while a round is out
// share the next one (group commit). A backup new to
// the holder gets the slot's whole state in its first round; a failed round
// fails its runs (the session runs the step again) and makes the next round
// whole, since what the backup got is unknown.
//
// Runs wait only for a synced backup (one the map marks synced, or that a
// whole copy here reached: the leader marks it synced next), the only kind
// the leader promotes; while a new backup is being copied, runs are
// acknowledged at once, as with no backup, and training goes on.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "actors/serial_queue.h"
#include "actors/variable_shard_protocol.h"
#include "net/messages.h"
#include "shardflow/status.h"

namespace sf {
namespace cluster {

// Sends the changes of slot (taken by ActorVariables::TakeChanges) as
// ReplicateSlot messages from holder, in order, each under kMaxReplicateBytes
// of values: a dense variable bigger than that goes whole as pieces of rows
// (with its leading dimension, so a backup without it defines it first), so
// that no message holds a node's I/O thread for long (a hash shard's state
// goes in one); one taken in pieces (VarChanges::read_rows) has each piece
// read as it goes. `send` sends one and waits for its reply. Nothing is sent
// for no changes unless full. The first error.
inline constexpr int64_t kMaxReplicateBytes = int64_t{16} << 20;
Status SendSlotChanges(int slot, int64_t epoch, const std::string& holder, bool full,
                       std::vector<runtime::VarChanges> changes,
                       const std::function<Status(net::ReplicateSlot)>& send);

class SlotReplicas {
 public:
  struct Hooks {
    std::string self;  // this node's listen address (ReplicateSlot.holder)
    // The names of slot's variables on this node.
    std::function<std::set<std::string>(int slot)> variables_of;
    // The variable store's TakeChanges (pieces_over: ActorVariables::TakeChanges).
    std::function<std::vector<runtime::VarChanges>(const std::set<std::string>& names, bool full,
                                                   int64_t pieces_over)>
        take;
    // Sends m to member `to` and waits for its StatusReply.
    std::function<Status(const std::string& to, net::ReplicateSlot m)> send;
    // SyncWhole's copies go at most this fast (0: unlimited).
    int64_t copy_bytes_per_s = 0;
  };
  explicit SlotReplicas(Hooks hooks);
  // Fails the rounds not begun with Unavailable, and waits for the one out.
  ~SlotReplicas();

  // The backup of each slot in a map of this epoch ("" none) and whether it
  // is synced; an older map than one seen changes nothing.
  void OnMap(const std::vector<std::string>& backups, const std::vector<uint8_t>& synced, int64_t epoch);
  // Calls done (on the rounds' thread, or at once without a backup) once
  // every change of slot made before this call is on its backup, with that
  // backup ("" when the slot had no synced one); the round's error otherwise.
  using SyncDone = std::function<void(Status, const std::string& backup)>;
  void Sync(int slot, SyncDone done);
  // The backup of slot that holds every change made here up to the last
  // round (the one runs wait for, its last round a success), or "".
  std::string SyncedTo(int slot);
  // The placement leader's SyncSlot: a whole round of slot to backup (named
  // by the map of epoch, which may be newer than the one seen here); blocks.
  Status SyncWhole(int slot, const std::string& backup, int64_t epoch);

 private:
  struct Slot {
    std::string backup;                               // the newest map's
    int64_t epoch = 0;                                // of that map
    std::string sent_to;                              // holds every change up to the last round ("": none)
    std::string synced_to;                            // a backup the leader may promote ("": none)
    std::vector<SyncDone> waiting;                    // runs for the next round
    bool scheduled = false;
    std::shared_ptr<std::mutex> round_mu = std::make_shared<std::mutex>();  // one round of the slot at a time
  };
  // One round of slot (the rounds' thread): whole when `whole` or the
  // backup is new, at most copy_bytes_per_s fast when `paced`; its result
  // to the runs that were waiting. `whole` (SyncWhole's copy to a backup the
  // map does not call synced) reads big variables in pieces.
  Status Round(int slot, bool whole, bool paced = false);

  Hooks hooks_;
  std::mutex mu_;
  std::map<int, Slot> slots_;  // GUARDED_BY(mu_)
  runtime::SerialQueue rounds_;
  runtime::SerialQueue copies_;  // SyncWhole's rounds
};

}  // namespace cluster
}  // namespace sf
