// ReplicationService: synchronous replication with backup workers, the
// versions and staleness of asynchronous updates, and the stale-synchronous
// (SSP) barrier, kept beside each variable (kernels/replica_state.h holds
// the bookkeeping). Variable ids are those of the VariableService beside it.
//
// Every call is asynchronous: the callback runs exactly once, on any thread;
// a waiting worker is a stored callback, never a blocked thread.
// Thread-safety: implementations are safe to call from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "shardflow/status.h"
#include "shardflow/tensor.h"
#include "kernels/embedding_math.h"
#include "kernels/variable_service.h"

namespace sf {

// One worker's gradient for a synchronous step, aggregated at the shard: the
// shard averages the first num_required gradients tagged with its current
// step, applies the average once (req.optimizer with req.scalars) and
// advances its step. A gradient tagged below the step is stale: counted and
// dropped.
struct SyncApplyRequest {
  ApplyRequest req;          // req.grad: this worker's gradient
  int64_t step_tag = 0;      // the global step the worker read at step start
  int64_t num_required = 1;  // N of N + b; every worker must give the same N
  int64_t timeout_ms = 0;    // > 0: the wait for the step fails after this long
  int64_t run_step = 0;      // the step (run) that waits: AbortWaits answers it
};

// One worker's sparse gradient of an embedding shard (its rows and their
// gradients) for a synchronous step: the shard concatenates the first
// num_required of the step, scales them by 1 / num_required and applies them
// as one sparse update (rows that several workers touched summed first), so
// each row gets one update by the average, as a dense variable does.
struct SparseSyncApplyRequest {
  SparseApplyRequest req;    // req.indices, req.values: this worker's rows
  int64_t step_tag = 0;
  int64_t num_required = 1;
  int64_t timeout_ms = 0;
  int64_t run_step = 0;      // the step (run) that waits: AbortWaits answers it
};

// What QueryReplica reads about a variable.
enum class ReplicaQuery : uint8_t {
  kSyncStats = 0,   // int64 [4]: applied steps (= the current step), accepted, dropped, pending gradients
  kStaleness = 1,   // float64 [3]: tracked updates, mean staleness, max staleness
};

class ReplicationService {
 public:
  virtual ~ReplicationService() = default;
  // Contributes a gradient to a synchronous step: answers the step it counted in once applied, -1 at once when stale (or the step had its N); InvalidArgument naming the variable for a bad gradient or N, Aborted by AbortSync or shutdown, Unavailable after timeout_ms (the gradient still counts).
  virtual void ApplySync(SyncApplyRequest req, std::function<void(Result<int64_t>)> done) = 0;
  // The same for an embedding shard's sparse gradient (SparseSyncApplyRequest); InvalidArgument naming the shard for rows of another width or a shard that also takes dense gradients.
  virtual void SparseApplySync(SparseSyncApplyRequest req, std::function<void(Result<int64_t>)> done) = 0;
  // Fails every worker waiting on variable id's pending steps with Aborted and drops (counts) their gradients; NotFound for an unknown id.
  virtual void AbortSync(int64_t id, std::function<void(Status)> done) = 0;
  // Answers every synchronous wait of run run_step (an aborted step) with why; their gradients still count. One-way.
  virtual void AbortWaits(int64_t run_step, const Status& why) = 0;
  // The value and its version (optimizer updates applied so far), read together; FailedPrecondition naming a never-initialised variable.
  virtual void ReadWithVersion(int64_t id, std::function<void(Result<std::pair<Tensor, int64_t>>)> done) = 0;
  // Replication counters of variable id (see ReplicaQuery); NotFound for an unknown id.
  virtual void QueryReplica(int64_t id, ReplicaQuery what, std::function<void(Result<Tensor>)> done) = 0;
  // SSP barrier: `worker` (of num_workers) starts `clock`; answers once clock - the slowest worker's clock <= staleness; InvalidArgument naming the variable for a bad worker index or a num_workers that differs from earlier calls. run_step: the step that waits (AbortWaits answers it).
  virtual void StaleSyncWait(int64_t id, int64_t worker, int64_t clock, int64_t num_workers, int64_t staleness,
                             int64_t run_step, std::function<void(Status)> done) = 0;
};

}  // namespace sf
