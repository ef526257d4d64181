// EmbeddingShardService: how the embedding kernels reach the shards of an
// embedding table: the lookup and the sparse update run where the rows live
// (kernels/embedding_math.h holds the arithmetic), and only the combined rows
// or the sparse gradient travel. Shard ids are variable ids of the
// VariableService beside it.
//
// Every call is asynchronous: the callback runs exactly once, on any thread.
// Thread-safety: implementations are safe to call from many threads.
#pragma once

#include <functional>

#include "shardflow/status.h"
#include "shardflow/tensor.h"
#include "kernels/embedding_math.h"
#include "kernels/hash_embedding.h"

namespace sf {

class EmbeddingShardService {
 public:
  virtual ~EmbeddingShardService() = default;
  // The partial [num_segments, dim] combination of shard id's rows picked by q (spec places the shard in its table); InvalidArgument naming the table and id for an id outside [0, rows).
  virtual void GatherCombine(int64_t id, EmbeddingShardSpec spec, EmbeddingGather q,
                             std::function<void(Result<Tensor>)> done) = 0;
  // Applies a sparse optimizer update (duplicate rows summed first) atomically where the shard lives; the error names the variable.
  virtual void SparseApply(SparseApplyRequest req, std::function<void(Status)> done) = 0;
  // Makes shard id an empty hash table shard (kernels/hash_embedding.h) with config, replacing what it held; InvalidArgument naming the table for a bad config.
  virtual void InitHashShard(int64_t id, HashShardConfig config, std::function<void(Status)> done) = 0;
  // The metrics of hash shard id (HashShardMetricsTensor); FailedPrecondition when it is not a hash shard.
  virtual void HashShardStats(int64_t id, std::function<void(Result<Tensor>)> done) = 0;
};

}  // namespace sf
