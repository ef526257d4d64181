// A node's share of replication (shardflow node --replicas 2;
// cluster/slot_replicas.h): as a slot's holder it sends the slot's changes
// to the backup before a run is acknowledged, and copies the whole slot to
// a new backup when the placement leader asks; as a backup it applies what
// the slot's holder sends, refusing a holder the map no longer names.
#include "actors/join_statuses.h"
#include "cluster/node_impl.h"
#include "graph/namespaces.h"

namespace sf {

void ClusterNode::Impl::StartReplicas() {
  cluster::SlotReplicas::Hooks h;
  h.self = address;
  h.variables_of = [this](int slot) { return SlotState(slot); };
  h.take = [this](const std::set<std::string>& names, bool full, int64_t pieces_over) {
    return variables->TakeChanges(names, full, pieces_over);
  };
  h.send = [this](const std::string& to, net::ReplicateSlot m) {
    SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, router.Peer(to));
    return net::Call(c, std::move(m), std::max(2000, 10 * opts.peer_timeout_ms)).status();
  };
  h.copy_bytes_per_s = int64_t{opts.copy_mib_per_s} << 20;
  replicas = std::make_unique<cluster::SlotReplicas>(std::move(h));
}

Status ClusterNode::Impl::SyncSlotVia(int slot, const std::string& holder, const std::string& backup,
                                      int64_t epoch) {
  if (holder == address) {
    if (!replicas) return FailedPrecondition("node " + opts.name + " has not started replication");
    return replicas->SyncWhole(slot, backup, epoch);
  }
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, router.Peer(holder));
  return net::Call(c, net::SyncSlot{slot, backup, epoch}, kFenceWaitMs + 120000)
      .status()
      .WithPrefix("syncing slot " + std::to_string(slot) + " from " + holder + " to its backup " + backup);
}

void ClusterNode::Impl::ServeSyncSlot(const net::ConnectionPtr& c, net::SyncSlot m,
                                      net::Answer<net::StatusReply> done) {
  ServeSlotWork(c, done, m.slot, "sync", [this, m] {
    if (!replicas) return FailedPrecondition("node " + opts.name + " has not started replication");
    return replicas->SyncWhole(m.slot, m.backup, m.epoch);
  });
}

void ClusterNode::Impl::ServeReplicateSlot(const net::ConnectionPtr& c, net::ReplicateSlot m,
                                           net::Answer<net::StatusReply> done) {
  if (c->peer_role() != net::Role::kNode)
    return done(PermissionDenied("only nodes replicate slots; " + c->peer_address() +
                                                          " holds a session credential"));
  if (!placement_ready.load() || m.slot < 0 || m.slot >= opts.map_slots)
    return done(InvalidArgument("slot " + std::to_string(m.slot) + " is no slot of node " +
                                                         opts.name + "'s shard map"));
  // The map must name the sender the slot's holder and this node its
  // backup: a holder that was replaced (it stalled, or was cut off) is
  // refused, so it can acknowledge nothing after its successor took over.
  // A move's copy comes from the slot's old holder to its new one.
  auto names_us = [&](const cluster::ShardMap& map) {
    const auto s = static_cast<size_t>(m.slot);
    if (s >= map.holder.size()) return false;
    const bool backup = s < map.backup.size() && map.holder[s] == m.holder && map.backup[s] == address;
    const bool move = s < map.from.size() && map.from[s] == m.holder && map.holder[s] == address;
    return backup || move;
  };
  cluster::PlacementLeader* pl = placement_ready.load();
  cluster::ShardMap map = pl->Map();
  if (!names_us(map) && map.epoch < m.epoch && pl->Refresh().ok()) map = pl->Map();
  if (!names_us(map))
    return done(FailedPrecondition(
                            "node " + opts.name + ": the shard map (epoch " + std::to_string(map.epoch) +
                            ") does not make " + m.holder + " the holder of slot " + std::to_string(m.slot) +
                            " with this node its backup"));
  std::vector<runtime::VarChanges> changes;
  for (size_t i = 0; i < m.names.size(); ++i) {
    runtime::VarChanges ch;
    ch.name = std::move(m.names[i]);
    ch.value = std::move(m.values[i]);
    if (m.rows[i].rank() != 0) ch.rows = std::move(m.rows[i]);  // a scalar: the whole value
    ch.leading = m.leading[i];
    if (!m.counters.empty() && m.counters[net::ReplicateSlot::kReplicaCounters * i] >= 0)
      ch.replica.assign(m.counters.begin() + net::ReplicateSlot::kReplicaCounters * i,
                        m.counters.begin() + net::ReplicateSlot::kReplicaCounters * (i + 1));
    if (!m.clocks.empty()) ch.clocks = m.clocks[i].ToVector<int64_t>();  // the decoder checked int64 [n]
    const Tensor& o = m.origins[i];
    if (o.dtype() != DType::kInt64 || o.rank() != 2 || o.dim(1) != 2)
      return done(InvalidArgument("ReplicateSlot: origins of '" + ch.name +
                                                           "' are not int64 [k, 2]: " + o.DebugString(0)));
    for (int64_t k = 0; k < o.dim(0); ++k)
      ch.origins.push_back(UpdateOrigin{static_cast<uint64_t>(o.data<int64_t>()[2 * k]),
                                        static_cast<uint64_t>(o.data<int64_t>()[2 * k + 1])});
    changes.push_back(std::move(ch));
  }
  {
    // A round's messages wait here until its last one: applied together, or
    // not at all when the holder dies half way.
    std::lock_guard<std::mutex> l(mu);
    // A backup's namespaces are in use while their holder sends rounds.
    if (opts.ns_expiry_s > 0)
      for (const auto& ch : changes) TouchNamespaceLocked(NamespaceOf(ch.name));
    int64_t bytes = 0;
    for (const auto& ch : changes) bytes += ch.value.valid() ? static_cast<int64_t>(ch.value.bytes()) : 0;
    auto whole = staged.Stage(m.slot, m.holder, m.round, std::move(changes), bytes, !m.more);
    if (!whole.ok()) return done(whole.status());
    if (!whole->has_value()) return done(Status::OK());
    changes = std::move(**whole);
  }
  // Answered from whichever thread applies last (a shard actor's, or this
  // one): an answer takes no lock, so no hop to another thread is needed.
  auto applied = [this, done, slot = m.slot](Status s) {
    done(s.WithPrefix("node " + opts.name + " applying slot " + std::to_string(slot)));
  };
  // Checked again with the changes queued under mu, which Run holds while it
  // admits a run (noting its epoch as served): a backup that took the slot
  // over (a handover) and ran a step of it by the newer map never applies
  // its old holder's round after that step's updates.
  std::lock_guard<std::mutex> l(mu);
  map = pl->Map();
  const int64_t served = admission.ServedEpoch(m.slot);
  if (!names_us(map) || served > map.epoch)
    return applied(FailedPrecondition("node " + opts.name + " serves slot " + std::to_string(m.slot) +
                                      " by shard map epoch " + std::to_string(std::max(served, map.epoch)) +
                                      ", where " + m.holder + " is its holder no more"));
  // What a later whole round or move of the slot from here must send
  // (bounded: each is a variable of the store, at most kMaxVariables).
  // Named before the apply ends, so its reply needs no lock: naming one
  // whose apply fails costs nothing, as a whole round sends what the store
  // holds of it and skips a name it lacks (TakeChanges).
  std::set<std::string> names;
  for (const auto& ch : changes) names.insert(ch.name);
  slot_names.AddBackedUp(m.slot, names);
  variables->ApplyChanges(std::move(changes), std::move(applied));
}

std::set<std::string> ClusterNode::Impl::SlotState(int slot) const {
  std::optional<cluster::ShardMap> map;  // read once, and only when another slot is backed up here
  return slot_names.StateOf(slot, [&](int other) {
    cluster::PlacementLeader* pl = placement_ready.load();
    if (!pl) return true;  // no map: every name is the slot's own
    if (!map) map = pl->Map();
    const auto o = static_cast<size_t>(other);
    return o < map->holder.size() && map->holder[o] == address;
  });
}

void ClusterNode::Impl::ReplicateSlotsOf(const std::vector<std::string>& names, std::function<void(Status)> done) {
  ReplicateSlots(slot_names.SlotsOf(names), std::move(done));
}

void ClusterNode::Impl::ReplicateSlots(const std::set<int>& slots, std::function<void(Status)> done) {
  if (!replicas || slots.empty()) return done(Status::OK());
  auto join = runtime::JoinStatuses(slots.size(), std::move(done));
  for (int slot : slots) replicas->Sync(slot, [join](Status s, const std::string&) { join(s); });
}

void ClusterNode::Impl::FinishRun(std::pair<int, int64_t> slot, std::function<void(net::RunPartitionDone)> reply,
                                  net::RunPartitionDone d) {
  if (!replicas || slot.first < 0 || !d.status.ok()) return reply(std::move(d));
  replicas->Sync(slot.first, [this, slot, reply = std::move(reply), d = std::move(d)](Status s,
                                                                                       const std::string& backup) mutable {
    if (s.ok()) {
      // The slot left this node while the run went on (a move's swap, or
      // this node stalled and its backup took over): unless the round
      // reached the slot's new holder (its backup until the swap), what the
      // run changed here is not there.
      const int64_t fence = admission.FenceOf(slot.first);
      if (fence > slot.second) {
        cluster::PlacementLeader* pl = placement_ready.load();
        const cluster::ShardMap m = pl ? pl->Map() : cluster::ShardMap{};
        const auto at = static_cast<size_t>(slot.first);
        if (backup.empty() || at >= m.holder.size() || m.holder[at] != backup)
          s = Unavailable("node " + opts.name + ": slot " + std::to_string(slot.first) +
                          " moved to another node at epoch " + std::to_string(fence) +
                          " while the step ran; it runs again there");
      }
    }
    if (!s.ok()) {
      // Not on the backup: not acknowledged (the session runs the step again).
      d.status = s;
      d.fetches.clear();
    }
    reply(std::move(d));
  });
}

}  // namespace sf
