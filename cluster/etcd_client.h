// EtcdClient: shardflow's route to etcd 3.4, the cluster's authority for
// membership and placement (docs/DESIGN.md, "The cluster"). It speaks etcd's
// v3 JSON gateway (POST /v3/kv/range and the rest, keys and values in
// base64) over HTTP/1.1 on mutual TLS (kj-http on kj-tls): the client shows a
// cluster credential (net::LoadCredential) and accepts only a server that the
// cluster CA signed for net::kEtcdHostName.
//
//   auto cred = net::LoadCredential(tls_dir, "node");
//   EtcdClientOptions o;
//   o.endpoints = "127.0.0.1:2379";
//   o.credential = *cred;
//   auto etcd = EtcdClient::Create(o);
//   auto lease = (*etcd)->GrantLease(5);
//   (*etcd)->Put("/sf/nodes/a", "10.0.0.1:7000", lease->id);
//   auto ka = (*etcd)->KeepAlive(*lease, [](const Status& why) { /* this node is gone */ });
//   auto w = (*etcd)->Watch("/sf/nodes/", 0, [](const std::vector<EtcdWatchEvent>& evs) { ... });
//
// Every method blocks until etcd answers or options.request_timeout passes,
// and names the endpoint and the operation when it fails: Unavailable when
// no endpoint can be reached (the next endpoint of the list is tried when a
// connection fails), DeadlineExceeded when etcd does not answer in time,
// PermissionDenied when the TLS handshake fails (a server the CA did not sign
// for server_name), and etcd's own errors mapped to the nearest code
// (NotFound for an ended lease). etcd refusing this client's certificate
// shows as Unavailable saying so (over TLS 1.3 a server refuses a client
// certificate by hanging up after the handshake). A malformed or oversized
// reply is an error naming the operation, never a crash.
//
// Bounds (etcd is a peer too): a reply body is read up to
// max_response_bytes; a watch holds at most one of etcd's responses (it
// reads the next only after its callback returned), so a slow callback slows
// its stream instead of growing memory.
//
// Thread-safety: every method may be called from any thread at once. One
// I/O thread per client runs the connections; callbacks (watch events, a
// lost lease) run on the watch's or the keepalive's own thread, never on the
// I/O thread, so they may call the client and a slow one stalls nothing else.
// Watches and keepalives share the client's connections and may outlive
// it; destroying the client stops them silently.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/etcd_types.h"
#include "net/credentials.h"
#include "shardflow/status.h"

namespace sf {
namespace cluster {

class EtcdTransport;

struct EtcdClientOptions {
  // "host:port[,host:port...]": the members' client addresses (no scheme). Required.
  std::string endpoints;
  // The client's identity for mutual TLS and the CA it trusts. Required
  // unless plaintext_for_tests.
  std::optional<net::Credential> credential;
  // The etcd user it logs in as when etcd's authentication is on, and its
  // password. Default (empty): the credential's (cluster/etcd_identity.h),
  // filled by Create.
  std::string user;
  std::string password;
  // The DNS name etcd's certificate must carry. Default net::kEtcdHostName.
  std::string server_name = net::kEtcdHostName;
  // Plain HTTP, no TLS: only for tests that play a fake etcd. Default false.
  bool plaintext_for_tests = false;
  // The most one call may take, connecting included. Default 5 s.
  std::chrono::milliseconds request_timeout{5000};
  // The wait before a watch reconnects or a failed keepalive is retried. Default 100 ms.
  std::chrono::milliseconds retry_interval{100};
  // The largest reply body (or one watch response) read from etcd. Default 64 MiB.
  size_t max_response_bytes = size_t{64} << 20;
};

// Receives a watch's events, one etcd response at a time (all the events of
// one revision arrive together), in revision order, on the watch's thread.
using EtcdWatchCallback = std::function<void(const std::vector<EtcdWatchEvent>& events)>;

// A running watch (EtcdClient::Watch). Destroying it cancels the watch and
// waits for a callback in progress to return, unless it is destroyed from
// that callback. Thread-safety: its methods may be called from any thread.
class EtcdWatch {
 public:
  struct State;
  // Made by EtcdClient::Watch and WatchKey, over the state its thread shares.
  explicit EtcdWatch(std::shared_ptr<State> state);
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;
  // The revision of the next event it waits for (it has delivered all before it).
  int64_t next_revision() const;
  // Whether it ended with an error event (compaction, a refused watch); it then delivers nothing more.
  bool ended() const;

 private:
  std::shared_ptr<State> state_;
};

// A lease kept alive in the background (EtcdClient::KeepAlive). Destroying
// it stops the refreshes (the lease then ends after its TTL; revoke it to end
// it at once) and waits for an on_lost in progress unless called from it.
// Thread-safety: its methods may be called from any thread.
class EtcdKeepAlive {
 public:
  struct State;
  // Made by EtcdClient::KeepAlive, over the state its thread shares.
  explicit EtcdKeepAlive(std::shared_ptr<State> state);
  ~EtcdKeepAlive();
  EtcdKeepAlive(const EtcdKeepAlive&) = delete;
  EtcdKeepAlive& operator=(const EtcdKeepAlive&) = delete;
  // Whether on_lost was called: the lease is gone (or may be) and keys under it with it.
  bool lost() const;
  // The lease it refreshes.
  const EtcdLease& lease() const;

 private:
  std::shared_ptr<State> state_;
};

class EtcdClient;
// A client of etcd at endpoints ("host:port[,...]") with credential for
// mutual TLS (none: plaintext, for insecure clusters), each call bounded by
// timeout_ms; EtcdClient::Create's errors.
Result<std::unique_ptr<EtcdClient>> ConnectEtcd(const std::string& endpoints,
                                                const std::optional<net::Credential>& credential, int timeout_ms);

class EtcdClient {
 public:
  // Starts the client's I/O thread (it connects on the first call).
  // InvalidArgument for empty or malformed endpoints, a missing credential
  // without plaintext_for_tests, or PEM texts OpenSSL refuses.
  static Result<std::unique_ptr<EtcdClient>> Create(EtcdClientOptions options);
  // Closes the connections; its watches and keepalives stop without calling back.
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // key's value and revisions, or nullopt when it does not exist; the call's error otherwise.
  Result<std::optional<EtcdKeyValue>> Get(const std::string& key);
  // Every key under prefix, sorted by key, with the revision read at; the call's error otherwise.
  Result<EtcdRangeResult> Range(const std::string& prefix);
  // Writes key = value (attached to lease unless 0); the revision it made, or
  // the call's error (NotFound when the lease has ended).
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // Deletes key; how many keys it deleted (0 or 1), or the call's error.
  Result<int64_t> Delete(const std::string& key);
  // Deletes every key under prefix; how many it deleted, or the call's error.
  Result<int64_t> DeletePrefix(const std::string& prefix);
  // Runs success when every compare holds, else failure, atomically; what
  // it did (a failed compare is succeeded = false, not an error), or the
  // call's error. Never sent twice, so an Unavailable after the request
  // left (the connection broke) leaves open whether it ran: re-read before retrying.
  Result<EtcdTxnResult> Txn(const std::vector<EtcdCompare>& compares, const std::vector<EtcdOp>& success,
                            const std::vector<EtcdOp>& failure);
  // Grants a lease of ttl_seconds; its id and granted TTL, or the call's
  // error (InvalidArgument for a TTL etcd refuses).
  Result<EtcdLease> GrantLease(int64_t ttl_seconds);
  // Ends lease id now, deleting its keys; NotFound when it already ended, or the call's error.
  Status RevokeLease(int64_t id);
  // The seconds lease id has left (-1 when it has ended), or the call's error.
  Result<int64_t> LeaseTimeToLive(int64_t id);
  // Refreshes lease every ttl/3 on a thread of its own until the handle is
  // destroyed. on_lost runs once, on that thread, with why, when etcd says
  // the lease ended (expired or revoked) or no refresh succeeded for a whole
  // TTL (etcd unreachable or stopped). InvalidArgument for a lease without
  // id or TTL; never fails otherwise (errors go to on_lost).
  Result<std::unique_ptr<EtcdKeepAlive>> KeepAlive(const EtcdLease& lease, std::function<void(const Status&)> on_lost);
  // Watches every key under prefix from start_revision (0: from now) and
  // returns once etcd confirmed it: on_events then gets every later put and
  // delete exactly once, in revision order, on the watch's thread. When the
  // stream or etcd drops it reconnects every retry_interval and resumes after
  // the last revision delivered. When etcd compacted past that revision (or
  // refuses the watch) it delivers one kError event and ends. The call's
  // error when etcd cannot confirm the watch in time.
  Result<std::unique_ptr<EtcdWatch>> Watch(const std::string& prefix, int64_t start_revision,
                                           EtcdWatchCallback on_events);
  // The same for exactly one key.
  Result<std::unique_ptr<EtcdWatch>> WatchKey(const std::string& key, int64_t start_revision,
                                              EtcdWatchCallback on_events);
  // OK when etcd answers /health with a leader; Unavailable naming why not.
  Status Health();

  // The endpoints it was given, as given.
  const std::string& endpoints() const { return options_.endpoints; }
  // The options it was made with.
  const EtcdClientOptions& options() const { return options_; }
  // For the election and the other parts of cluster/ that make their own requests.
  const std::shared_ptr<EtcdTransport>& transport() const { return transport_; }

 private:
  EtcdClient(EtcdClientOptions options, std::shared_ptr<EtcdTransport> transport);
  Result<std::unique_ptr<EtcdWatch>> StartWatch(const std::string& key, bool prefix, int64_t start_revision,
                                                EtcdWatchCallback on_events);

  const EtcdClientOptions options_;
  std::shared_ptr<EtcdTransport> transport_;
};

}  // namespace cluster
}  // namespace sf
