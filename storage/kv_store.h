// KvStore: the small key-value interface checkpoints are written through, with
// an in-memory implementation for tests and a RocksDB one for real runs.
//
// Thread-safety: both implementations are safe to call from many threads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardflow/status.h"

namespace sf {

// Puts and deletes applied together (atomically in both implementations).
struct KvBatch {
  std::vector<std::pair<std::string, std::string>> puts;
  std::vector<std::string> deletes;
  void Put(std::string key, std::string value) { puts.emplace_back(std::move(key), std::move(value)); }
  void Delete(std::string key) { deletes.push_back(std::move(key)); }
};

// Streams many new keys into a store, in strictly ascending key order. They
// are durable (and visible) at the latest when Finish returns; after a crash
// before that, any subset of them may be present. For RocksDB this writes the
// bytes once, as one table file ingested at Finish, instead of to the
// write-ahead log, the memtable and then table files (and compactions).
// Thread-safety: one thread at a time.
class KvBulkWriter {
 public:
  virtual ~KvBulkWriter() = default;
  // Adds key -> value. InvalidArgument naming the key when it does not sort
  // after the previous one; Unavailable on a write failure.
  virtual Status Put(const std::string& key, std::string_view value) = 0;
  // Makes every Put durable and visible; a writer is finished at most once
  // (FailedPrecondition after that). Unavailable on failure.
  virtual Status Finish() = 0;
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  // Applies the batch; with sync the write is durable when this returns.
  // Unavailable (with the store's error) on failure.
  virtual Status Write(const KvBatch& batch, bool sync) = 0;
  // The value under key; NotFound naming the key when absent.
  virtual Result<std::string> Get(const std::string& key) = 0;
  // Calls fn(key, value) in key order for every key starting with prefix,
  // until fn returns false. Unavailable on a read failure.
  Status Scan(const std::string& prefix, const std::function<bool(const std::string&, const std::string&)>& fn) {
    return ScanFrom(prefix, prefix, fn);
  }
  // Scan, starting at the first key >= from (a sweep resuming where it
  // stopped). Unavailable on a read failure.
  virtual Status ScanFrom(const std::string& prefix, const std::string& from,
                          const std::function<bool(const std::string&, const std::string&)>& fn) = 0;
  // Removes key (absent keys are fine); Unavailable on failure.
  virtual Status Delete(const std::string& key, bool sync = false) {
    KvBatch b;
    b.Delete(key);
    return Write(b, sync);
  }
  // Stores one value; Unavailable on failure.
  Status Put(const std::string& key, const std::string& value, bool sync = false) {
    KvBatch b;
    b.Put(key, value);
    return Write(b, sync);
  }
  // Removes every key starting with prefix (not synced); Unavailable on
  // failure. The base implementation scans the keys and deletes them.
  virtual Status DeletePrefix(const std::string& prefix);
  // A writer for bulk data (see KvBulkWriter); the base implementation
  // applies Puts in unsynced batches of about 64 MiB. Unavailable on failure.
  virtual Result<std::unique_ptr<KvBulkWriter>> NewBulkWriter();
  // Finishes every writer (each made by this store's NewBulkWriter) together:
  // for RocksDB their table files are ingested in one step, one sync of its
  // own MANIFEST for all of them instead of one per file (the fixed cost of
  // a small checkpoint). The base implementation finishes them one by one.
  // Unavailable on failure (some of the writers' keys may be visible then).
  virtual Status FinishBulk(std::vector<std::unique_ptr<KvBulkWriter>>* writers);
  // Calls fn with the value under key, valid only during the call: for
  // RocksDB pinned where it lies in the store's cache, else read into
  // *scratch, whose capacity is reused, so a reader of many multi-MiB values
  // does not page-fault a fresh buffer for each. NotFound naming the key when
  // absent, Unavailable on a read failure, else fn's status.
  virtual Status ReadValue(const std::string& key, std::string* scratch,
                           const std::function<Status(std::string_view)>& fn);
  // The keys (not values) starting with prefix, in order.
  Result<std::vector<std::string>> Keys(const std::string& prefix);
  // Reads many keys at once: (*found)[i] says whether keys[i] is present and
  // (*values)[i] holds its value then. Unavailable on a read failure. The
  // base implementation calls Get per key; RocksDB batches them (MultiGet).
  virtual Status MultiGet(const std::vector<std::string>& keys, std::vector<std::string>* values,
                          std::vector<bool>* found);
  // About how many bytes the store holds on disk (0 in memory).
  virtual int64_t DiskBytes() { return 0; }
  // Calls fn(key, value) for up to max_keys keys starting with prefix, from
  // where *cursor points ("" : the start), and moves *cursor past them (to ""
  // after the last). Called again and again it visits every key, but not in
  // one order, and a value may be stale: RocksDB reads its table files one by
  // one, not the memtables a scan must sort first (a cache's hashed ones),
  // so keys written since the last flush wait for the next and a key newer
  // elsewhere shows its older value too; a caller checks what it finds with
  // MultiGet. The base implementation scans in key order. Unavailable on a
  // read failure.
  virtual Status ScanSome(const std::string& prefix, std::string* cursor, int64_t max_keys,
                          const std::function<void(const std::string&, const std::string&)>& fn);
};

// A fresh, empty store kept in memory.
std::unique_ptr<KvStore> NewInMemoryKvStore();

// What a RocksDB database is for; OpenRocksDb tunes it to that.
enum class RocksDbUse {
  // Checkpoints: writes go through the write-ahead log; a big memtable is
  // flushed at close.
  kCheckpoints,
  // A cache whose contents need not outlive the process (the cold tier of
  // hash tables, storage/hash_cold_store.h): no write-ahead log (a crash or
  // a close may lose the memtable), no flush at close, a hashed memtable
  // (point reads and writes in about constant time, ordered scans cost a
  // sort of the memtable), Bloom filters and no compression in table files.
  kCache,
};

// Opens (creating it when create_if_missing) the RocksDB database in
// directory path, tuned for use. Unavailable naming the path when it cannot
// be opened.
Result<std::unique_ptr<KvStore>> OpenRocksDb(const std::string& path, bool create_if_missing = true,
                                             RocksDbUse use = RocksDbUse::kCheckpoints);

// Opens the checkpoint store in dir (RocksDbUse::kCheckpoints): created when
// create; otherwise NotFound when dir holds no store (and nothing is made
// there: RocksDB would make the directory, its LOCK and LOG), DataLoss naming
// dir when its files are damaged, InvalidArgument for an empty dir.
Result<std::unique_ptr<KvStore>> OpenCheckpointStore(const std::string& dir, bool create);

}  // namespace sf
