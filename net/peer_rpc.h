// Connections between nodes and cluster sessions: Cap'n Proto RPC (one
// interface per service, proto/peer.capnp, handed out at hello by the peer's
// role) over mutual TLS, carrying net::Message values as their typed
// structs (net/wire_envelope.h). Send and Request refuse at once, naming
// the service, a message the peer gave this process no capability for.
//
// One kj event-loop thread per Endpoint does all the I/O, TLS and RPC of
// every connection: no thread per peer. What a peer sends is handed to the
// endpoint's Handler (net/peer_handler.h), one typed method per message, on
// a small pool of handler threads, one message at a time per connection and
// in arrival order, so a handler that blocks holds up only its own peer.
//
// What a peer can cost is bounded before and after authentication:
//   - before its TLS handshake completes nothing of it is decoded, and the
//     handshake has a deadline; a connection that sends nothing stays in
//     the kernel (TCP_DEFER_ACCEPT), so silent ones never fill the accept
//     queue; handshakes are capped, one address holding at most half (its
//     next ones are closed at once), and past the cap the oldest handshake
//     of the address holding the most goes, so a flood from one address
//     evicts only its own; connections per source address are capped;
//     running out of file descriptors drops the oldest
//     handshake (else the least recently used connection of the biggest
//     holder) and accepting goes on;
//   - authenticated connections are capped in all and per credential: a
//     new peer past a cap takes the place of the least recently used
//     connection of its own credential, or (past the total) of the
//     credential holding the most, so a new peer always gets in;
//   - after it, messages are capped in size (EndpointOptions::max_frame_bytes,
//     refused by Cap'n Proto before the body is allocated); what a peer may
//     leave here is capped by max_peer_buffer_bytes: its calls in flight
//     (Cap'n Proto's flow limit), our replies queued for it, and our large
//     replies it has not acknowledged (past that cap they go copied in the
//     call's return); past the cap its bytes stop being read until it takes
//     ours, and a message must arrive at a minimum rate, a
//     peer must take our bytes within write_timeout_ms (else it is dropped
//     and never blocks anyone else), and a peer silent for peer_timeout_ms
//     is down (each side sends a heartbeat when idle for heartbeat_ms). A
//     peer taking a long message of ours is not silent, and after it has
//     the bytes it gets time to decode them (a second per 64 MB);
//   - one peer's long message does not hold up the others: the I/O loop
//     looks at every socket and timer at least every 1024 events.
// Roles come from the certificate (net/credentials.h): Connection::peer_role.
//
// Thread-safety: all methods may be called from many threads, except that
// Connect and Call must not run on the endpoint's own event-loop thread
// (no handler runs there).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "net/credentials.h"
#include "net/messages.h"
#include "net/peer_handler.h"
#include "shardflow/status.h"

namespace sf {
namespace net {

struct EndpointOptions {
  // Credentials: NAME.crt/NAME.key and ca.crt in tls_dir (net/credentials.h).
  std::string tls_dir;
  std::string tls_name;  // "" = "node" or "session" by `role`
  // Plaintext and unauthenticated (a peer's claimed role is believed): only
  // for trusted networks and for measuring what TLS costs.
  bool insecure = false;
  Role role = Role::kNode;       // the role claimed when insecure
  std::string node_name;         // sent in hello; "" for a session
  std::string listen_address;    // sent in hello; "" when not listening
  int heartbeat_ms = 200;        // idle time before a heartbeat is sent
  int peer_timeout_ms = 1000;    // silence after which a peer is down
  int connect_timeout_ms = 2000; // TCP connect, TLS handshake and hello, in all
  int handshake_timeout_ms = 2000;  // an accepted peer's TLS handshake and hello
  int write_timeout_ms = 10000;  // a peer that takes none of our bytes this long is dropped
  // A message under way must arrive at least this fast (after a 1 s grace).
  uint64_t min_bytes_per_sec = 64 << 10;
  uint64_t max_frame_bytes = uint64_t{1} << 31;       // largest message from a peer
  // What one peer may leave here, each part on its own: its calls not yet
  // answered, our replies queued for it and not taken, and our large replies
  // sent as one-way messages it has not acknowledged. Past it the peer's
  // bytes are not read until it takes ours (a peer that takes none for
  // write_timeout_ms is dropped).
  uint64_t max_peer_buffer_bytes = uint64_t{32} << 20;
  // Our own one-way messages (not replies) a peer has not acknowledged:
  // past it the peer is dropped. They are this process's own tensors, sent
  // by its steps, not something a peer asks for.
  uint64_t max_unanswered_bytes = uint64_t{4} << 30;
  // All peers' messages under way (and tensors streaming in) together: past
  // it the peers holding the most are dropped.
  uint64_t max_inflight_bytes = uint64_t{4} << 30;
  // Authenticated peers that dialed this endpoint, in all and per credential
  // (certificate; per source address without TLS): past a cap the least
  // recently used connection of the same credential, or (past the total)
  // of the credential holding the most, is closed for the new one.
  int max_connections = 1024;
  int max_connections_per_credential = 256;
  // Connections from one address, handshaking or not: past it a new one is refused.
  int max_connections_per_source = 256;
  int max_handshakes = 64;       // accepted peers not yet through TLS and hello
  // Dial from this local IP address ("": the system's choice), as on a
  // host with several addresses.
  std::string local_address;
  int handler_threads = 4;
  bool log = true;               // refusals and drops to stderr (rate-limited)
};

class Endpoint;

// One authenticated peer. Destroying the last reference does not close it:
// Close() or Endpoint::Shutdown() does.
class Connection {
 public:
  virtual ~Connection() = default;
  // Sends m one-way (m.request_id must be 0: requests are answered through
  // their Answer). Returns at once: Unavailable naming the peer when the
  // connection is down, InvalidArgument naming the field when m cannot be
  // encoded or is no one-way message; a later failure takes the connection down.
  virtual Status Send(const Message& m) = 0;
  // Sends a request; on_reply runs with the reply (on a handler thread, in
  // order with this connection's messages) or with DeadlineExceeded /
  // Unavailable naming the peer and the request. Exactly one call.
  virtual void Request(Body body, int timeout_ms, std::function<void(Result<Message>)> on_reply) = 0;
  // As Request, but on_reply runs on the I/O thread: it must only hand the
  // result over (Call uses it, so a blocked handler never waits on itself).
  virtual void RequestInline(Body body, int timeout_ms, std::function<void(Result<Message>)> on_reply) = 0;
  // Closes the connection; the endpoint's down handler runs once.
  virtual void Close() = 0;
  virtual bool is_up() const = 0;
  virtual const std::string& peer_name() const = 0;     // from hello
  virtual const std::string& peer_address() const = 0;  // "host:port" of the socket's peer
  virtual const std::string& peer_listen_address() const = 0;  // from hello ("" when unknown)
  virtual Role peer_role() const = 0;                   // from its certificate
  // A session's namespace, from its certificate ("": the default namespace;
  // always "" for nodes and without TLS).
  virtual const std::string& peer_namespace() const = 0;
};
using ConnectionPtr = std::shared_ptr<Connection>;

class Endpoint {
 public:
  // Called once per connection that goes down, with why.
  using DownHandler = std::function<void(const ConnectionPtr&, const Status&)>;

  // Loads the credentials and starts the I/O thread; what peers send goes to
  // handler (null: a Handler that serves nothing), which must outlive the
  // endpoint. InvalidArgument for bad options or credentials, NotFound /
  // FailedPrecondition for credential files as net::LoadCredential.
  static Result<std::unique_ptr<Endpoint>> Create(EndpointOptions options, Handler* handler, DownHandler on_down);
  virtual ~Endpoint() = default;

  // Listens on host:port (port 0 picks a free one); the bound port, or
  // Unavailable naming the address.
  virtual Result<uint16_t> Listen(const std::string& host, uint16_t port) = 0;
  // Connects to "host:port", completes TLS and hello; Unavailable naming
  // the address, PermissionDenied when TLS fails (a certificate of another
  // CA, or a peer that is not a node), FailedPrecondition when it speaks
  // another version (naming both).
  virtual Result<ConnectionPtr> Connect(const std::string& address) = 0;
  // Closes every connection and the listener and stops the threads; may be
  // called from a handler (that thread is joined by the destructor).
  virtual void Shutdown() = 0;
};

namespace detail {
// Sends a request and blocks until its reply (or the Request's error).
Result<Message> CallBody(const ConnectionPtr& c, Body body, int timeout_ms);
// A reply as Reply: the error of a StatusReply sent instead, or Internal
// naming any other reply to `asked`.
template <class Reply>
Result<Reply> ReplyAs(const char* asked, Result<Message> r) {
  if (!r.ok()) return r.status();
  if (auto* s = std::get_if<StatusReply>(&r->body); s && !s->status.ok()) return s->status;
  if (auto* v = std::get_if<Reply>(&r->body)) return std::move(*v);
  return Internal(std::string("unexpected reply ") + BodyName(r->body) + " to " + asked);
}
}  // namespace detail

// Sends request r and blocks until its reply: the Req::Reply, the error the
// peer answered with, or why there is none (DeadlineExceeded / Unavailable
// naming the peer and the request; PermissionDenied naming the service the
// peer did not offer this process). A StatusReply reply's status is the
// result's status().
template <class Req>
Result<typename Req::Reply> Call(const ConnectionPtr& c, Req r, int timeout_ms) {
  Body b(std::move(r));
  const char* asked = BodyName(b);
  return detail::ReplyAs<typename Req::Reply>(asked, detail::CallBody(c, std::move(b), timeout_ms));
}

// Call for requests answered with a StatusReply: that status, or why there is none.
template <class Req>
Status CallStatus(const ConnectionPtr& c, Req r, int timeout_ms) {
  static_assert(std::is_same_v<typename Req::Reply, StatusReply>, "CallStatus is for requests answered with a status");
  return Call(c, std::move(r), timeout_ms).status();
}

// Sends request r; done gets what Call returns, once, on a handler thread
// in order with the connection's messages (inline_reply: on the I/O thread,
// so done must only hand it over).
template <class Req>
void Ask(const ConnectionPtr& c, Req r, int timeout_ms, std::function<void(Result<typename Req::Reply>)> done,
         bool inline_reply = false) {
  Body b(std::move(r));
  const char* asked = BodyName(b);
  auto cb = [asked, done = std::move(done)](Result<Message> m) {
    done(detail::ReplyAs<typename Req::Reply>(asked, std::move(m)));
  };
  if (inline_reply) c->RequestInline(std::move(b), timeout_ms, std::move(cb));
  else c->Request(std::move(b), timeout_ms, std::move(cb));
}

// Sends m one-way (SendTensor, AbortStep, CleanupStep, CollectiveChunk,
// CollectiveAnnounce, StepProgress, Membership) as Connection::Send does;
// its errors.
template <class M>
Status Tell(const ConnectionPtr& c, M m) {
  return c->Send(Message{0, Body(std::move(m))});
}

// Splits "host:port"; InvalidArgument naming the text otherwise.
Status ParseAddress(const std::string& address, std::string* host, uint16_t* port);

}  // namespace net
}  // namespace sf
