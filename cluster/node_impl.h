// The inside of a ClusterNode (include/shardflow/cluster.h), shared by its
// files: cluster_node.cc (start, stop, messages, membership, drain),
// node_steps.cc (admitting peers' tensors and aborts for steps that do not
// run here yet; the housekeeping timer), node_partitions.cc (registering and
// running partitions) and node_variables.cc (serving variables and node
// checkpoints). Its parts with a job and a lock of their own:
// cluster/member_registry.h (etcd), member_addresses.h (what it may dial),
// member_view.h (what sessions are told), peer_router.h (connections to
// members), node_sessions.h (the sessions served here), run_admission.h
// (the runs going, fences and their waits), slot_state.h (slots' variables,
// a backup's staged rounds), early_steps.h (peers' tensors for steps not
// running here), progress_reports.h (steps whose clients want progress) and
// timer_loop.h (the one place where the node's time passes: its timers, on
// one thread). Not a public header.
//
// Thread-safety: fields marked GUARDED_BY(mu) are read and written under mu.
// Lock order: mu before a part's lock, never the reverse (a part calls out
// to nothing while it holds its own; the timer loop runs its timers outside
// its lock, and they take mu).
#pragma once

#include <caf/all.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "actors/caf_thread_logger.h"
#include "cluster/cluster_collectives.h"
#include "actors/checkpoint_io.h"
#include "cluster/node_checkpoints.h"
#include "cluster/node_sessions.h"
#include "cluster/cluster_rendezvous.h"
#include "cluster/early_steps.h"
#include "cluster/member_addresses.h"
#include "cluster/member_registry.h"
#include "cluster/member_view.h"
#include "cluster/peer_router.h"
#include "cluster/placement_leader.h"
#include "cluster/progress_reports.h"
#include "cluster/run_admission.h"
#include "cluster/slot_replicas.h"
#include "cluster/slot_state.h"
#include "cluster/timer_loop.h"
#include "actors/serial_queue.h"
#include "actors/partition_host.h"
#include "graph/device_name.h"
#include "runtime/executor.h"
#include "runtime/plan.h"
#include "actors/queue_actors.h"
#include "runtime/rendezvous.h"
#include "actors/variable_shards.h"
#include "actors/namespace_quotas.h"
#include "shardflow/graph_io.h"
#include "kernels/compute_pool.h"
#include "net/credentials.h"
#include "net/peer_rpc.h"
#include "shardflow/cluster.h"

namespace sf {

struct ClusterNode::Impl : net::Handler {
  // What a registered partition's executor points into: its graph and its
  // session's rendezvous. Steps hold it, so closing a session never pulls
  // either from under a step.
  struct PartitionGraphs {
    std::shared_ptr<runtime::ClusterRendezvous> rendezvous;
    std::unique_ptr<Graph> graph;
  };

  NodeOptions opts;
  std::string address;
  std::unique_ptr<CheckpointService> checkpoints;  // rooted at opts.checkpoint_root
  std::unique_ptr<net::Endpoint> endpoint;
  ComputePool pool;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<runtime::ActorVariables> variables;
  std::unique_ptr<runtime::ActorQueues> queues;
  // Chunk queue states read by registrations for their queues' Resolve
  // (cluster/node_chunk_queues.cc): queue name -> state, taken once.
  std::mutex chunk_states_mu;
  std::map<std::string, Tensor> chunk_states;  // GUARDED_BY(chunk_states_mu)
  // What each namespace holds here, against its quotas (variables and queues count into it).
  std::shared_ptr<NamespaceQuotas> quotas;
  runtime::LocalRendezvous rendezvous;
  std::unique_ptr<runtime::ClusterCollectives> collectives;  // all-reduce rings between nodes
  // Node checkpoints: this node's pieces under opts.checkpoint_root (its own thread).
  std::unique_ptr<cluster::NodeCheckpoints> node_checkpoints;

  // The membership client when the node was given etcd (--etcd): its
  // members come from it alone (without it the node is a cluster of one).
  std::unique_ptr<cluster::MemberRegistry> registry;
  // Placement by the shard map (etcd clusters; node_placement.cc): the
  // leader part (every node follows the map; one leads), and the variables
  // each slot's partitions use here (what a move copies). The fences (slots
  // this node stopped serving: runs placed by an older map are refused as
  // stale) and the slot and epoch of every run here are `admission`'s.
  std::unique_ptr<cluster::PlacementLeader> placement;
  // Sends each slot held here to its backup after its runs, when the map
  // gives it one (node_replicas.cc): with --replicas 2, or a move's new
  // holder while it is copied.
  std::unique_ptr<cluster::SlotReplicas> replicas;
  // As a backup: the messages of a replication round not applied yet (a
  // round is applied whole, once its last message came), by slot; bounded
  // over all slots (its own lock).
  cluster::StagedRounds<runtime::VarChanges> staged{opts.name, int64_t{4} << 30};
  std::atomic<cluster::PlacementLeader*> placement_ready{nullptr};  // for the registry's thread
  // The variables each slot's partitions use here and those taken here as
  // a slot's backup (its own lock).
  cluster::SlotNames slot_names;
  // What a round or move of slot sends from here (SlotNames::StateOf, with
  // the slots this node holds by the newest map).
  std::set<std::string> SlotState(int slot) const;
  // MoveSlot requests, in order, off the handler threads (a copy takes a while).
  runtime::SerialQueue movers;
  std::atomic<int> moves_waiting{0};
  static constexpr int kMaxMovesWaiting = 64;
  // A node whose process stalled past its lease (SIGSTOP, a long pause)
  // may have had its slots moved away meanwhile: it serves no partition
  // until it has read the shard map again. The housekeeping timer ticks
  // every kHousekeepingMs; a gap since the last tick of more than StallMs() is a stall.
  std::atomic<int64_t> last_tick_ms{0};
  bool stalled = false;                                   // GUARDED_BY(mu)
  int64_t stalled_ms = 0;                                 // GUARDED_BY(mu): how long it was
  int64_t StallMs() const { return std::max<int64_t>(3000, 2000 * static_cast<int64_t>(opts.lease_ttl_s)); }
  // Notes a stall seen at now_ms (etcd clusters only); whether the node is stalled. REQUIRES: mu held.
  bool CheckStallLocked(int64_t now_ms);
  static constexpr int kFenceWaitMs = 30000;
  // How long a fence lets its slot's older runs end by themselves before it
  // ends their waits (queues, tensors): a step waiting on a queue for a while
  // is normal (its own deadline, a producer on its way) and keeps its own error.
  static constexpr int kFenceQueueGraceMs = 2000;
  // How long the leader waits for an old holder's handover fence.
  static constexpr int kHandOverWaitMs = 3000;
  // The same, for handlers that may run while Start still sets it up.
  std::atomic<cluster::MemberRegistry*> registry_ready{nullptr};
  bool etcd_mode() const { return !opts.etcd.empty(); }
  // What sessions are told of the membership (its own lock).
  cluster::MemberView view{net::Member{}};
  // Connections to the other members, and messages waiting for a dial (its own lock).
  cluster::PeerRouter router{cluster::PeerRouter::Hooks{
      [this] { return opts.name; },
      [this](const std::string& addr) -> Result<net::ConnectionPtr> {
        // A peer or session may name any address; only members are dialed.
        if (!IsMemberAddress(addr))
          return PermissionDenied("node " + opts.name + " dials only members of its cluster; " + addr + " is not one");
        return endpoint->Connect(addr);
      },
      [this](const std::string& to, const Status& why) { collectives->OnPeerDown(nullptr, to, why); }}};

  mutable std::mutex mu;
  // The cluster sessions served here: each its client's, with its
  // partitions, their slots, and the host and rendezvous its steps run in
  // (its own lock; bounded per client and over all).
  cluster::NodeSessions sessions{opts.name, {}};
  bool stopped = false;                                // GUARDED_BY(mu); admission closed with it
  // The partition runs going here, each with its step, client, slot and
  // epoch: Stop aborts them and waits, because the queues, variables and
  // rendezvous they use die with the node. Run admits under mu (a backup's
  // check of ServedEpoch, under mu, is atomic with it) and a run ends under
  // mu, so a wait on `idle` that reads admission.Idle() misses no end.
  cluster::RunAdmission admission;
  std::condition_variable idle;                        // no run left, sessions shrank, or stopping
  bool draining = false;                               // GUARDED_BY(mu)
  bool left = false;                                   // GUARDED_BY(mu): drained or replaced, may exit
  std::string replaced_by;                             // GUARDED_BY(mu): the node that took this one's place
  // Steps peers sent tensors or aborts for that run no partition here (yet),
  // and steps their session ended here (its own lock; expired by housekeeping).
  cluster::EarlySteps early{opts.name, {}};
  // Steps whose client asked for progress reports (RunPartition.progress_ms):
  // told by the progress timer (its own lock).
  static constexpr int kMinProgressMs = 20;
  cluster::ProgressReports progress{kMinProgressMs};
  // Partition runs one client may have going here at once: each holds a
  // step's state (and maybe a wait on a queue) until it ends.
  static constexpr size_t kMaxRunningPerClient = 1024;
  // Makes the actor system, the shard and queue actors and the collectives hub.
  explicit Impl(NodeOptions o);

  void Log(const std::string& line) const;

  // Logs line at most once a second per kind (a fixed string), with how many
  // were not logged: a peer's flood of refused messages must not become one
  // of log lines.
  void LogLimited(const char* kind, const std::string& line);
  std::mutex log_mu;
  std::map<std::string, std::pair<int64_t, int64_t>> log_limits;  // GUARDED_BY(log_mu): kind -> last ms, not logged

  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // True when c, a session's client, names a step running here for another
  // client: whatever session id it gives, it may not end or abort that step
  // (nodes may: a step's parts on other nodes abort it). REQUIRES: mu held.
  bool ForeignStepLocked(const net::ConnectionPtr& c, int64_t step) const;
  // ForeignStepLocked, or c naming a session that is another client's.
  bool ForeignStep(const net::ConnectionPtr& c, uint64_t session_id, int64_t step);

  // Admits a peer's tensor (or abort) for a step; NotFound when a tensor's
  // session (if given) has no partition here, else early's refusal when
  // the step runs nothing here (it ended, or the budget for such steps is spent).
  Status AdmitPeerStep(int64_t step, int64_t bytes, const uint64_t* session = nullptr);

  // The housekeeping timer at now_ms: notes a stall (and reads the shard
  // map again after one), expires idle namespaces and the early steps that
  // never ran here (early's ttl); when it is due next (never once stopped).
  // The read after a stall may hold the timer loop up to etcd's request
  // timeout (5 s): progress reports and the drain wait meanwhile, while the
  // node starts nothing new.
  int64_t Housekeep(int64_t now_ms);
  static constexpr int kHousekeepingMs = 250;

  // The members etcd lists now (registry's thread): sessions are told of a
  // change, and a node etcd says is draining starts to.
  void OnMembers(const std::vector<cluster::MemberRecord>& records);

  // Starts leaving the cluster: sessions move this node's tasks away (they
  // are told), and once none uses the node (or after the drain timeout) it
  // has left and its process may exit.
  void StartDrain();
  // The drain timer at now_ms: whether the node has left (no session uses
  // it and its slots are others'), or the deadline passed; when to look again.
  int64_t DrainTick(int64_t now_ms, int64_t deadline_ms);
  static constexpr int kDrainCheckMs = 50;
  // Whether the newest shard map gives this node a slot (as its holder, or
  // a move's old holder); false without a map.
  bool HoldsSlots() const;

  Status Register(const net::ConnectionPtr& client, const net::RegisterPartition& r);
  // Keeps the chunk queues' states in the variable store, as variables of
  // their slots (cluster/node_chunk_queues.cc). Called once, at start.
  void StoreChunkQueues();
  // The queue names of the ChunkQueue nodes among g's `nodes` (a
  // partition's) with their state variables' names.
  static std::map<std::string, std::string> ChunkQueueStates(const Graph& g, const std::vector<int>& nodes);
  // Reads the stored states of the chunk queues among g's `nodes` for their
  // Resolve (which must not block: it runs on an actor thread). Blocks the
  // calling thread (the registrar's) up to a few seconds; Unavailable when
  // they are not read by then.
  Status LoadChunkQueueStates(const Graph& g, const std::vector<int>& nodes);
  // A session's RegisterPartition, queued for the registrar thread (loading
  // a graph takes a while, and must hold up neither the I/O thread nor the
  // handler threads other peers share); refused with ResourceExhausted past
  // kMaxRegistrationsWaiting (kMaxRegistrationsPerClient for one client).
  void ServeRegister(const net::ConnectionPtr& c, net::RegisterPartition r, net::Answer<net::StatusReply> done) override;
  runtime::SerialQueue registrar;
  size_t registrations_waiting = 0;                                       // GUARDED_BY(mu)
  std::unordered_map<const net::Connection*, size_t> registrations_of;    // GUARDED_BY(mu)
  static constexpr size_t kMaxRegistrationsWaiting = 64;
  static constexpr size_t kMaxRegistrationsPerClient = 4;
  // Whether address is this node's or one etcd listed as a member's during
  // this node's life (member_addresses): the only addresses it dials,
  // whatever a request names.
  bool IsMemberAddress(const std::string& address) const;
  // etcd's latest member list and every address it listed (its own lock).
  cluster::MemberAddresses member_addresses;
  // OK when every task address of a registration is a member's (waiting up
  // to kMemberWaitMs for etcd's list to show a member that just joined);
  // PermissionDenied naming the first that is not.
  Status CheckTaskAddresses(const std::vector<net::Member>& tasks);
  static constexpr int kMemberWaitMs = 2000;

  // The host of a session's partitions; null when the session is unknown.
  std::shared_ptr<runtime::PartitionHost> HostOf(uint64_t session_id);

  // A partition's step: admitted, then started on the partition's host.
  void ServeRun(const net::ConnectionPtr& c, net::RunPartition r, net::Answer<net::RunPartitionDone> done) override;

  // What peers send (net/peer_handler.h), one method per message: the
  // requests beside their parts below; these in cluster_node.cc.
  bool OnIoThread(const std::type_info& message) const override;
  void ServeMembers(const net::ConnectionPtr& c, net::Answer<net::Membership> done) override;
  void ServeCloseSession(const net::ConnectionPtr& c, net::CloseSession r,
                         net::Answer<net::StatusReply> done) override;
  void ServeEcho(const net::ConnectionPtr& c, net::Echo r, net::Answer<net::Echo> done) override;
  void OnTensor(const net::ConnectionPtr& c, net::SendTensor t) override;
  void OnAbort(const net::ConnectionPtr& c, net::AbortStep a) override;
  void OnCleanup(const net::ConnectionPtr& c, net::CleanupStep a) override;
  void OnChunk(const net::ConnectionPtr& c, net::CollectiveChunk cc) override;
  void OnAnnounce(const net::ConnectionPtr& c, net::CollectiveAnnounce ca) override;

  // The variable store as peers use it (node_variables.cc), one method per
  // message; replies are sent from the pool (a large one must not hold a
  // shard actor's thread while it is written).
  // ReadVariables: the named variables' values (a session's: of its namespace).
  void ServeReadVariables(const net::ConnectionPtr& c, net::ReadVariables r,
                          net::Answer<net::VariableValues> done) override;
  // AssignVariables: sets them, and answers once their slots are on their backups.
  void ServeAssignVariables(const net::ConnectionPtr& c, net::AssignVariables a,
                            net::Answer<net::StatusReply> done) override;
  // ScopeNames, prefixed with the node's name, noting a session's namespace as used.
  Status ScopeVariableNames(const net::Connection& c, std::vector<std::string>* names);
  // Node checkpoint requests, queued for node_checkpoints (a restore is
  // answered once its slot is on its backup); the reply, or why not.
  void ServeSaveShards(const net::ConnectionPtr& c, net::SaveShards r, net::Answer<net::ShardsDone> done) override;
  void ServeCommitShards(const net::ConnectionPtr& c, net::CommitShards r,
                         net::Answer<net::ShardsDone> done) override;
  void ServeRestoreShards(const net::ConnectionPtr& c, net::RestoreShards r,
                          net::Answer<net::ShardsDone> done) override;

  // Namespaces (node_namespaces.cc). A session names its state by the names
  // its graph gives it; the node stores them scoped to the session's
  // namespace (graph/namespaces.h). ScopeNames rewrites names a session's
  // request gives (a node's request is unscoped: nodes serve every
  // namespace); InvalidArgument naming a reserved name.
  Status ScopeNames(const net::Connection& c, std::vector<std::string>* names) const;
  // The names a session's reply shows: its namespace's prefix removed.
  void UnscopeNames(const net::Connection& c, std::vector<std::string>* names) const;
  // ScopeNames and the directory of a node checkpoint request of c's
  // (names null for a commit, which names none).
  Status ScopeCheckpoint(const net::Connection& c, std::string* dir, std::vector<std::string>* names) const;
  // What each namespace holds here (a session: its own only).
  void ServeListNamespaces(const net::ConnectionPtr& c, net::ListNamespaces r,
                           net::Answer<net::Namespaces> done) override;
  // Drops a namespace here (a session: only its own; PermissionDenied
  // otherwise): its sessions here close, its variables, tables and queues go.
  void ServeDropNamespace(const net::ConnectionPtr& c, net::DropNamespace d,
                          net::Answer<net::Namespaces> done) override;
  // Each namespace's state here (sessions counted under mu).
  std::vector<net::NamespaceState> NamespaceStates();
  // Drops namespace ns ("": the default) here: closes its sessions, forgets
  // its variables, tables and queues, returns the memory; how many
  // variables and queues went.
  std::pair<int64_t, int64_t> DropNamespaceHere(const std::string& ns);
  // Notes that namespace ns was used now. REQUIRES: mu held.
  void TouchNamespaceLocked(const std::string& ns) {
    if (opts.ns_expiry_s > 0 && !ns.empty()) ns_last_used[ns] = NowMs();
  }
  // Drops the namespaces idle past opts.ns_expiry_s at now_ms (the housekeeping timer).
  void ExpireNamespaces(int64_t now_ms);
  std::map<std::string, int64_t> ns_last_used;  // GUARDED_BY(mu): with ns_expiry_s, by namespace

  // Starts following (and campaigning to lead) the shard map in etcd.
  Status StartPlacement(const std::optional<net::Credential>& credential);
  // The leader's move of slot from `from` to `to` at epoch: here when this
  // node is `from`, else a MoveSlot to it answered within timeout_ms (a
  // node that went silent lately is not asked); OK or why not.
  Status MoveSlotVia(int slot, const std::string& from, const std::string& to, int64_t epoch, int timeout_ms);
  // This node's part of a move: fence slot at epoch, wait for the slot's
  // runs of older epochs, copy the slot's variables to `to`; OK or why not.
  Status MoveSlotHere(int slot, const std::string& to, int64_t epoch);
  // The leader's request `what` ("move", "sync") of slot: refused unless from
  // a node for a slot of the map, else `work` on the movers thread (at most
  // kMaxMovesWaiting queued), its status the reply.
  void ServeSlotWork(const net::ConnectionPtr& c, net::Answer<net::StatusReply> done, int slot, const char* what,
                     std::function<Status()> work);
  // A peer's MoveSlot, queued for the movers thread (or refused).
  void ServeMoveSlot(const net::ConnectionPtr& c, net::MoveSlot m, net::Answer<net::StatusReply> done) override;
  // Replication (node_replicas.cc): starts `replicas`.
  void StartReplicas();
  // The leader's sync of slot's new backup: here when this node holds the
  // slot, else a SyncSlot to its holder; OK or why not.
  Status SyncSlotVia(int slot, const std::string& holder, const std::string& backup, int64_t epoch);
  // A peer's SyncSlot (the placement leader), queued for the movers thread.
  void ServeSyncSlot(const net::ConnectionPtr& c, net::SyncSlot m, net::Answer<net::StatusReply> done) override;
  // A holder's ReplicateSlot: applied when the map names it the slot's
  // holder and this node its backup, refused otherwise (a fenced holder).
  void ServeReplicateSlot(const net::ConnectionPtr& c, net::ReplicateSlot m,
                          net::Answer<net::StatusReply> done) override;
  // Sends the slots holding any of `names` here (or `slots`) to their
  // synced backups (SlotReplicas::Sync), then done: with the first error.
  // What a session writes outside a step (assigns, restores) is on the
  // backups before it is acknowledged, as a step's changes are.
  void ReplicateSlotsOf(const std::vector<std::string>& names, std::function<void(Status)> done);
  void ReplicateSlots(const std::set<int>& slots, std::function<void(Status)> done);
  // Ends a partition run of slot {slot, placed by epoch}: replicates its
  // slot's changes first (when the run succeeded and the slot has a
  // backup), then sends d; Unavailable instead when the slot left this node
  // while the run went on (the session runs the step again).
  void FinishRun(std::pair<int, int64_t> slot, std::function<void(net::RunPartitionDone)> reply,
                 net::RunPartitionDone d);

  void OnDown(const net::ConnectionPtr& c, const Status& why);

  void Stop();

  // Where the node's time passes: the housekeeping, progress and drain
  // timers, on one thread. Last, so it stops before the fields its timers use go.
  // Started by ClusterNode::Create once the node listens.
  cluster::TimerLoop timers;
  const int housekeeping_timer = timers.Add("housekeeping", [this](int64_t now) { return Housekeep(now); });
  const int progress_timer = timers.Add("progress", [this](int64_t now) { return progress.Report(now); });
};

}  // namespace sf
