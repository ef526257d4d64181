// InMemoryVariables: a VariableService (and the EmbeddingShardService over
// the same variables) holding variables in a map under one mutex, answering
// synchronously. For tests and the reference evaluator; a session uses
// variable shard actors instead. It has no replication and no collectives.
#pragma once

#include <memory>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/embedding_shard_service.h"
#include "kernels/variable_service.h"

namespace sf {

class InMemoryVariables : public VariableService, public EmbeddingShardService {
 public:
  Result<int64_t> Resolve(const std::string& name, DType dtype, const PartialShape& shape) override;
  void Read(int64_t id, std::function<void(Result<Tensor>)> done) override;
  // Origins are not tracked: nothing runs a step here again.
  void Assign(int64_t id, AssignMode mode, Tensor value, std::function<void(Result<Tensor>)> done,
              UpdateOrigin origin = {}) override;
  void Apply(ApplyRequest req, std::function<void(Status)> done) override;
  void AssignRows(AssignRowsRequest req, std::function<void(Status)> done) override;
  std::string NameOf(int64_t id) const override;
  // Sharded embeddings: combined and applied under the lock.
  void GatherCombine(int64_t id, EmbeddingShardSpec spec, EmbeddingGather q,
                     std::function<void(Result<Tensor>)> done) override;
  void SparseApply(SparseApplyRequest req, std::function<void(Status)> done) override;
  // Hash tables: a HashEmbeddingShard per hash shard variable, under the lock.
  void InitHashShard(int64_t id, HashShardConfig config, std::function<void(Status)> done) override;
  void HashShardStats(int64_t id, std::function<void(Result<Tensor>)> done) override;

 private:
  struct Var {
    std::string name;
    DType dtype;
    PartialShape shape;
    Tensor value;  // invalid until first assigned
    std::shared_ptr<HashEmbeddingShard> hash;  // a hash table shard (its value is then its state)
  };
  // Copies the variables `ids`, lets update change the copies, and stores
  // them when it succeeds (copy-on-write: readers keep their snapshots).
  // NotFound / FailedPrecondition naming the variable before update runs.
  // REQUIRES: mu_ held.
  Status UpdateCopies(const std::vector<int64_t>& ids,
                      const std::function<Status(const std::vector<Tensor*>&)>& update);

  mutable std::mutex mu_;
  std::vector<Var> vars_;  // GUARDED_BY(mu_)
  std::unordered_map<std::string, int64_t> ids_;  // GUARDED_BY(mu_)
};

// Resolve's check that a name resolved again means the same variable:
// InvalidArgument naming both dtypes and shapes otherwise.
Status CheckSameVariable(const std::string& name, DType have_dtype, const PartialShape& have_shape,
                         DType dtype, const PartialShape& shape);

// Shared checks and arithmetic of Assign/AssignAdd/AssignSub: updates *stored
// (invalid = uninitialised) with value (an Assign takes value's buffer when
// nobody else holds it, else a copy); errors name the variable.
Status ApplyAssign(const std::string& var_name, DType dtype, const PartialShape& declared,
                   AssignMode mode, const Tensor& value, Tensor* stored);

// The arithmetic of VariableService::AssignRows: (*stored)[indices[i], ...] =
// rows[i, ...] for every i in order (so of duplicate indices the last wins),
// in place when *stored's buffer is its own, else into a copy (readers keep
// their snapshot). Checks everything before it writes: InvalidArgument naming
// var_name and the bad dtype, shape or index (an index outside [0, leading
// dimension)), FailedPrecondition for an invalid *stored; *stored unchanged
// then. written (may be null) gets the indices as int64 [n].
Status ApplyAssignRows(const std::string& var_name, const Tensor& indices, const Tensor& rows, Tensor* stored,
                       Tensor* written = nullptr);

}  // namespace sf
