// The gateway's JSON: base64, int64-as-string, and etcd's messages.
#include "cluster/etcd_json.h"

#include <cerrno>
#include <cstdlib>

namespace sf {
namespace cluster {

namespace {

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

// The start of a text for an error message: a peer's garbage may be megabytes.
std::string Quote(const std::string& text) {
  constexpr size_t kMax = 120;
  std::string out;
  for (char c : text.substr(0, kMax)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > kMax) out += "...";
  return "'" + out + "'";
}

const char* CompareResult(EtcdCompare::Op op) {
  switch (op) {
    case EtcdCompare::Op::kEqual: return "EQUAL";
    case EtcdCompare::Op::kNotEqual: return "NOT_EQUAL";
    case EtcdCompare::Op::kLess: return "LESS";
    case EtcdCompare::Op::kGreater: return "GREATER";
  }
  return "EQUAL";
}

}  // namespace

std::string Base64Encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += kBase64[v & 63];
  }
  if (i < bytes.size()) {
    const bool two = i + 1 < bytes.size();
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (two ? uint8_t(bytes[i + 1]) << 8 : 0);
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += two ? kBase64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> Base64Decode(const std::string& text) {
  size_t n = text.size();
  while (n > 0 && text[n - 1] == '=') --n;
  if (text.size() - n > 2 || n % 4 == 1) return DataLoss("malformed base64 " + Quote(text));
  std::string out;
  out.reserve(n * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const int v = Base64Value(text[i]);
    if (v < 0) return DataLoss("malformed base64 " + Quote(text));
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (uint8_t(end.back()) < 0xff) {
      end.back() = char(uint8_t(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

Status ReadInt64(const Json& obj, const char* field, int64_t* out) {
  *out = 0;
  if (!obj.is_object()) return DataLoss(std::string("expected an object holding '") + field + "'");
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return Status::OK();
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
    return Status::OK();
  }
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && errno == 0 && end == s.c_str() + s.size()) {
      *out = v;
      return Status::OK();
    }
  }
  return DataLoss(std::string("field '") + field + "' is not an int64: " + Quote(it->dump()));
}

Status ReadBytes(const Json& obj, const char* field, std::string* out) {
  out->clear();
  if (!obj.is_object()) return DataLoss(std::string("expected an object holding '") + field + "'");
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return Status::OK();
  if (!it->is_string()) return DataLoss(std::string("field '") + field + "' is not base64 text");
  auto bytes = Base64Decode(it->get_ref<const std::string&>());
  if (!bytes.ok()) return bytes.status().WithPrefix(std::string("field '") + field + "'");
  *out = std::move(*bytes);
  return Status::OK();
}

Status ReadBool(const Json& obj, const char* field, bool* out) {
  *out = false;
  if (!obj.is_object()) return DataLoss(std::string("expected an object holding '") + field + "'");
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return Status::OK();
  if (!it->is_boolean()) return DataLoss(std::string("field '") + field + "' is not a bool");
  *out = it->get<bool>();
  return Status::OK();
}

Status ReadRevision(const Json& reply, int64_t* out) {
  *out = 0;
  if (!reply.is_object()) return DataLoss("the reply is not a JSON object");
  auto it = reply.find("header");
  if (it == reply.end()) return Status::OK();
  return ReadInt64(*it, "revision", out).WithPrefix("header");
}

Result<EtcdKeyValue> ParseKeyValue(const Json& kv) {
  EtcdKeyValue out;
  SF_RETURN_IF_ERROR(ReadBytes(kv, "key", &out.key));
  SF_RETURN_IF_ERROR(ReadBytes(kv, "value", &out.value));
  SF_RETURN_IF_ERROR(ReadInt64(kv, "create_revision", &out.create_revision));
  SF_RETURN_IF_ERROR(ReadInt64(kv, "mod_revision", &out.mod_revision));
  SF_RETURN_IF_ERROR(ReadInt64(kv, "version", &out.version));
  SF_RETURN_IF_ERROR(ReadInt64(kv, "lease", &out.lease));
  return out;
}

Result<EtcdRangeResult> ParseRange(const Json& reply) {
  EtcdRangeResult out;
  SF_RETURN_IF_ERROR(ReadRevision(reply, &out.revision));
  SF_RETURN_IF_ERROR(ReadBool(reply, "more", &out.more));
  auto it = reply.find("kvs");
  if (it == reply.end() || it->is_null()) return out;
  if (!it->is_array()) return DataLoss("field 'kvs' is not an array");
  out.kvs.reserve(it->size());
  for (const Json& kv : *it) {
    auto parsed = ParseKeyValue(kv);
    if (!parsed.ok()) return parsed.status().WithPrefix("kvs");
    out.kvs.push_back(std::move(*parsed));
  }
  return out;
}

Json RangeRequest(const EtcdRangeSpec& spec) {
  Json j = {{"key", Base64Encode(spec.key)}};
  if (spec.prefix) j["range_end"] = Base64Encode(PrefixEnd(spec.key));
  if (spec.limit > 0) j["limit"] = std::to_string(spec.limit);
  if (spec.max_create_revision > 0) j["max_create_revision"] = std::to_string(spec.max_create_revision);
  if (spec.sort != EtcdRangeSpec::Sort::kKey) {
    j["sort_target"] = "CREATE";
    j["sort_order"] = spec.sort == EtcdRangeSpec::Sort::kCreateAscending ? "ASCEND" : "DESCEND";
  }
  return j;
}

Json PutRequest(const std::string& key, const std::string& value, int64_t lease) {
  Json j = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) j["lease"] = std::to_string(lease);
  return j;
}

Json DeleteRequest(const std::string& key, bool prefix) {
  Json j = {{"key", Base64Encode(key)}};
  if (prefix) j["range_end"] = Base64Encode(PrefixEnd(key));
  return j;
}

Json CompareJson(const EtcdCompare& c) {
  Json j = {{"key", Base64Encode(c.key)}, {"result", CompareResult(c.op)}};
  // The value is always written, zero included: it is a oneof, so the
  // gateway keeps an explicit 0 ("create_revision":"0" = the key is absent).
  switch (c.target) {
    case EtcdCompare::Target::kValue:
      j["target"] = "VALUE";
      j["value"] = Base64Encode(c.value);
      break;
    case EtcdCompare::Target::kVersion:
      j["target"] = "VERSION";
      j["version"] = std::to_string(c.number);
      break;
    case EtcdCompare::Target::kCreateRevision:
      j["target"] = "CREATE";
      j["create_revision"] = std::to_string(c.number);
      break;
    case EtcdCompare::Target::kModRevision:
      j["target"] = "MOD";
      j["mod_revision"] = std::to_string(c.number);
      break;
  }
  return j;
}

Json OpJson(const EtcdOp& op) {
  switch (op.kind) {
    case EtcdOp::Kind::kPut: return {{"request_put", PutRequest(op.key, op.value, op.lease)}};
    case EtcdOp::Kind::kDelete: return {{"request_delete_range", DeleteRequest(op.key, op.prefix)}};
    case EtcdOp::Kind::kRange: {
      EtcdRangeSpec spec;
      spec.key = op.key;
      spec.prefix = op.prefix;
      return {{"request_range", RangeRequest(spec)}};
    }
  }
  return Json::object();
}

Status StatusFromGrpc(int64_t code, const std::string& message) {
  switch (code) {
    case 1: return Aborted(message);             // CANCELLED
    case 3: return InvalidArgument(message);     // INVALID_ARGUMENT
    case 4: return DeadlineExceeded(message);    // DEADLINE_EXCEEDED
    case 5: return NotFound(message);            // NOT_FOUND (an ended lease)
    case 6: return FailedPrecondition(message);  // ALREADY_EXISTS
    case 7: return PermissionDenied(message);    // PERMISSION_DENIED
    case 8: return ResourceExhausted(message);   // RESOURCE_EXHAUSTED (request too large)
    case 9: return FailedPrecondition(message);  // FAILED_PRECONDITION
    case 10: return Aborted(message);            // ABORTED
    case 11: return OutOfRange(message);         // OUT_OF_RANGE (a compacted revision)
    case 12: return Unimplemented(message);      // UNIMPLEMENTED
    case 13: return Internal(message);           // INTERNAL
    case 15: return DataLoss(message);           // DATA_LOSS
    case 16: return PermissionDenied(message);   // UNAUTHENTICATED
    default: return Unavailable(message);        // UNAVAILABLE, UNKNOWN (no leader, stopping)
  }
}

Status GatewayError(int http_status, const std::string& body) {
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    // A unary reply: {"error":"..","message":"..","code":N}; a stream's:
    // {"error":{"grpc_code":N,"http_code":..,"message":".."}}.
    const Json* e = &j;
    auto inner = j.find("error");
    if (inner != j.end() && inner->is_object()) e = &*inner;
    int64_t code = 0;
    const char* code_field = e == &j ? "code" : "grpc_code";
    auto m = e->find("message");
    if (ReadInt64(*e, code_field, &code).ok() && code != 0 && m != e->end() && m->is_string())
      return StatusFromGrpc(code, m->get<std::string>() + " (HTTP " + std::to_string(http_status) + ")");
  }
  return Unavailable("HTTP " + std::to_string(http_status) + " with " + Quote(body));
}

}  // namespace cluster
}  // namespace sf
