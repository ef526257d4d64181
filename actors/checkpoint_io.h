// Checkpoint I/O shared by the local and the cluster session: opening a
// store, the graph's sharded embedding tables, and matching a checkpoint's
// values to a graph's variables (resharding tables on the way).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kernels/checkpoint_service.h"
#include "kernels/variable_service.h"
#include "shardflow/graph.h"
#include "storage/checkpoint.h"
#include "storage/kv_store.h"

namespace sf {
namespace runtime {

// The one way a checkpoint is written, for Session, ClusterSession and the
// in-graph SaveCheckpoint op alike: opens the store in a directory, records
// the graph's sharded tables, takes each variable whole (or, in an
// increment, its changed rows), commits, and applies retention. While it
// lives it holds the directory's lock within this process (RocksDB allows
// one open of a directory per process).
class GraphCheckpointWriter {
 public:
  // Starts checkpoint global_step in dir (created if needed). g's sharded
  // embedding tables are recorded (g may be null: none). parent >= 0 asks for
  // an increment on that checkpoint; when it no longer exists the checkpoint
  // is full (incremental() says which). Errors name dir.
  static Result<std::unique_ptr<GraphCheckpointWriter>> Begin(const Graph* g, const std::string& dir,
                                                              int64_t global_step, int64_t parent = -1);
  ~GraphCheckpointWriter();
  bool incremental() const { return incremental_; }
  // Adds a variable's whole value; the storage error otherwise.
  Status Add(const std::string& name, const Tensor& value);
  // Adds only `rows` of a variable (REQUIRES: incremental()).
  Status AddRows(const std::string& name, const Tensor& value, const std::vector<int64_t>& rows);
  // Commits the checkpoint, then keeps the newest keep_last (<= 0: all);
  // returns its id. Nothing is visible unless this succeeds.
  Result<int64_t> Commit(int keep_last = 0);

 private:
  GraphCheckpointWriter() = default;
  std::unique_lock<std::mutex> dir_lock_;
  std::unique_ptr<KvStore> kv_;
  std::unique_ptr<CheckpointWriter> writer_;
  bool incremental_ = false;
};

// The checkpoint service the in-graph SaveCheckpoint and RestoreCheckpoint
// kernels write and read through (kernels/checkpoint_service.h): stores in
// checkpoint directories, one open of a directory at a time in the process.
std::unique_ptr<CheckpointService> NewStoreCheckpointService();

// The same service for a cluster node, whose partitions come from peers:
// each dir is a relative path under root (created when saved to). An
// absolute dir or one with a ".." component is InvalidArgument naming it;
// with root "" every call is FailedPrecondition (in-graph checkpoints off).
std::unique_ptr<CheckpointService> NewRootedCheckpointService(std::string root);

// OK when dir is a non-empty relative path without ".." components (a
// directory under a node's checkpoint root); InvalidArgument naming dir otherwise.
Status CheckRelativeCheckpointDir(const std::string& dir);

// The graph's sharded embedding tables (VarHandles with "_embedding_table"),
// by name: rows summed over the shards, the shard count and partitioning.
std::map<std::string, CheckpointTable> GraphTables(const Graph& g);

// A checkpoint as read: its manifest and the values asked for.
struct CheckpointRead {
  CheckpointInfo info;
  std::map<std::string, Tensor> values;
};
// Which values of a checkpoint to read, given its manifest (every block
// read is checksummed); an error makes the reader try the previous one.
using CheckpointSelect =
    std::function<Result<std::map<std::string, Tensor>>(CheckpointReader&, const CheckpointInfo&)>;

// The one way a checkpoint is read, for Session, ClusterSession and the
// in-graph RestoreCheckpoint op alike: checkpoint id of dir (-1: the newest
// committed one whose selected values read back intact, falling back past
// corrupt ones), holding the directory's lock within this process. NotFound
// naming dir when none reads back; a given id's error (DataLoss naming
// checkpoint, variable and block) says which earlier one is readable.
Result<CheckpointRead> ReadCheckpoint(const std::string& dir, int64_t id, const CheckpointSelect& select);
// A CheckpointSelect's usual body: the variables named (all of an
// increment's chain, which only ReadAll composes).
Result<std::map<std::string, Tensor>> ReadNamed(CheckpointReader& reader, const CheckpointInfo& info,
                                                const std::set<std::string>& names);

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

// ReadCheckpoint of id in dir, giving each variable of g (only
// those named in *only when given) its value, tables resharded into g's
// layout. Errors as Session::Restore: NotFound (no checkpoint, a variable
// missing), DataLoss naming checkpoint, variable and block (and the previous
// readable id), InvalidArgument naming a variable whose dtype or shape differs.
Result<GraphCheckpoint> ReadCheckpointForGraph(const Graph& g, const std::string& dir, int64_t id,
                                               const std::set<std::string>* only = nullptr);

// Restores checkpoint id (the newest committed when < 0) of dir into g's
// variables in their own memory (VariableService::Refill), so a restore
// writes no fresh pages: only for a full checkpoint holding every graph
// variable with its dtype and shape, tables in the graph's layout, no hash
// tables, and a service that can refill. Every block's checksum is checked
// before any variable changes. False (nothing changed) when it does not
// apply or a check fails: ReadCheckpointForGraph then restores, or reports
// the error. An error only if a read fails after the checks (naming the
// variable, which is left uninitialised rather than half written).
Result<bool> RestoreInPlace(const Graph& g, const std::string& dir, int64_t id, VariableService* vars,
                            int64_t* global_step);

}  // namespace runtime
}  // namespace sf
