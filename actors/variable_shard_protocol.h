// The variable shard actor's protocol (actor-private: includes CAF; include
// it only from actors/). A shard owns some variables (a variable and its
// optimizer slots) and serializes their updates, so each update is atomic;
// reads answer with a copy-on-write snapshot.
//
// In-process only for now: the message carries callbacks and tensors by
// reference (refcounted buffers, no copy). The Cap'n Proto wire form for
// cross-process shards comes with the distributed runtime.
#pragma once

#include <functional>
#include <memory>
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

// One request to a variable shard actor; the matching callback answers it.
struct VarMsg {
  enum Kind {
    kDefine, kRead, kAssign, kApply, kSnapshot,
    // Replication (kernels/replica_state.h).
    kSyncApply, kSyncTimeout, kSyncAbort, kReadVersion, kReplicaQuery, kSspWait,
    // Sharded embeddings (kernels/embedding_math.h).
    kGather, kSparseApply,
    // Checkpoints: a snapshot with the rows changed since the last one.
    kSnapshotDirty,
  } kind = kRead;
  int64_t id = -1;
  std::string name;  // kDefine
  DType dtype = DType::kInvalid;
  PartialShape shape;
  AssignMode mode = AssignMode::kAssign;
  Tensor value;  // kAssign
  ApplyRequest req;  // kApply
  std::function<void(Result<Tensor>)> tensor_done;  // kRead, kAssign
  std::function<void(Status)> status_done;          // kApply
  // kSnapshot: every initialised variable of the shard (name, value), taken
  // between two updates, so a variable and its slots are consistent.
  std::function<void(std::vector<std::pair<std::string, Tensor>>)> snapshot_done;
  // ---- replication ----
  SyncApplyRequest sync;  // kSyncApply
  int64_t waiter_id = 0;  // kSyncApply, kSyncTimeout
  ReplicaQuery query = ReplicaQuery::kSyncStats;  // kReplicaQuery
  int64_t worker = 0, clock = 0, num_workers = 0, staleness = 0;  // kSspWait
  std::function<void(Result<int64_t>)> step_done;  // kSyncApply
  std::function<void(Result<std::pair<Tensor, int64_t>>)> versioned_done;  // kReadVersion
  // ---- sharded embeddings ----
  EmbeddingShardSpec spec;        // kGather
  EmbeddingGather gather;         // kGather (answers through tensor_done)
  SparseApplyRequest sparse;      // kSparseApply (answers through status_done)
  // kSnapshotDirty: like kSnapshot, with each variable's changes since the
  // previous kSnapshotDirty, whose record it resets.
  std::function<void(std::vector<VarSnapshot>)> dirty_snapshot_done;
};
using VarMsgPtr = std::shared_ptr<VarMsg>;

}  // namespace runtime
}  // namespace sf

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::VarMsgPtr)

namespace sf {
namespace runtime {

using VariableShardActor = caf::typed_actor<caf::reacts_to<VarMsgPtr>>;

}  // namespace runtime
}  // namespace sf
