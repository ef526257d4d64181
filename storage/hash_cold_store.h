// The cold tier of hash embedding tables: the rows a shard's RAM budget
// leaves out (kernels/hash_embedding.h, HashColdStore), in a KvStore: RocksDB
// for sessions, an in-memory store for tests. Each shard has its own
// database, <cold_dir>/<table>/part_<k> (the table's '/' become '.'). It is a
// cache of the live table: a session empties it when it initialises or
// restores the shard, and checkpoints, not it, keep a table durable.
//
// Thread-safety: one shard actor calls each store.
#pragma once

#include <memory>
#include <string>

#include "kernels/hash_embedding.h"
#include "storage/kv_store.h"

namespace sf {

// A cold store over kv; `where` names it in errors.
std::unique_ptr<HashColdStore> NewKvHashColdStore(std::unique_ptr<KvStore> kv, std::string where);

// Opens (creating) the RocksDB cold store of shard `shard` of `table` under
// cold_dir; Unavailable naming the directory when it cannot be opened.
Result<std::unique_ptr<HashColdStore>> OpenHashColdStore(const std::string& cold_dir, const std::string& table,
                                                         int64_t shard);

}  // namespace sf
