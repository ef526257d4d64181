// A node's share of placement by the shard map (cluster/node_impl.h,
// cluster/placement_leader.h): following the map (and leading it when
// elected), and the old holder's part of a slot's move: the fence, the wait
// for the slot's older runs, and the copy of its variables to the new holder.
#include <future>

#include "cluster/node_impl.h"

namespace sf {

Status ClusterNode::Impl::StartPlacement(const std::optional<net::Credential>& credential) {
  view.SetMapSlots(opts.map_slots);
  cluster::PlacementOptions po;
  po.etcd = opts.etcd;
  po.credential = credential;
  po.cluster = opts.cluster.empty() ? "default" : opts.cluster;
  po.address = address;
  po.name = opts.name;  // a key etcd's roles give this node alone (cluster/cluster_auth.h)
  po.slots = opts.map_slots;
  po.lease_ttl_s = opts.lease_ttl_s;
  po.replicas = opts.replicas;
  po.move = [this](int slot, const std::string& from, const std::string& to, int64_t epoch) {
    return MoveSlotVia(slot, from, to, epoch, kFenceWaitMs + 120000);
  };
  // A handover copies nothing: a hung old holder holds the leader (and with
  // it every failover) a few seconds at most.
  po.hand_over = [this](int slot, const std::string& from, const std::string& to, int64_t epoch) {
    return MoveSlotVia(slot, from, to, epoch, kHandOverWaitMs);
  };
  // Every node replicates when the map gives a slot a backup: with
  // --replicas 1 a move's new holder is one while it is copied (the old
  // holder serves on meanwhile, placement_leader.cc).
  StartReplicas();
  po.sync = [this](int slot, const std::string& holder, const std::string& backup, int64_t epoch) {
    return SyncSlotVia(slot, holder, backup, epoch);
  };
  po.on_map = [this](const cluster::ShardMap& m) {
    {
      // A slot the map gives another member is served here no more to
      // partitions placed by an older map (a node that was cut off, whose
      // slots moved without it, learns it here).
      std::lock_guard<std::mutex> l(mu);
      // The old holder of a move in progress is fenced by the leader's
      // MoveSlot, after sessions had time to stop placing by the old map.
      for (size_t s = 0; s < m.holder.size(); ++s)
        if (m.holder[s] != address && m.from[s] != address) admission.Fence(static_cast<int>(s), m.epoch);
      // Unfinished rounds of a holder the map no longer names are refused
      // when they end: their bytes go now.
      staged.KeepOnly([&](int slot, const std::string& holder) {
        const auto s = static_cast<size_t>(slot);
        const bool named = s < m.holder.size() && (m.holder[s] == holder && s < m.backup.size() && m.backup[s] == address);
        return named || (s < m.from.size() && m.from[s] == holder);
      });
      if (draining) idle.notify_all();  // it may hold no slot now
    }
    if (replicas) {
      // A slot handed over from here keeps replicating to its new holder
      // (its synced backup until now) until this node's fence: runs placed
      // by an older map may still end here meanwhile.
      std::vector<std::string> backups = m.backup;
      std::vector<uint8_t> synced = m.synced;
      backups.resize(m.holder.size());
      synced.resize(m.holder.size());
      for (size_t s = 0; s < m.holder.size(); ++s)
        if (s < m.from.size() && m.from[s] == address && s < m.handover.size() && m.handover[s]) {
          backups[s] = m.holder[s];
          synced[s] = 1;
        }
      replicas->OnMap(backups, synced, m.epoch);
    }
    if (view.SetMap(m)) view.NotifyWatchers();
  };
  po.answers = [this](const std::string& addr) {
    if (addr == address) return true;
    // A node whose connection here went silent or closed lately is not
    // dialed again: a hung one would hold the leader for a dial's timeout
    // before its backup takes over.
    if (router.LostWithin(addr, 2000 * static_cast<int64_t>(opts.lease_ttl_s) + opts.peer_timeout_ms)) return false;
    auto c = router.Peer(addr);
    return c.ok() && net::Call(*c, net::ListMembers{}, std::max(1, 2 * opts.peer_timeout_ms)).ok();
  };
  po.log = [this](const std::string& line) { Log(line); };
  SF_ASSIGN_OR_RETURN(placement, cluster::PlacementLeader::Start(std::move(po)));
  return Status::OK();
}

Status ClusterNode::Impl::MoveSlotVia(int slot, const std::string& from, const std::string& to, int64_t epoch,
                                      int timeout_ms) {
  if (from == address) return MoveSlotHere(slot, to, epoch);
  // A node whose connection here went silent lately is not dialed: it may hang.
  if (router.LostWithin(from, 2000 * static_cast<int64_t>(opts.lease_ttl_s) + opts.peer_timeout_ms))
    return Unavailable("slot " + std::to_string(slot) + "'s old holder " + from + " went silent lately");
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, router.Peer(from));
  // The old holder waits for the slot's runs (kFenceWaitMs), then copies.
  return net::Call(c, net::MoveSlot{slot, to, epoch}, timeout_ms)
      .status()
      .WithPrefix("moving slot " + std::to_string(slot) + " from " + from + " to " + to);
}

void ClusterNode::Impl::ServeSlotWork(const net::ConnectionPtr& c, net::Answer<net::StatusReply> done, int slot,
                                      const char* what,
                                      std::function<Status()> work) {
  // Only the placement leader, a node, moves and syncs slots.
  if (c->peer_role() != net::Role::kNode)
    return done(PermissionDenied(std::string("only nodes ") + what + " slots; " +
                                                          c->peer_address() + " holds a session credential"));
  if (slot < 0 || slot >= opts.map_slots)
    return done(InvalidArgument("slot " + std::to_string(slot) + " is not one of the " +
                                                         std::to_string(opts.map_slots) + " of the shard map"));
  if (moves_waiting.fetch_add(1) >= kMaxMovesWaiting) {
    --moves_waiting;
    return done(ResourceExhausted("node " + opts.name + " has " +
                                                           std::to_string(kMaxMovesWaiting) +
                                                           " slot moves waiting already"));
  }
  movers.Post([this, done, work = std::move(work)] {
    Status s = work();
    --moves_waiting;
    done(s);
  });
}

void ClusterNode::Impl::ServeMoveSlot(const net::ConnectionPtr& c, net::MoveSlot m,
                                      net::Answer<net::StatusReply> done) {
  ServeSlotWork(c, done, m.slot, "move", [this, m] { return MoveSlotHere(m.slot, m.to, m.epoch); });
}

Status ClusterNode::Impl::MoveSlotHere(int slot, const std::string& to, int64_t epoch) {
  admission.Fence(slot, epoch);
  // Runs of the slot that started before the fence end first: what they
  // change is part of what moves. Stop ends the wait (admission.Close).
  auto drained = [&](int64_t ms) {
    return admission.WaitOlderRuns(slot, std::chrono::steady_clock::now() + std::chrono::milliseconds(ms));
  };
  bool done = drained(kFenceQueueGraceMs);
  if (!done) {
    // One still running after the grace waits, as a rule, for a peer that
    // now goes to the new holder: on a queue of the slot (an enqueue into a
    // full queue, a dequeue, a chunk Take), or for a tensor of its step's
    // part that waits so on another slot's queue (that slot's own move comes
    // after this one). It would hold the move until the timeout. Its waits
    // end as placed by a stale epoch: nothing it changed here is
    // acknowledged, and its session follows the map and runs the step (or
    // its input) again there.
    const std::vector<int64_t> older = admission.OlderRuns(slot);
    const Status stale = Aborted("node " + opts.name + ": slot " + std::to_string(slot) + " " +
                                 cluster::kStaleEpoch + " (it moves at epoch " + std::to_string(epoch) +
                                 "); the session follows the new map before its next step");
    for (int64_t step : older) {
      rendezvous.Abort(step, stale);
      queues->CancelStep(step, stale);
    }
    done = drained(kFenceWaitMs);
  }
  if (!done)
    return DeadlineExceeded("node " + opts.name + ": partitions of slot " + std::to_string(slot) +
                            " placed before epoch " + std::to_string(epoch) + " still run after " +
                            std::to_string(kFenceQueueGraceMs + kFenceWaitMs) + " ms");
  std::set<std::string> names;
  {
    std::lock_guard<std::mutex> l(mu);
    if (stopped) return Unavailable("node " + opts.name + " is stopping");
    names = SlotState(slot);
  }
  // A handover: every run of the slot here sent its changes to `to`, its
  // synced backup, before it ended; there is nothing to copy.
  if (replicas && replicas->SyncedTo(slot) == to) {
    Log("slot " + std::to_string(slot) + " handed over to " + to + " at epoch " + std::to_string(epoch));
    return Status::OK();
  }
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, router.Peer(to));
  int64_t moved = 0, bytes = 0;
  // The whole state, with the update origins the slot's shards applied (a
  // step that ran here and runs again there applies nothing twice), in
  // messages under kMaxReplicateBytes.
  std::vector<runtime::VarChanges> state = variables->TakeChanges(names, /*full=*/true);
  for (const auto& v : state) {
    moved += v.value.valid();
    bytes += v.value.valid() ? static_cast<int64_t>(v.value.bytes()) : 0;
  }
  Status sent = cluster::SendSlotChanges(slot, epoch, address, true, std::move(state), [&](net::ReplicateSlot m) {
    return net::Call(c, std::move(m), 120000).status();
  });
  if (!sent.ok()) return sent.WithPrefix("copying slot " + std::to_string(slot) + " to " + to);
  Log("slot " + std::to_string(slot) + " moved to " + to + " at epoch " + std::to_string(epoch) + ": " +
      std::to_string(moved) + " variables, " + std::to_string(bytes) + " bytes");
  return Status::OK();
}

}  // namespace sf
