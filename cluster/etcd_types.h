// The values EtcdClient reads and writes: keys with their revisions, the
// compares and operations of a transaction, leases and watch events. etcd's
// own names (docs: etcd.io/docs/v3.4/learning/api): a revision is the
// store's counter, bumped once per write transaction; a key's
// create_revision and mod_revision are the revisions of its creation and of
// its last change; version counts its changes since creation.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardflow/status.h"

namespace sf {
namespace cluster {

// One key as etcd stores it. Keys and values are bytes (any std::string).
struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;  // 0: the key holds no lease
};

// The keys a range read found, and the store's revision it read at.
struct EtcdRangeResult {
  std::vector<EtcdKeyValue> kvs;
  int64_t revision = 0;
  bool more = false;  // a limit cut the answer short
};

// One comparison of a transaction: key's target compared with a value.
// A key that does not exist has version, create_revision and mod_revision 0.
struct EtcdCompare {
  enum class Target { kValue, kVersion, kCreateRevision, kModRevision };
  enum class Op { kEqual, kNotEqual, kLess, kGreater };
  std::string key;
  Target target = Target::kModRevision;
  Op op = Op::kEqual;
  std::string value;   // for kValue
  int64_t number = 0;  // for the others

  // key's value op value.
  static EtcdCompare Value(std::string key, Op op, std::string value);
  // key's version op n.
  static EtcdCompare Version(std::string key, Op op, int64_t n);
  // key's create_revision op rev (== 0: the key does not exist).
  static EtcdCompare CreateRevision(std::string key, Op op, int64_t rev);
  // key's mod_revision op rev: the shard map's epoch check.
  static EtcdCompare ModRevision(std::string key, Op op, int64_t rev);
};

// One operation of a transaction's branch.
struct EtcdOp {
  enum class Kind { kPut, kDelete, kRange };
  Kind kind = Kind::kRange;
  std::string key;
  bool prefix = false;  // every key starting with key (delete and range)
  std::string value;    // put
  int64_t lease = 0;    // put

  // Writes key = value, attached to lease when it is not 0.
  static EtcdOp Put(std::string key, std::string value, int64_t lease = 0);
  // Deletes key.
  static EtcdOp Delete(std::string key);
  // Deletes every key under prefix.
  static EtcdOp DeletePrefix(std::string prefix);
  // Reads key.
  static EtcdOp Get(std::string key);
  // Reads every key under prefix.
  static EtcdOp Range(std::string prefix);
};

// What a transaction did. A compare that failed is not an error: succeeded
// is false and the failure branch ran.
struct EtcdTxnResult {
  bool succeeded = false;
  int64_t revision = 0;                 // the store's revision after it
  std::vector<EtcdRangeResult> ranges;  // one per range op of the branch that ran, in order
};

// A lease: keys attached to it are deleted when it ends (TTL without a refresh, or revoked).
struct EtcdLease {
  int64_t id = 0;
  int64_t ttl_seconds = 0;  // what etcd granted (it may raise a request below its minimum)
};

// One change a watch saw, or the error that ended it.
struct EtcdWatchEvent {
  enum class Type { kPut, kDelete, kError };
  Type type = Type::kPut;
  EtcdKeyValue kv;  // a delete carries only key and mod_revision (the deletion's revision)
  // kError: why the watch ended. OutOfRange when etcd compacted past the
  // revision it had to resume from (compact_revision says where to re-read).
  Status error;
  int64_t compact_revision = 0;
};

}  // namespace cluster
}  // namespace sf
