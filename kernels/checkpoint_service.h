// CheckpointService: what the in-graph SaveCheckpoint and RestoreCheckpoint
// kernels write and read through. Kernels cannot link the storage library
// (it builds on them), so the runtime that owns the partition hands one to
// the kernels in KernelInit::checkpoints (actors/checkpoint_io.h has the
// store-backed one); a kernel built without one fails its step with
// FailedPrecondition.
// Thread-safety: implementations are called from many compute threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

class CheckpointService {
 public:
  virtual ~CheckpointService() = default;
  // Writes a committed checkpoint of values (named) under global_step into
  // the store in dir; returns its id, or the store's error naming dir.
  virtual Result<int64_t> Save(const std::string& dir, int64_t global_step,
                               const std::vector<std::string>& names, const std::vector<Tensor>& values) = 0;
  // The named values from the newest committed checkpoint in dir that reads
  // back intact, and its global step; NotFound naming dir or the variable.
  virtual Result<std::vector<Tensor>> Restore(const std::string& dir, const std::vector<std::string>& names,
                                              int64_t* global_step) = 0;
};

// The variable names of a checkpoint op's "names" attr (one per line).
std::vector<std::string> SplitCheckpointNames(const std::string& joined);

}  // namespace sf
