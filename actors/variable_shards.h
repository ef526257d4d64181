// The session's variables: they live in variable shard actors
// (actor-private header: include only from actors/*.cc). ActorVariables is
// the VariableService, EmbeddingShardService, ReplicationService and
// CollectiveService of a session or node; each kernel sees only the one it
// uses (KernelInit / OpKernelContext).
//
// Each variable belongs to one shard actor; a slot "<var>/<Optimizer>/<slot>"
// joins the shard of "<var>" so an optimizer update (variable + slots) is one
// message handled by one actor: atomic without locks.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/collectives.h"
#include "actors/variable_shard_protocol.h"
#include "runtime/executor.h"
#include "kernels/collective_service.h"
#include "kernels/embedding_shard_service.h"
#include "actors/namespace_quotas.h"
#include "kernels/replication_service.h"
#include "kernels/variable_service.h"

namespace sf {

class ComputePool;

namespace runtime {

// A shard's state, shared by its actor and ActorVariables (variable_shards.cc).
struct ShardCore;

// Spawns a variable shard actor; pool (may be null) splits its big
// embedding gathers and sparse updates.
VariableShardActor SpawnVariableShard(caf::actor_system& sys, ComputePool* pool = nullptr);

class ActorVariables : public VariableService,
                       public EmbeddingShardService,
                       public ReplicationService,
                       public CollectiveService {
 public:
  // Variables one store holds at most (each a definition, each colocation
  // group an actor); Resolve refuses more with ResourceExhausted.
  static constexpr size_t kMaxVariables = size_t{1} << 18;
  // The longest variable name Resolve accepts: finding a name's colocation
  // group looks up each of its '/' prefixes, which costs the square of its
  // length, under the store's lock.
  static constexpr size_t kMaxNameBytes = 1024;
  // graph_variables: the shared names of the graph's VarHandles, used to
  // colocate "<var>/..." with "<var>".
  ActorVariables(caf::actor_system& sys, std::set<std::string> graph_variables);
  ~ActorVariables() override;

  Result<int64_t> Resolve(const std::string& name, DType dtype, const PartialShape& shape) override;
  void Read(int64_t id, std::function<void(Result<Tensor>)> done) override;
  // An update whose origin the shard applied already changes nothing (every
  // update of ApplyRequest, SparseApplyRequest and Assign alike).
  void Assign(int64_t id, AssignMode mode, Tensor value, std::function<void(Result<Tensor>)> done,
              UpdateOrigin origin = {}) override;
  void Apply(ApplyRequest req, std::function<void(Status)> done) override;
  // In the caller's thread when the shard is free, else one message to it.
  void AssignRows(AssignRowsRequest req, std::function<void(Status)> done) override;
  void Refill(int64_t id, std::function<Status(Tensor*)> fill, std::function<void(Status)> done) override;
  bool CanRefill() const override { return true; }
  std::string NameOf(int64_t id) const override;
  // ReplicationService (kernels/replica_state.h): handled by the variable's shard actor.
  void ApplySync(SyncApplyRequest req, std::function<void(Result<int64_t>)> done) override;
  void SparseApplySync(SparseSyncApplyRequest req, std::function<void(Result<int64_t>)> done) override;
  void AbortSync(int64_t id, std::function<void(Status)> done) override;
  void AbortWaits(int64_t run_step, const Status& why) override;
  void ReadWithVersion(int64_t id,
                       std::function<void(Result<std::pair<Tensor, int64_t>>)> done) override;
  void QueryReplica(int64_t id, ReplicaQuery what, std::function<void(Result<Tensor>)> done) override;
  void StaleSyncWait(int64_t id, int64_t worker, int64_t clock, int64_t num_workers,
                     int64_t staleness, int64_t run_step, std::function<void(Status)> done) override;
  // CollectiveService: the session's all-reduce rings (actors/collectives.h).
  void AllReduce(const std::string& group_key, int64_t group_size, int64_t rank, Tensor value,
                 std::function<void(Result<Tensor>)> done) override;
  // EmbeddingShardService: one message to the shard's actor, which combines
  // its rows (or applies the sparse update) beside them.
  void GatherCombine(int64_t id, EmbeddingShardSpec spec, EmbeddingGather q,
                     std::function<void(Result<Tensor>)> done) override;
  void SparseApply(SparseApplyRequest req, std::function<void(Status)> done) override;
  // Hash tables: the shard's actor owns its HashEmbeddingShard.
  void InitHashShard(int64_t id, HashShardConfig config, std::function<void(Status)> done) override;
  void HashShardStats(int64_t id, std::function<void(Result<Tensor>)> done) override;

  // Every initialised variable (and slot) with its value, sorted by name;
  // each shard answers with the state between two of its updates. Blocks
  // the calling thread (never call it from a runtime thread).
  std::vector<std::pair<std::string, Tensor>> SnapshotAll();
  // SnapshotAll with each variable's rows changed since the previous
  // SnapshotDirty (all of them the first time, after an Assign or a dense
  // update); resets that record. Blocks like SnapshotAll.
  std::vector<VarSnapshot> SnapshotDirty();
  // Replication (cluster/slot_replicas.h): the named variables' changes since
  // the last TakeChanges (each whole when full, and the first time), with
  // the update origins their shards applied since; resets that record.
  // With full and pieces_over > 0, a dense variable of more bytes is read in
  // pieces as it is sent (VarChanges::read_rows): for a backup that is not
  // synced yet, since rows it updates meanwhile go in the next round.
  // Blocks like SnapshotAll.
  std::vector<VarChanges> TakeChanges(const std::set<std::string>& names, bool full, int64_t pieces_over = 0);
  // A backup applying what TakeChanges took on the holder: whole values
  // define and set their variables, rows overwrite theirs, origins join
  // their shards' windows. done gets the first error (FailedPrecondition
  // for rows of a variable it holds no whole value of).
  void ApplyChanges(std::vector<VarChanges> changes, std::function<void(Status)> done);

  // The initialised variables among names (every initialised one when names
  // is empty) with their values, to done (on a runtime thread); names this
  // process does not hold, or holds uninitialised, are left out.
  void ReadNamed(const std::vector<std::string>& names,
                 std::function<void(std::vector<std::pair<std::string, Tensor>>)> done);
  // Sets each named variable to its value, defining it (with the value's
  // dtype and shape) when new; slots land beside their variables. done gets
  // the first error (InvalidArgument naming a variable whose dtype or shape
  // differs from its definition here).
  void AssignNamed(std::vector<std::pair<std::string, Tensor>> values, std::function<void(Status)> done);

  // The compute pool shard actors split big embedding work over (null: none).
  // REQUIRES: called before the first Resolve; the pool outlives the shards.
  void SetComputePool(ComputePool* pool) { pool_ = pool; }
  // Confines hash shards' cold tiers to relative paths under root (a node's
  // --data-dir; "": none, a cold tier is refused). Unset: cold_dir is used
  // as given (one process). REQUIRES: called before the first Resolve.
  void SetColdRoot(const std::string& root) { cold_root_ = std::make_shared<const std::string>(root); }

  // Adds graph variable names (a node hosts the partitions of many graphs);
  // must come before the first Resolve of their slots.
  void AddGraphVariables(const std::set<std::string>& names);

  // Counts what each namespace defines here against quotas (a node's;
  // actors/namespace_quotas.h): Resolve, AssignNamed and a table's first
  // InitHashShard are refused past them, replicas are counted only.
  // REQUIRES: called before the first Resolve.
  void SetQuotas(std::shared_ptr<NamespaceQuotas> quotas) { quotas_ = std::move(quotas); }
  // The names defined here that keep(name) selects.
  std::vector<std::string> NamesWhere(const std::function<bool(const std::string&)>& keep) const;
  // Forgets every variable (and table) whose name drop(name) selects, with
  // its shard's state once no request holds it; later requests for their
  // ids fail with NotFound. How many were dropped.
  int64_t DropWhere(const std::function<bool(const std::string&)>& drop);

  // Stops every shard actor.
  void Shutdown();

  // Routes AllReduce (after its size and rank checks) to `all_reduce`
  // instead of the in-process rings: a cluster node's ring between node
  // processes (cluster/cluster_collectives.h). REQUIRES: before the first AllReduce.
  using AllReduceFn = std::function<void(const std::string&, int64_t, int64_t, Tensor,
                                         std::function<void(Result<Tensor>)>)>;
  void SetAllReduce(AllReduceFn all_reduce) { all_reduce_ = std::move(all_reduce); }

 private:
  struct Var {
    std::string name;
    DType dtype;
    PartialShape shape;
    VariableShardActor shard;
    // The shard's state, which reads and updates of a dense variable use in
    // the caller's thread when no one else holds it (no message, no thread
    // hop); null keeps the variable on the message path.
    std::shared_ptr<ShardCore> core;
    bool dropped = false;  // DropWhere: its id is never reused
    int64_t bytes = 0;     // counted against its namespace's quota
  };
  struct Shard {
    VariableShardActor actor;
    std::shared_ptr<ShardCore> core;
  };
  // Every shard actor spawned so far.
  std::vector<VariableShardActor> Shards() const;
  // The shard of id (and its core when core is not null; itself null when
  // id is message-only); false for an unknown id.
  bool ShardOf(int64_t id, VariableShardActor* out, std::shared_ptr<ShardCore>* core = nullptr) const;
  // REQUIRES: mu_ held.
  std::string ColocationKey(const std::string& name) const;
  // Resolve, counting against the quotas and, with enforce, refused past them.
  Result<int64_t> ResolveAs(const std::string& name, DType dtype, const PartialShape& shape, bool enforce);

  caf::actor_system& sys_;
  ComputePool* pool_ = nullptr;
  std::shared_ptr<const std::string> cold_root_;  // ShardState::cold_root of every shard
  std::set<std::string> graph_variables_;  // GUARDED_BY(mu_)
  mutable std::mutex mu_;
  std::vector<Var> vars_;                                  // GUARDED_BY(mu_)
  std::unordered_map<std::string, int64_t> ids_;           // GUARDED_BY(mu_)
  std::unordered_map<std::string, Shard> shards_;  // GUARDED_BY(mu_), by key
  std::shared_ptr<NamespaceQuotas> quotas_;        // null: nothing counted
  std::set<int64_t> tables_;                       // GUARDED_BY(mu_): ids counted as tables
  // All-reduce rings by group key (actors/collectives.h).
  std::unordered_map<std::string, std::unique_ptr<CollectiveGroup>> groups_;  // GUARDED_BY(mu_)
  CollectiveSpawner spawner_;  // spawns groups on a CAF thread; set by the constructor
  AllReduceFn all_reduce_;     // set before use (SetAllReduce): replaces groups_
};

// What a partition's kernels run with in a session or on a node: every
// variable-side service served by vars (its shard actors), the queues, the
// kernels and pool, the step's rendezvous (may be null) and the checkpoint
// store. The pointers must outlive the executors built with it.
ExecutorEnv ActorExecutorEnv(const KernelRegistry* kernels, ComputePool* pool, ActorVariables* vars,
                             QueueService* queues, RendezvousService* rendezvous, CheckpointService* checkpoints);

}  // namespace runtime
}  // namespace sf
