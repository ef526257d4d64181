// What a node keeps of the shard map's slots it serves, as two parts of
// ClusterNode (cluster/node_impl.h), each with one job and its own lock:
// - SlotNames: the variables each slot's partitions use here and those the
//   node took as a slot's backup: what a replication round or a move of the
//   slot sends from here.
// - StagedRounds: as a backup, the replication rounds a holder is sending,
//   kept until a round's last message so a round is applied whole or not at
//   all (a holder that dies half way), within a byte budget over all slots.
//
// Thread-safety: every method may be called from any thread. The lock is
// held for the method only; StateOf's held_here runs outside it, the other
// predicates under it (they must take no lock). Where the node's `mu` is
// held too it is taken first.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shardflow/status.h"

namespace sf {
namespace cluster {

class SlotNames {
 public:
  // Notes that slot's partitions here use names.
  void AddOwn(int slot, const std::set<std::string>& names);
  // Notes that names came here as slot's backup (they are slot's state too).
  void AddBackedUp(int slot, const std::set<std::string>& names);
  // What a round or move of slot sends from here: its names, less those
  // this node took as the backup of another slot it does not hold
  // (held_here(other) says whether it does: asked only when another slot
  // is backed up here) unless slot's own state brought them too. A copy
  // kept for a slot backed up here must never travel as another slot's
  // state: it would overwrite that slot's holder, where it is the backup.
  std::set<std::string> StateOf(int slot, const std::function<bool(int other)>& held_here) const;
  // The slots whose names include any of names; empty when none.
  std::set<int> SlotsOf(const std::vector<std::string>& names) const;
  // Forgets every name gone(name) says (a namespace dropped).
  void DropWhere(const std::function<bool(const std::string&)>& gone);

 private:
  mutable std::mutex mu_;
  std::map<int, std::set<std::string>> own_;     // GUARDED_BY(mu_): every name of a slot here
  std::map<int, std::set<std::string>> backed_;  // GUARDED_BY(mu_): those taken as its backup
};

// Change: one variable's changes in a round (runtime::VarChanges on a node).
template <typename Change>
class StagedRounds {
 public:
  // node names the node in errors; max_bytes bounds what all slots' unfinished rounds hold.
  StagedRounds(std::string node, int64_t max_bytes) : node_(std::move(node)), max_bytes_(max_bytes) {}

  // Adds a message of holder's round `round` of slot (`bytes` its changes'
  // size); a message of another round or holder drops the one staged. The
  // whole round once `last`, else nullopt; ResourceExhausted, dropping the
  // slot's round, when the bytes would pass max_bytes.
  Result<std::optional<std::vector<Change>>> Stage(int slot, const std::string& holder, uint64_t round,
                                                   std::vector<Change> changes, int64_t bytes, bool last) {
    std::lock_guard<std::mutex> l(mu_);
    Round& st = rounds_[slot];
    if (st.holder != holder || st.round != round) {
      bytes_ -= st.bytes;
      st = Round{holder, round, {}, 0};
    }
    if (bytes_ + bytes > max_bytes_) {
      bytes_ -= st.bytes;
      rounds_.erase(slot);
      return ResourceExhausted("node " + node_ + " holds " + std::to_string(max_bytes_) +
                               " bytes of unfinished replication rounds already; slot " + std::to_string(slot) +
                               "'s round is dropped");
    }
    bytes_ += bytes;
    st.bytes += bytes;
    for (auto& ch : changes) st.changes.push_back(std::move(ch));
    if (!last) return std::optional<std::vector<Change>>();
    std::vector<Change> whole = std::move(st.changes);
    bytes_ -= st.bytes;
    rounds_.erase(slot);
    return std::optional<std::vector<Change>>(std::move(whole));
  }

  // Drops the unfinished rounds keep(slot, holder) refuses (their holder
  // is no longer the slot's, by a new map).
  void KeepOnly(const std::function<bool(int slot, const std::string& holder)>& keep) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = rounds_.begin(); it != rounds_.end();) {
      if (keep(it->first, it->second.holder)) {
        ++it;
        continue;
      }
      bytes_ -= it->second.bytes;
      it = rounds_.erase(it);
    }
  }

  // The bytes staged over all slots, and how many slots have a round staged (tests, logs).
  int64_t bytes() const {
    std::lock_guard<std::mutex> l(mu_);
    return bytes_;
  }
  size_t size() const {
    std::lock_guard<std::mutex> l(mu_);
    return rounds_.size();
  }

 private:
  struct Round {
    std::string holder;
    uint64_t round = 0;
    std::vector<Change> changes;
    int64_t bytes = 0;
  };
  const std::string node_;
  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::map<int, Round> rounds_;  // GUARDED_BY(mu_)
  int64_t bytes_ = 0;            // GUARDED_BY(mu_)
};

}  // namespace cluster
}  // namespace sf
