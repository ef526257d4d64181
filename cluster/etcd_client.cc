// EtcdClient's unary calls: the key-value store, transactions and leases.
// (Watches: etcd_watch.cc; keepalives: etcd_lease.cc.)
#include "cluster/etcd_client.h"

#include "cluster/etcd_identity.h"

#include "cluster/etcd_json.h"
#include "cluster/etcd_transport.h"

namespace sf {
namespace cluster {

EtcdCompare EtcdCompare::Value(std::string key, Op op, std::string value) {
  EtcdCompare c;
  c.key = std::move(key);
  c.target = Target::kValue;
  c.op = op;
  c.value = std::move(value);
  return c;
}

namespace {

EtcdCompare NumberCompare(std::string key, EtcdCompare::Target target, EtcdCompare::Op op, int64_t n) {
  EtcdCompare c;
  c.key = std::move(key);
  c.target = target;
  c.op = op;
  c.number = n;
  return c;
}

EtcdOp MakeOp(EtcdOp::Kind kind, std::string key, bool prefix) {
  EtcdOp o;
  o.kind = kind;
  o.key = std::move(key);
  o.prefix = prefix;
  return o;
}

EtcdClock::time_point Deadline(const EtcdTransport& t) { return EtcdClock::now() + t.options().request_timeout; }

// A reply that parsed as JSON but not as etcd's message: name the operation.
Status BadReply(const std::string& op, const Status& s) { return s.WithPrefix("etcd: " + op + ": malformed reply"); }

}  // namespace

EtcdCompare EtcdCompare::Version(std::string key, Op op, int64_t n) {
  return NumberCompare(std::move(key), Target::kVersion, op, n);
}
EtcdCompare EtcdCompare::CreateRevision(std::string key, Op op, int64_t rev) {
  return NumberCompare(std::move(key), Target::kCreateRevision, op, rev);
}
EtcdCompare EtcdCompare::ModRevision(std::string key, Op op, int64_t rev) {
  return NumberCompare(std::move(key), Target::kModRevision, op, rev);
}

EtcdOp EtcdOp::Put(std::string key, std::string value, int64_t lease) {
  EtcdOp o = MakeOp(Kind::kPut, std::move(key), false);
  o.value = std::move(value);
  o.lease = lease;
  return o;
}
EtcdOp EtcdOp::Delete(std::string key) { return MakeOp(Kind::kDelete, std::move(key), false); }
EtcdOp EtcdOp::DeletePrefix(std::string prefix) { return MakeOp(Kind::kDelete, std::move(prefix), true); }
EtcdOp EtcdOp::Get(std::string key) { return MakeOp(Kind::kRange, std::move(key), false); }
EtcdOp EtcdOp::Range(std::string prefix) { return MakeOp(Kind::kRange, std::move(prefix), true); }

Result<EtcdRangeResult> EtcdRange(EtcdTransport& transport, const EtcdRangeSpec& spec, EtcdClock::time_point deadline) {
  SF_ASSIGN_OR_RETURN(Json reply, transport.Call("range", "/v3/kv/range", RangeRequest(spec), deadline));
  auto r = ParseRange(reply);
  if (!r.ok()) return BadReply("range", r.status());
  return r;
}

EtcdClient::EtcdClient(EtcdClientOptions options, std::shared_ptr<EtcdTransport> transport)
    : options_(std::move(options)), transport_(std::move(transport)) {}

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdClientOptions options) {
  if (options.credential && options.user.empty()) {
    // Who it is to etcd once etcd's authentication is on: its certificate's name.
    SF_ASSIGN_OR_RETURN(options.user, CertificateCommonName(options.credential->cert_pem));
    SF_ASSIGN_OR_RETURN(options.password, EtcdPassword(options.credential->key_pem));
  }
  SF_ASSIGN_OR_RETURN(std::shared_ptr<EtcdTransport> t, EtcdTransport::Create(options));
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options), std::move(t)));
}

EtcdClient::~EtcdClient() { transport_->Close(); }

Result<std::optional<EtcdKeyValue>> EtcdClient::Get(const std::string& key) {
  EtcdRangeSpec spec;
  spec.key = key;
  SF_ASSIGN_OR_RETURN(EtcdRangeResult r, EtcdRange(*transport_, spec, Deadline(*transport_)));
  if (r.kvs.empty()) return std::optional<EtcdKeyValue>();
  return std::optional<EtcdKeyValue>(std::move(r.kvs[0]));
}

Result<EtcdRangeResult> EtcdClient::Range(const std::string& prefix) {
  EtcdRangeSpec spec;
  spec.key = prefix;
  spec.prefix = true;
  return EtcdRange(*transport_, spec, Deadline(*transport_));
}

Result<int64_t> EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  SF_ASSIGN_OR_RETURN(Json reply, transport_->Call("put", "/v3/kv/put", PutRequest(key, value, lease),
                                                   Deadline(*transport_)));
  int64_t revision = 0;
  Status s = ReadRevision(reply, &revision);
  if (!s.ok()) return BadReply("put", s);
  return revision;
}

namespace {

Result<int64_t> DeleteRange(EtcdTransport& t, const std::string& key, bool prefix) {
  SF_ASSIGN_OR_RETURN(Json reply, t.Call("delete", "/v3/kv/deleterange", DeleteRequest(key, prefix), Deadline(t)));
  int64_t deleted = 0;
  Status s = ReadInt64(reply, "deleted", &deleted);
  if (!s.ok()) return BadReply("delete", s);
  return deleted;
}

}  // namespace

Result<int64_t> EtcdClient::Delete(const std::string& key) { return DeleteRange(*transport_, key, false); }

Result<int64_t> EtcdClient::DeletePrefix(const std::string& prefix) { return DeleteRange(*transport_, prefix, true); }

Result<EtcdTxnResult> EtcdClient::Txn(const std::vector<EtcdCompare>& compares, const std::vector<EtcdOp>& success,
                                      const std::vector<EtcdOp>& failure) {
  Json request = {{"compare", Json::array()}, {"success", Json::array()}, {"failure", Json::array()}};
  for (const auto& c : compares) request["compare"].push_back(CompareJson(c));
  for (const auto& o : success) request["success"].push_back(OpJson(o));
  for (const auto& o : failure) request["failure"].push_back(OpJson(o));
  SF_ASSIGN_OR_RETURN(Json reply,
                      transport_->Call("txn", "/v3/kv/txn", request, Deadline(*transport_), /*idempotent=*/false));
  EtcdTxnResult out;
  Status s = ReadBool(reply, "succeeded", &out.succeeded);
  if (s.ok()) s = ReadRevision(reply, &out.revision);
  if (!s.ok()) return BadReply("txn", s);
  auto responses = reply.find("responses");
  if (responses == reply.end() || responses->is_null()) return out;
  if (!responses->is_array()) return BadReply("txn", DataLoss("field 'responses' is not an array"));
  for (const Json& r : *responses) {
    if (!r.is_object()) return BadReply("txn", DataLoss("a response is not an object"));
    auto range = r.find("response_range");
    if (range == r.end()) continue;
    auto parsed = ParseRange(*range);
    if (!parsed.ok()) return BadReply("txn", parsed.status());
    out.ranges.push_back(std::move(*parsed));
  }
  return out;
}

Result<EtcdLease> EtcdClient::GrantLease(int64_t ttl_seconds) {
  if (ttl_seconds <= 0) return InvalidArgument("etcd: lease grant: the TTL must be positive, not " +
                                               std::to_string(ttl_seconds));
  SF_ASSIGN_OR_RETURN(Json reply, transport_->Call("lease grant", "/v3/lease/grant",
                                                   {{"TTL", std::to_string(ttl_seconds)}}, Deadline(*transport_),
                                                   /*idempotent=*/false));
  EtcdLease lease;
  Status s = ReadInt64(reply, "ID", &lease.id);
  if (s.ok()) s = ReadInt64(reply, "TTL", &lease.ttl_seconds);
  if (!s.ok()) return BadReply("lease grant", s);
  auto error = reply.find("error");
  if (error != reply.end() && error->is_string() && !error->get<std::string>().empty())
    return FailedPrecondition("etcd: lease grant: " + error->get<std::string>());
  if (lease.id == 0 || lease.ttl_seconds <= 0) return BadReply("lease grant", DataLoss("no lease ID or TTL"));
  return lease;
}

Status EtcdClient::RevokeLease(int64_t id) {
  return transport_->Call("lease revoke", "/v3/lease/revoke", {{"ID", std::to_string(id)}}, Deadline(*transport_))
      .status();
}

Result<int64_t> EtcdClient::LeaseTimeToLive(int64_t id) {
  SF_ASSIGN_OR_RETURN(Json reply, transport_->Call("lease timetolive", "/v3/lease/timetolive",
                                                   {{"ID", std::to_string(id)}}, Deadline(*transport_)));
  int64_t ttl = 0;
  Status s = ReadInt64(reply, "TTL", &ttl);
  if (!s.ok()) return BadReply("lease timetolive", s);
  return ttl;
}

Status EtcdClient::Health() {
  SF_ASSIGN_OR_RETURN(Json reply, transport_->Call("health", "/health", Json(), Deadline(*transport_)));
  auto health = reply.find("health");
  if (health != reply.end() && health->is_string() && health->get<std::string>() == "true") return Status::OK();
  return Unavailable("etcd: health: etcd reports itself unhealthy: " + reply.dump().substr(0, 200));
}

Result<std::unique_ptr<EtcdClient>> ConnectEtcd(const std::string& endpoints,
                                                const std::optional<net::Credential>& credential, int timeout_ms) {
  EtcdClientOptions eo;
  eo.endpoints = endpoints;
  eo.credential = credential;
  eo.plaintext_for_tests = !credential.has_value();
  eo.request_timeout = std::chrono::milliseconds(std::max(100, timeout_ms));
  return EtcdClient::Create(std::move(eo));
}

}  // namespace cluster
}  // namespace sf
