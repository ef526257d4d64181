// KvStore: the small key-value interface checkpoints are written through, with
// an in-memory implementation for tests and a RocksDB one for real runs.
//
// Thread-safety: both implementations are safe to call from many threads.
#pragma once

#include <functional>
#include <memory>
#include <string>
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
  virtual Status Scan(const std::string& prefix,
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
  // The keys (not values) starting with prefix, in order.
  Result<std::vector<std::string>> Keys(const std::string& prefix);
};

// A fresh, empty store kept in memory.
std::unique_ptr<KvStore> NewInMemoryKvStore();

// Opens (creating it when create_if_missing) the RocksDB database in
// directory path. Unavailable naming the path when it cannot be opened.
Result<std::unique_ptr<KvStore>> OpenRocksDb(const std::string& path, bool create_if_missing = true);

}  // namespace sf
