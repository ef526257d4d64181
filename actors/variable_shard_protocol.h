// The variable shard actor's protocol (actor-private: includes CAF; include
// it only from actors/). A shard owns some variables (a variable and its
// optimizer slots) and serializes their updates, so each update is atomic;
// reads answer with a copy-on-write snapshot.
//
// One C++ type per message. The requesters are compute-pool threads (kernels)
// or blocking callers (snapshots), not actors, so each request carries its
// reply as one typed callback, `done`, run exactly once by the shard (or by
// ReplicaState when a synchronous step or the SSP barrier lets it finish).
// Tensors travel by reference (refcounted buffers, no copy, no encoding).
//
// In-process only: every message holds a callback or unserialized tensors, so
// each is allowed as an unsafe message type below, one by one. The
// cross-process form is a Cap'n Proto interface (net/), not these types.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "kernels/embedding_shard_service.h"
#include "kernels/replication_service.h"
#include "kernels/variable_service.h"

namespace sf {
namespace runtime {

// One variable's value and what changed since the previous dirty snapshot
// (incremental checkpoints): every row, or only dirty_rows (sorted, unique).
struct VarSnapshot {
  std::string name;
  Tensor value;
  bool all_dirty = true;
  std::vector<int64_t> dirty_rows;
};

// What changed in one variable since its backup was last sent its changes
// (cluster/slot_replicas.h): its whole value (rows invalid), or the rows
// listed in rows (int64 [k]) with their values ([k, ...]); and the update
// origins its shard applied since (kernels/update_origin.h). Both tensors
// invalid, or no rows: origins only.
struct VarChanges {
  std::string name;
  Tensor value;
  Tensor rows;
  std::vector<UpdateOrigin> origins;
  // With rows: the variable's leading dimension, so a store that lacks the
  // variable defines it (zeros) before writing them; -1: none.
  int64_t leading = -1;
  // Its ReplicaState's counters (ReplicaState::Counters) when it has one.
  std::vector<int64_t> replica;
  // Its SSP barrier's clocks (ReplicaState::Clocks) when they changed or
  // the round is full; empty: none.
  std::vector<int64_t> clocks;
  // Set by a whole take in pieces (TakeShardChanges::pieces_over) for a
  // dense variable bigger than that: value is left unset, leading is its
  // row count, and its rows are read from the shard in pieces as they are
  // sent (read_rows(first, max_bytes): rows first.. as many as fit in
  // max_bytes, at least one). The copy never shares the variable's buffer,
  // which the next update would otherwise copy whole (a 10M-row table's
  // step stalled 0.1-0.8 s per variable). Rows updated after their piece
  // was read are dirty and go in the next round, so the pieces alone are
  // no consistent state: only for a backup that is not synced yet.
  std::function<Result<Tensor>(int64_t first, int64_t max_bytes)> read_rows;
};

// ---- variables ----
// Defines variable `id` (uninitialised); sent before Resolve returns, so it
// precedes every request for id. No reply.
struct DefineVariable {
  int64_t id = -1;
  std::string name;
  DType dtype = DType::kInvalid;
  PartialShape shape;
};
// A snapshot of variable id.
struct ReadVariable {
  int64_t id = -1;
  std::function<void(Result<Tensor>)> done;
};
// Stores, adds or subtracts value; answers the new value.
struct AssignVariable {
  int64_t id = -1;
  AssignMode mode = AssignMode::kAssign;
  Tensor value;
  std::function<void(Result<Tensor>)> done;
  UpdateOrigin origin;  // applied once (kernels/update_origin.h)
};
// Overwrites rows of variable req.var_id (VariableService::AssignRows).
struct AssignVariableRows {
  AssignRowsRequest req;
  std::function<void(Status)> done;
};
// A value written where the variable lives (VariableService::Refill).
struct RefillVariable {
  int64_t id = -1;
  std::function<Status(Tensor*)> fill;
  std::function<void(Status)> done;
};
// One dense optimizer update of a variable and its slots (all in this shard).
struct ApplyDense {
  ApplyRequest req;
  std::function<void(Status)> done;
};

// ---- sharded embeddings (kernels/embedding_math.h) ----
// Gathers and combines rows of embedding shard id here, beside them.
struct GatherRows {
  int64_t id = -1;
  EmbeddingShardSpec spec;
  EmbeddingGather gather;
  std::function<void(Result<Tensor>)> done;
};
// One sparse optimizer update of a shard and its slots.
struct ApplySparse {
  SparseApplyRequest req;
  std::function<void(Status)> done;
};

// ---- hash embedding tables (kernels/hash_embedding.h) ----
// Makes variable id an empty hash table shard with config.
struct InitHashShard {
  int64_t id = -1;
  HashShardConfig config;
  std::function<void(Status)> done;
};
// The metrics of hash shard id (HashShardMetricsTensor).
struct QueryHashShard {
  int64_t id = -1;
  std::function<void(Result<Tensor>)> done;
};

// ---- replication (kernels/replica_state.h) ----
// One worker's gradient for a synchronous step of req.req.var_ids[0].
struct ApplySyncGradient {
  SyncApplyRequest req;
  std::function<void(Result<int64_t>)> done;
};
// One worker's sparse gradient for a synchronous step of embedding shard req.req.var_ids[0].
struct ApplySparseSyncGradient {
  SparseSyncApplyRequest req;
  std::function<void(Result<int64_t>)> done;
};
// Sent by the shard to itself timeout_ms after an ApplySyncGradient: fails
// that waiter (if still waiting) with Unavailable. No reply.
struct SyncWaitTimeout {
  int64_t id = -1;
  int64_t waiter = 0;
};
// Aborts every pending synchronous step of variable id.
struct AbortSyncSteps {
  int64_t id = -1;
  std::function<void(Status)> done;
};
// Answers every synchronous wait of run run_step in the shard with why
// (ReplicationService::AbortWaits). No reply.
struct AbortStepWaits {
  int64_t run_step = 0;
  Status why;
};
// The value of variable id with its version.
struct ReadVersioned {
  int64_t id = -1;
  std::function<void(Result<std::pair<Tensor, int64_t>>)> done;
};
// Replication counters of variable id.
struct QueryReplicaStats {
  int64_t id = -1;
  ReplicaQuery what = ReplicaQuery::kSyncStats;
  std::function<void(Result<Tensor>)> done;
};
// The stale-synchronous barrier of variable id (ReplicationService::StaleSyncWait).
struct WaitStaleSync {
  int64_t id = -1;
  int64_t worker = 0, clock = 0, num_workers = 0, staleness = 0, run_step = 0;
  std::function<void(Status)> done;
};

// ---- checkpoints ----
// Every initialised variable of the shard (name, value), taken between two
// updates, so a variable and its slots are consistent.
struct SnapshotShard {
  std::function<void(std::vector<std::pair<std::string, Tensor>>)> done;
};
// Like SnapshotShard, with each variable's changes since the previous
// SnapshotDirtyShard, whose record it resets.
struct SnapshotDirtyShard {
  std::function<void(std::vector<VarSnapshot>)> done;
};
// Replication: the changes of the shard's variables among names since the
// last TakeShardChanges (every one whole when full), and the origins its
// shard applied since (all it remembers when full); resets that record.
struct TakeShardChanges {
  std::set<std::string> names;
  bool full = false;
  // With full: dense variables of more bytes than this are read in pieces
  // later (VarChanges::read_rows, which holds the shard's core as a direct
  // call does); 0: every value whole now.
  int64_t pieces_over = 0;
  std::function<void(std::vector<VarChanges>)> done;
};
// A backup applying what TakeShardChanges took on the holder to variable id.
struct ApplyShardChanges {
  int64_t id = -1;
  VarChanges changes;
  std::function<void(Status)> done;
};

}  // namespace runtime
}  // namespace sf

// In-process only (see the top of this file): callbacks and tensors by reference.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::DefineVariable)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ReadVariable)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::AssignVariable)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::AssignVariableRows)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::RefillVariable)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ApplyDense)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::GatherRows)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ApplySparse)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::InitHashShard)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::QueryHashShard)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ApplySyncGradient)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ApplySparseSyncGradient)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::SyncWaitTimeout)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::AbortSyncSteps)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::AbortStepWaits)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ReadVersioned)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::QueryReplicaStats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::WaitStaleSync)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::SnapshotShard)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::SnapshotDirtyShard)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::TakeShardChanges)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ApplyShardChanges)

namespace sf {
namespace runtime {

using VariableShardActor = caf::typed_actor<
    caf::reacts_to<DefineVariable>, caf::reacts_to<ReadVariable>, caf::reacts_to<AssignVariable>,
    caf::reacts_to<AssignVariableRows>, caf::reacts_to<ApplyDense>, caf::reacts_to<GatherRows>, caf::reacts_to<ApplySparse>,
    caf::reacts_to<InitHashShard>, caf::reacts_to<QueryHashShard>,
    caf::reacts_to<ApplySyncGradient>, caf::reacts_to<ApplySparseSyncGradient>, caf::reacts_to<SyncWaitTimeout>, caf::reacts_to<AbortSyncSteps>,
    caf::reacts_to<AbortStepWaits>,
    caf::reacts_to<ReadVersioned>, caf::reacts_to<QueryReplicaStats>, caf::reacts_to<WaitStaleSync>,
    caf::reacts_to<SnapshotShard>, caf::reacts_to<SnapshotDirtyShard>, caf::reacts_to<RefillVariable>,
    caf::reacts_to<TakeShardChanges>, caf::reacts_to<ApplyShardChanges>>;

}  // namespace runtime
}  // namespace sf
