// Checkpoints over a KvStore.
//
// Layout (ids are zero-padded so key order is id order):
//   pending/<id>                               written when a checkpoint starts (reserves the id)
//   data/<id>/<variable>#<shard>#<block>       crc32 (4 bytes, little-endian) + raw row block
//   data/<id>/<variable>#<shard>#rows          an increment's row indices: crc32 + int64 LE
//   manifest/<id>                              the commit: written last, with a synced write
// A checkpoint without a manifest is invisible to readers; atomicity comes
// from that single synced manifest write, which comes after every block is
// durable (bulk-written blocks when Add returns, the rest through the same
// write-ahead log as the manifest). The manifest is text ending in its
// own crc32, so a truncated or garbage manifest is detected.
//
// Incremental checkpoints: a checkpoint may name a parent; it then holds, per
// variable, either every row or only the rows changed since the parent
// (stored_rows >= 0, with their indices). The chain parent -> ... -> full base
// composes into the values (ReadAll); CompactCheckpoint folds a chain into a
// new full checkpoint, and retention never deletes an ancestor of a kept one.
//
// Thread-safety: a writer is used by one thread; readers are safe to share
// when the store is.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardflow/status.h"
#include "shardflow/tensor.h"
#include "storage/kv_store.h"

namespace sf {

// One saved variable (or optimizer slot) as the manifest records it.
struct CheckpointVariable {
  std::string name;
  DType dtype = DType::kInvalid;
  Shape shape;
  int shard = 0;
  int64_t rows_per_block = 0;  // leading-dimension rows in each block (the last may hold fewer)
  int64_t num_blocks = 0;
  // -1: every row is stored; otherwise an increment holding only these many
  // leading-dimension rows (the changed ones) and their indices.
  int64_t stored_rows = -1;
};

// A sharded embedding table whose shard variables "<name>/part_<k>" are in
// the checkpoint: lets a restore move rows into a different shard count.
struct CheckpointTable {
  std::string name;
  int64_t rows = 0;
  int64_t num_shards = 0;
  std::string partition;  // "mod" or "range"
};

// A committed checkpoint's manifest.
struct CheckpointInfo {
  int64_t id = -1;
  int64_t global_step = 0;
  int64_t parent = -1;  // the checkpoint this one is an increment on; -1: full
  std::vector<CheckpointTable> tables;
  std::vector<CheckpointVariable> variables;
  // The variable called name, or null.
  const CheckpointVariable* Find(const std::string& name) const;
  // The table called name, or null.
  const CheckpointTable* FindTable(const std::string& name) const;
};

class CheckpointWriter {
 public:
  // Starts a checkpoint with the next id (one above every id ever started in
  // the store); blocks hold at most block_bytes (at least one row).
  // Unavailable when the store cannot be written.
  static Result<std::unique_ptr<CheckpointWriter>> Begin(KvStore* store, int64_t global_step,
                                                         int64_t block_bytes = 4 << 20);
  int64_t id() const { return info_.id; }
  // Writes value's row blocks (not yet visible). A value of 4 MiB or more
  // goes through the store's bulk writer (for RocksDB: table files written
  // once, two threads from 64 MiB), and every bulk-written variable of the
  // checkpoint is made durable together at Commit (one ingestion).
  // InvalidArgument for a duplicate name, a name with whitespace or
  // '#', or a resource/invalid tensor.
  Status Add(const std::string& name, const Tensor& value, int shard = 0);
  // Makes this checkpoint an increment on committed checkpoint parent (call
  // before Add). NotFound when parent is not committed.
  Status SetParent(int64_t parent);
  // Writes only rows (sorted, unique indices into value's leading dimension)
  // of value: the rows changed since the parent. InvalidArgument as for Add,
  // for an unsorted or out-of-range row, or when there is no parent.
  Status AddRows(const std::string& name, const Tensor& value, const std::vector<int64_t>& rows,
                 int shard = 0);
  // Records a sharded embedding table (for restores into another shard count).
  // InvalidArgument for a bad name, count or partition.
  Status AddTable(const CheckpointTable& table);
  // Commits: makes the bulk-written blocks durable (KvStore::FinishBulk),
  // then writes the manifest with a synced write; returns the id.
  // Unavailable on a store failure (the checkpoint stays uncommitted).
  Result<int64_t> Commit();

 private:
  CheckpointWriter(KvStore* store, int64_t block_bytes) : store_(store), block_bytes_(block_bytes) {}
  KvStore* store_;
  const int64_t block_bytes_;
  // Writes rows [n, ...] of variable v (from base) as checksummed blocks.
  Status WriteBlocks(CheckpointVariable& v, const char* base, int64_t n);
  CheckpointInfo info_;
  bool committed_ = false;
  // Bulk writers of the variables added so far, finished together at Commit.
  std::vector<std::unique_ptr<KvBulkWriter>> bulk_;
};

class CheckpointReader {
 public:
  explicit CheckpointReader(KvStore* store) : store_(store) {}
  // The ids that have a manifest entry, ascending (their manifests are not
  // checked here: Manifest does that).
  Result<std::vector<int64_t>> List();
  // The parsed manifest of checkpoint id: NotFound when it is not committed,
  // DataLoss naming the checkpoint for a truncated or garbage manifest.
  Result<CheckpointInfo> Manifest(int64_t id);
  // The newest checkpoint whose manifest parses; NotFound when none.
  Result<int64_t> LatestCommitted();
  // The value of one variable, every block's checksum checked (blocks read
  // into reused buffers, by two threads from 64 MiB): DataLoss
  // naming checkpoint, variable and block for a corrupt, missing or
  // wrongly sized block; NotFound for a variable not in the checkpoint.
  // For an increment's partial variable: its stored rows [stored_rows, ...],
  // with their indices in *rows (required then: InvalidArgument without).
  Result<Tensor> Read(const CheckpointInfo& info, const std::string& name,
                      std::vector<int64_t>* rows = nullptr);
  // Checks every block's checksum of one variable without keeping its
  // value; errors as Read.
  Status CheckVariable(const CheckpointInfo& info, const std::string& name);
  // Reads a whole variable (not an increment's rows) into *dest, which must
  // have its dtype and shape (InvalidArgument otherwise); errors as Read,
  // *dest partly written then.
  Status ReadInto(const CheckpointInfo& info, const std::string& name, Tensor* dest);
  // The manifests from the full base up to checkpoint id, in order; DataLoss
  // naming the increment whose ancestor is missing or corrupt.
  Result<std::vector<CheckpointInfo>> Chain(int64_t id);
  // Every variable of checkpoint id, an increment composed over its chain
  // (base, then each increment in order, every checksum checked); the first
  // error as for Manifest/Read/Chain.
  Result<std::map<std::string, Tensor>> ReadAll(int64_t id);
  // Checks the manifest and every block's checksum of checkpoint id.
  Status Verify(int64_t id);
  // The newest committed checkpoint (at most max_id when >= 0) whose every
  // block reads back; skipped ones' errors go to *skipped when given.
  // NotFound when none is readable.
  Result<int64_t> LatestReadable(int64_t max_id = -1, std::vector<Status>* skipped = nullptr);

 private:
  // "checkpoint N, variable 'x', shard k" for errors.
  static std::string What(const CheckpointInfo& info, const CheckpointVariable& v);
  // The blocks of v into base (null: checksums checked only), by two threads
  // from 64 MiB; errors as Read.
  Status ReadBlocks(const CheckpointInfo& info, const CheckpointVariable& v, char* base);
  KvStore* store_;
};

// Deletes checkpoint id (the manifest first, so it is never half-visible).
// Unavailable on a store failure.
Status DeleteCheckpoint(KvStore* store, int64_t id);

// Keeps the newest keep_last committed checkpoints (and every ancestor an
// increment among them needs) and deletes older ones; also removes
// uncommitted checkpoints older than the newest committed one.
// Returns the ids deleted.
Result<std::vector<int64_t>> RetainCheckpoints(KvStore* store, int keep_last);

// Folds checkpoint id (an increment chain or a full one) into a new full
// checkpoint with the same global step and tables; returns its id. The old
// chain stays until retention deletes it. Errors as for ReadAll.
Result<int64_t> CompactCheckpoint(KvStore* store, int64_t id, int64_t block_bytes = 4 << 20);

}  // namespace sf
