// The JSON of etcd 3.4's v3 gateway (grpc-gateway's proto3 JSON, field
// names as in rpc.proto): bytes fields are base64, int64 fields decimal
// strings ("revision":"12"), and a field with its zero value is left out (a
// put event has no "type", a lease that ended no "TTL"). Readers here accept
// a number where a string is expected and treat a missing field as zero;
// anything else malformed is DataLoss naming the field. Internal to cluster/.
// Thread-safety: free functions over values.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "cluster/etcd_types.h"
#include "shardflow/status.h"

namespace sf {
namespace cluster {

using Json = nlohmann::json;

// Standard base64 with padding, as the gateway writes bytes.
std::string Base64Encode(const std::string& bytes);
// The bytes of standard or URL-safe base64, padded or not; DataLoss for anything else.
Result<std::string> Base64Decode(const std::string& text);

// The range end that covers every key starting with prefix: prefix with its
// last byte below 0xff incremented, or "\0" (every key) when there is none.
std::string PrefixEnd(const std::string& prefix);

// obj[field] as an int64 (a decimal string or a number), 0 when absent;
// DataLoss naming field when it is neither.
Status ReadInt64(const Json& obj, const char* field, int64_t* out);
// obj[field] decoded from base64, "" when absent; DataLoss naming field otherwise.
Status ReadBytes(const Json& obj, const char* field, std::string* out);
// obj[field] as a bool, false when absent; DataLoss naming field otherwise.
Status ReadBool(const Json& obj, const char* field, bool* out);
// reply.header.revision; DataLoss when the header is malformed.
Status ReadRevision(const Json& reply, int64_t* out);

// One "kvs" entry (or a watch event's "kv"); DataLoss naming the bad field.
Result<EtcdKeyValue> ParseKeyValue(const Json& kv);
// A range reply (or a txn's "response_range"); DataLoss naming the bad field.
Result<EtcdRangeResult> ParseRange(const Json& reply);

// What a range request asks for, beyond one key or a prefix.
struct EtcdRangeSpec {
  std::string key;
  bool prefix = false;
  int64_t limit = 0;                // 0: no limit
  int64_t max_create_revision = 0;  // 0: no bound; else only keys created at or before it
  enum class Sort { kKey, kCreateAscending, kCreateDescending };
  Sort sort = Sort::kKey;
};

// The bodies of /v3/kv/range, /v3/kv/put and /v3/kv/deleterange.
Json RangeRequest(const EtcdRangeSpec& spec);
Json PutRequest(const std::string& key, const std::string& value, int64_t lease);
Json DeleteRequest(const std::string& key, bool prefix);
// One entry of a txn's "compare", "success" or "failure".
Json CompareJson(const EtcdCompare& c);
Json OpJson(const EtcdOp& op);

// etcd's error reply as a Status: the gRPC code in {"code":N,"message":..}
// (or a stream's {"error":{"grpc_code":N,"message":..}}) mapped to ours, or
// Unavailable quoting the start of a body that is not such an error.
Status GatewayError(int http_status, const std::string& body);
// A gRPC status code and message as ours (Unavailable, NotFound, ...).
Status StatusFromGrpc(int64_t code, const std::string& message);

}  // namespace cluster
}  // namespace sf
