// Checkpoint reads and writes for the in-graph SaveCheckpoint and
// RestoreCheckpoint kernels. Kernels cannot link the storage library (it
// builds on them), so the runtime installs these once (actors/checkpoint_io.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

struct CheckpointHooks {
  // Writes a committed checkpoint of values (named) under global_step into
  // the store in dir; returns its id.
  std::function<Result<int64_t>(const std::string& dir, int64_t global_step, const std::vector<std::string>& names,
                                const std::vector<Tensor>& values)>
      save;
  // The named values from the newest committed checkpoint in dir that reads
  // back intact, and its global step.
  std::function<Result<std::vector<Tensor>>(const std::string& dir, const std::vector<std::string>& names,
                                            int64_t* global_step)>
      restore;
};

// The variable names of a checkpoint op's "names" attr (one per line).
std::vector<std::string> SplitCheckpointNames(const std::string& joined);

// Installs the hooks (the runtime does, before running graphs).
void SetCheckpointHooks(CheckpointHooks hooks);
// The installed hooks (empty functions when none are).
const CheckpointHooks& GetCheckpointHooks();

}  // namespace sf
