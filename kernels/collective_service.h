// CollectiveService: how the collective kernels reach the collective actors
// a session (or a cluster node) hosts beside its variable shards.
//
// Every call is asynchronous: the callback runs exactly once, on any thread;
// a rank waiting for its peers is a stored callback, never a blocked thread.
// Thread-safety: implementations are safe to call from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

class CollectiveService {
 public:
  virtual ~CollectiveService() = default;
  // Ring all-reduce (sum) of value among the group_size callers of group_key, this one being rank (the k-th call of every rank forms the k-th reduction); InvalidArgument naming the group for a bad rank or size or ranks disagreeing on size, dtype or shape, Aborted at shutdown.
  virtual void AllReduce(const std::string& group_key, int64_t group_size, int64_t rank, Tensor value,
                         std::function<void(Result<Tensor>)> done) = 0;
};

}  // namespace sf
