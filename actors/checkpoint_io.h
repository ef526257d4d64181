// Checkpoint I/O shared by the local and the cluster session: opening a
// store, the graph's sharded embedding tables, and matching a checkpoint's
// values to a graph's variables (resharding tables on the way).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kernels/checkpoint_service.h"
#include "shardflow/graph.h"
#include "storage/checkpoint.h"
#include "storage/kv_store.h"

namespace sf {
namespace runtime {

// Opens the checkpoint store in dir (created when create); for reading it
// must exist: NotFound naming dir, InvalidArgument for an empty dir.
Result<std::unique_ptr<KvStore>> OpenCheckpointDir(const std::string& dir, bool create);

// The checkpoint service the in-graph SaveCheckpoint and RestoreCheckpoint
// kernels write and read through (kernels/checkpoint_service.h): stores in
// checkpoint directories, one open of a directory at a time in the process.
std::unique_ptr<CheckpointService> NewStoreCheckpointService();

// The graph's sharded embedding tables (VarHandles with "_embedding_table"),
// by name: rows summed over the shards, the shard count and partitioning.
std::map<std::string, CheckpointTable> GraphTables(const Graph& g);

// One graph variable's value from a checkpoint.
struct CheckpointValue {
  std::string name;  // shared name
  DType dtype;
  PartialShape shape;  // as the graph declares it
  Tensor value;
};

// A checkpoint read for a graph.
struct GraphCheckpoint {
  int64_t id = -1;
  int64_t global_step = 0;
  std::vector<CheckpointValue> values;  // one per graph variable (or per name in `only`)
};

// Reads checkpoint id of dir (-1: the newest committed one that reads back
// intact, falling back past corrupt ones) and gives each variable of g (only
// those named in *only when given) its value, tables resharded into g's
// layout. Errors as Session::Restore: NotFound (no checkpoint, a variable
// missing), DataLoss naming checkpoint, variable and block (and the previous
// readable id), InvalidArgument naming a variable whose dtype or shape differs.
Result<GraphCheckpoint> ReadCheckpointForGraph(const Graph& g, const std::string& dir, int64_t id,
                                               const std::set<std::string>* only = nullptr);

}  // namespace runtime
}  // namespace sf
