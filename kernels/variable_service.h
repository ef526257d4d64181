// VariableService: how kernels reach variables, which live elsewhere (in
// variable shard actors inside a session). Kernels only see this interface, so
// kernels/ knows nothing of actors.
//
// Every call is asynchronous: the callback runs exactly once, on any thread.
// Thread-safety: implementations are safe to call from many threads.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "shardflow/status.h"
#include "shardflow/tensor.h"
#include "kernels/embedding_math.h"
#include "kernels/optimizer_spec.h"

namespace sf {

// How an update combines with the stored value.
enum class AssignMode : uint8_t { kAssign = 0, kAdd = 1, kSub = 2 };

// One optimizer update applied where the variable lives, with its slots.
struct ApplyRequest {
  OptimizerKind optimizer = OptimizerKind::kGradientDescent;  // kernels/optimizer_spec.h
  std::vector<int64_t> var_ids;   // the variable first, then its slots in the op's order
  std::vector<Tensor> scalars;    // hyperparameters in the op's input order (lr, ...)
  Tensor grad;
  bool use_nesterov = false;  // Momentum
  // Asynchronous replication: the version of the variable the worker read
  // (ReadVariableWithVersion); >= 0 records staleness = version at apply -
  // read_version at the shard. -1: not tracked.
  int64_t read_version = -1;
};

// ---- replication (synchronous with backup workers, staleness, SSP) --------
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
};

// What QueryReplica reads about a variable.
enum class ReplicaQuery : uint8_t {
  kSyncStats = 0,   // int64 [3]: applied steps (= the current step), accepted, dropped gradients
  kStaleness = 1,   // float64 [3]: tracked updates, mean staleness, max staleness
};

class VariableService {
 public:
  virtual ~VariableService() = default;
  // Resolves (creating on first use) the variable `name`; returns its id, or
  // InvalidArgument when it exists with another dtype or shape.
  virtual Result<int64_t> Resolve(const std::string& name, DType dtype,
                                  const PartialShape& shape) = 0;
  // A snapshot of the value; FailedPrecondition naming the variable if it was
  // never initialised.
  virtual void Read(int64_t id, std::function<void(Result<Tensor>)> done) = 0;
  // Stores, adds or subtracts a value; returns the new value (a snapshot).
  virtual void Assign(int64_t id, AssignMode mode, Tensor value,
                      std::function<void(Result<Tensor>)> done) = 0;
  // Applies an optimizer update atomically with respect to other updates.
  virtual void Apply(ApplyRequest req, std::function<void(Status)> done) = 0;
  // The name given to Resolve, for error messages ("" when unknown).
  virtual std::string NameOf(int64_t id) const = 0;

  // ---- sharded embeddings (see kernels/embedding_math.h) -------------------
  // The partial [num_segments, dim] combination of the rows of embedding
  // shard `id` (spec says where it sits in its table) picked by q's ids,
  // computed where the shard lives. InvalidArgument naming the table and id
  // for an id outside [0, rows). The default reads the value and combines
  // it here; shard services do it in place.
  virtual void GatherCombine(int64_t id, EmbeddingShardSpec spec, EmbeddingGather q,
                             std::function<void(Result<Tensor>)> done);
  // Applies a sparse optimizer update (duplicate rows summed first) atomically
  // where the variable lives; the default answers Unimplemented.
  virtual void SparseApply(SparseApplyRequest req, std::function<void(Status)> done);

  // ---- replication; the defaults answer Unimplemented ----------------------
  // Contributes a gradient to a synchronous step; done gets the step it was
  // counted in once that step has been applied, -1 at once when it was
  // stale (or the step already had its N), or the error (InvalidArgument
  // naming the variable for a bad gradient or N; Aborted by AbortSync or
  // shutdown; Unavailable after timeout_ms, the gradient staying counted).
  virtual void ApplySync(SyncApplyRequest req, std::function<void(Result<int64_t>)> done);
  // Fails every worker waiting on variable id's pending steps with Aborted
  // and drops (counting) their gradients; the step does not advance.
  virtual void AbortSync(int64_t id, std::function<void(Status)> done);
  // The value and its version (the number of optimizer updates applied so
  // far), read together.
  virtual void ReadWithVersion(int64_t id, std::function<void(Result<std::pair<Tensor, int64_t>>)> done);
  // Replication counters of variable id (see ReplicaQuery).
  virtual void QueryReplica(int64_t id, ReplicaQuery what, std::function<void(Result<Tensor>)> done);
  // Stale-synchronous barrier on variable id: records that `worker` (of
  // num_workers) starts clock `clock`; done runs once clock - (the slowest
  // worker's clock) <= staleness. InvalidArgument for a bad worker index or
  // a num_workers that differs from earlier calls.
  virtual void StaleSyncWait(int64_t id, int64_t worker, int64_t clock, int64_t num_workers,
                             int64_t staleness, std::function<void(Status)> done);
  // Ring all-reduce (sum) of `value` among the group_size callers of group
  // `group_key`, this one being `rank`; the k-th call of every rank forms
  // the k-th reduction. The session hosts the collective actors beside its
  // variable shards, so kernels reach them through this service. done gets
  // the sum, or InvalidArgument naming the group (bad rank or size, ranks
  // disagreeing on size, dtype or shape), or Aborted at shutdown.
  virtual void AllReduce(const std::string& group_key, int64_t group_size, int64_t rank, Tensor value,
                         std::function<void(Result<Tensor>)> done);
};

}  // namespace sf
