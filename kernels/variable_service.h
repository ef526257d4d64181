// VariableService: how kernels reach variables, which live elsewhere (in
// variable shard actors inside a session). Kernels only see this interface, so
// kernels/ knows nothing of actors. Embedding shards, replication and
// collectives are separate services beside it (embedding_shard_service.h,
// replication_service.h, collective_service.h).
//
// Every call is asynchronous: the callback runs exactly once, on any thread.
// Thread-safety: implementations are safe to call from many threads.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "shardflow/status.h"
#include "shardflow/tensor.h"
#include "kernels/optimizer_spec.h"
#include "kernels/update_origin.h"

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
  // (ReplicationService::ReadWithVersion); >= 0 records staleness = version
  // at apply - read_version at the shard. -1: not tracked.
  int64_t read_version = -1;
  // Who made it (kernels/update_origin.h): a shard applies each origin once.
  UpdateOrigin origin;
};

// Rows of a variable overwritten where it lives (the ResourceScatterUpdate
// op, TF's ScatterUpdate): variable[indices[i], ...] = rows[i, ...].
struct AssignRowsRequest {
  int64_t var_id = -1;
  Tensor indices;  // int32 or int64, any shape: rows of the variable's leading dimension
  Tensor rows;     // the variable's dtype, shape indices.shape + the variable's shape[1:]
  // Who made it (kernels/update_origin.h): a shard applies each origin once.
  UpdateOrigin origin;
};

class VariableService {
 public:
  virtual ~VariableService() = default;
  // Resolves (creating on first use) variable `name` to its id; InvalidArgument if it exists with another dtype or shape.
  virtual Result<int64_t> Resolve(const std::string& name, DType dtype,
                                  const PartialShape& shape) = 0;
  // A snapshot of the value; NotFound for an unknown id, FailedPrecondition naming a never-initialised variable.
  virtual void Read(int64_t id, std::function<void(Result<Tensor>)> done) = 0;
  // Stores, adds or subtracts value and answers the new value (a snapshot; the
  // value as it is when origin was applied before); InvalidArgument naming the
  // variable on a dtype or shape mismatch.
  virtual void Assign(int64_t id, AssignMode mode, Tensor value, std::function<void(Result<Tensor>)> done,
                      UpdateOrigin origin = {}) = 0;
  // Applies an optimizer update atomically with respect to other updates; the error names the variable.
  virtual void Apply(ApplyRequest req, std::function<void(Status)> done) = 0;
  // Overwrites the rows req names, all at once with respect to other reads
  // and updates (of duplicate indices the last wins); InvalidArgument naming
  // the variable and the index or shape on bad input (nothing written then),
  // FailedPrecondition for an uninitialised variable, NotFound for an unknown id.
  virtual void AssignRows(AssignRowsRequest req, std::function<void(Status)> done) = 0;
  // The name given to Resolve, for error messages ("" when unknown).
  virtual std::string NameOf(int64_t id) const = 0;
  // Runs fill on the variable's value where the variable lives, in order with
  // its reads and updates (a restore into the variable's own memory): fill
  // may overwrite *value in place when it holds the only reference
  // (Tensor::BufferIsUnique) or replace it; the variable then counts as
  // wholly changed. A failed fill leaves *value as fill left it (fill clears
  // what it half wrote). Unimplemented for services that cannot (the caller
  // assigns instead, nothing changed); NotFound for an unknown id; fill's
  // error otherwise.
  virtual void Refill(int64_t id, std::function<Status(Tensor* value)> fill, std::function<void(Status)> done) {
    (void)id;
    (void)fill;
    done(Unimplemented("variables cannot be refilled in place here"));
  }
  // Whether Refill is implemented.
  virtual bool CanRefill() const { return false; }
};

}  // namespace sf
