// EtcdTransport: the HTTP/1.1 connections of one EtcdClient to etcd's JSON
// gateway, on one kj event-loop thread of its own. Internal to cluster/.
//
// Other threads hand it requests through the loop's kj::Executor and block
// until the reply or their deadline. Connections are TLS (kj-tls, the server
// checked against options.server_name and the credential's CA) and are kept
// for the next request once a reply was read to its end. A request that
// fails on such a kept connection before any reply is sent once more on a
// new one, since a kept connection that etcd closed (it restarted) fails
// that way; when it may have reached etcd, only if it is idempotent. A
// connection that cannot be opened moves on to the next endpoint.
// Thread-safety: every method may be called from any thread but the loop's.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/etcd_client.h"
#include "cluster/etcd_json.h"
#include "shardflow/status.h"

namespace sf {
namespace cluster {

// Joins t, or detaches it when called on t itself (from a callback the
// thread runs, which returns right after): the handles of watches and
// keepalives may be destroyed from their own callbacks.
inline void JoinUnlessSelf(std::thread& t) {
  if (!t.joinable()) return;
  if (t.get_id() == std::this_thread::get_id()) t.detach();
  else t.join();
}

using EtcdClock = std::chrono::steady_clock;

class EtcdTransport : public std::enable_shared_from_this<EtcdTransport> {
 public:
  struct Loop;
  struct StreamState;

  // Parses the endpoints, builds the TLS context and starts the loop thread;
  // InvalidArgument naming what is wrong in options.
  static Result<std::shared_ptr<EtcdTransport>> Create(const EtcdClientOptions& options);
  ~EtcdTransport();

  // POSTs request to path (GETs when request is null) and returns the JSON
  // object etcd answered. Errors name the endpoint and op: Unavailable
  // (unreachable, connection broken), PermissionDenied (TLS refused),
  // DeadlineExceeded, ResourceExhausted (reply over max_response_bytes),
  // DataLoss (not a JSON object), or etcd's error mapped by its gRPC code.
  // A request that is not idempotent (txn, lease grant) is not sent again
  // when a kept connection breaks after it was written (etcd may have run it).
  Result<nlohmann::json> Call(const std::string& op, const std::string& path, const nlohmann::json& request,
                              EtcdClock::time_point deadline, bool idempotent = true);
  // The token to send etcd with a request ("" when etcd's authentication is
  // off, or the client has no credential): it logs in the first time
  // (cluster/etcd_identity.h: the credential's user and password), and again
  // when stale is the token held now (etcd refused it: restarted, expired).
  // PermissionDenied naming etcd and the user when etcd refuses the login.
  Result<std::string> Token(EtcdClock::time_point deadline, const std::string* stale = nullptr);
  // Ends every open stream and fails every later call with Aborted.
  void Close();
  // Call without logging in: sends token ("": none) as given. Call's errors.
  Result<nlohmann::json> Send(const std::string& op, const std::string& path, const nlohmann::json& request,
                              EtcdClock::time_point deadline, bool idempotent, const std::string& token);
  // Whether Close() was called.
  bool closed() const;
  // The client's options, as given.
  const EtcdClientOptions& options() const { return options_; }

 private:
  friend class EtcdStream;
  explicit EtcdTransport(EtcdClientOptions options);
  const EtcdClientOptions options_;
  struct Thread;
  std::unique_ptr<Thread> thread_;
  std::mutex login_mu_;     // held through a login, so that threads that find the token stale log in once
  std::string token_;       // GUARDED_BY(login_mu_)
  bool logged_in_ = false;  // GUARDED_BY(login_mu_): token_ holds what the last login gave ("": auth off)
};

// Whether etcd refused a request for its token, so that logging in again
// and sending it once more is right (the request did not run).
bool EtcdNeedsLogin(const Status& s);

// One streaming request (watch): the response body read line by line, each
// line one JSON value. Cancel() may come from any thread at any time and
// ends a blocked Open or Next. Thread-safety: Open and Next from one thread
// at a time; Cancel from any.
class EtcdStream {
 public:
  // A stream not yet open (Open sends the request); one that cannot be made
  // (the loop thread is gone) fails every call with Unavailable.
  explicit EtcdStream(std::shared_ptr<EtcdTransport> transport);
  ~EtcdStream();
  EtcdStream(const EtcdStream&) = delete;
  EtcdStream& operator=(const EtcdStream&) = delete;

  // POSTs request to path and waits until etcd answered 200 (then the lines
  // follow); the errors of Call, Aborted after Cancel.
  Status Open(const std::string& op, const std::string& path, const nlohmann::json& request,
              EtcdClock::time_point deadline);
  // The next line's JSON object, waiting until deadline (default: as long
  // as it takes); Unavailable when the stream ended or broke, DataLoss for a
  // line that is not JSON, ResourceExhausted for a line over
  // max_response_bytes, Aborted after Cancel, DeadlineExceeded (the stream
  // may then have lost bytes: open a new one).
  Result<nlohmann::json> Next(EtcdClock::time_point deadline = EtcdClock::time_point::max());
  // Ends Open or Next in progress and every later one with Aborted.
  void Cancel();
  // The auth token Open sent ("": none), for logging in again when etcd refuses it.
  const std::string& token() const { return token_; }

 private:
  std::shared_ptr<EtcdTransport> transport_;
  EtcdTransport::StreamState* state_ = nullptr;  // made, used and freed on the loop thread
  std::string what_ = "etcd stream";              // "etcd ENDPOINT: OP", for errors
  std::string token_;                             // the auth token of the last Open
};

// A range read with the options only cluster/ needs (the election's
// predecessor: a bound on create_revision, sorted by it, a limit); the
// errors of EtcdTransport::Call, DataLoss for a malformed reply.
Result<EtcdRangeResult> EtcdRange(EtcdTransport& transport, const EtcdRangeSpec& spec, EtcdClock::time_point deadline);

}  // namespace cluster
}  // namespace sf
