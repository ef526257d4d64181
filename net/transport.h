// Transport: authenticated, framed TCP connections between nodes and cluster
// sessions, carrying net::Message values encoded with net/wire.h.
//
// Why not CAF's middleman for these bytes: it moves a 64 MiB tensor at about
// a tenth of raw loopback TCP on this machine (../shared/STACK.md); here a
// frame is written with one writev and decoded in place.
//
// Every connection starts with the handshake of net/messages.h (shared
// secret, challenge and response both ways, version check). Until it
// succeeds nothing else is read from the peer; a peer that fails it is
// refused, logged to stderr, and disconnected. Each direction sends a
// Heartbeat when it has been idle for heartbeat_ms; a connection that
// receives nothing for peer_timeout_ms is closed as down (a hung peer is
// detected, not only a dead one).
//
// Thread-safety: all methods may be called from many threads. Handlers run
// on the connection's reader thread, one message at a time per connection;
// they must not block for long (hand work to actors or the compute pool).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "net/messages.h"
#include "shardflow/status.h"

namespace sf {
namespace net {

struct TransportOptions {
  std::string secret;          // the cluster secret; required, at least 16 bytes
  std::string node_name;       // sent in Hello/Welcome; "" for a client
  std::string listen_address;  // sent in Hello; "" when not listening
  int heartbeat_ms = 200;      // idle time before a Heartbeat is sent
  int peer_timeout_ms = 1000;  // silence after which a peer is down
  int connect_timeout_ms = 2000;  // for the TCP connect, then again for the handshake
  uint64_t max_frame_bytes = uint64_t{1} << 31;  // larger frames are refused
};

class Transport;

// One authenticated peer. Destroying the last reference does not close it:
// Close() or Transport::Shutdown() does.
class Connection {
 public:
  virtual ~Connection() = default;
  // Encodes and writes m (whole, not interleaved with other sends);
  // Unavailable naming the peer when the connection is down.
  virtual Status Send(const Message& m) = 0;
  // Sends a request with a fresh request id; on_reply runs with the reply
  // (on the reader thread) or with DeadlineExceeded / Unavailable naming the
  // peer and the request when it times out or the connection goes down.
  // Exactly one call of on_reply.
  virtual void Request(Body body, int timeout_ms,
                       std::function<void(Result<Message>)> on_reply) = 0;
  // Closes the connection; the transport's down handler runs once.
  virtual void Close() = 0;
  virtual bool is_up() const = 0;
  virtual const std::string& peer_name() const = 0;     // Hello/Welcome name
  virtual const std::string& peer_address() const = 0;  // "host:port" of the socket's peer
  virtual const std::string& peer_listen_address() const = 0;  // from Hello ("" when unknown)
};
using ConnectionPtr = std::shared_ptr<Connection>;

class Transport {
 public:
  // Called for every message that is not a reply to a pending Request.
  using MessageHandler = std::function<void(const ConnectionPtr&, Message)>;
  // Called once per connection that goes down, with why.
  using DownHandler = std::function<void(const ConnectionPtr&, const Status&)>;

  // InvalidArgument when the secret is shorter than 16 bytes.
  static Result<std::unique_ptr<Transport>> Create(TransportOptions options,
                                                   MessageHandler on_message,
                                                   DownHandler on_down);
  virtual ~Transport() = default;

  // Listens on host:port (port 0 picks a free one) and accepts peers that
  // pass the handshake; returns the bound port, or Unavailable naming the
  // address.
  virtual Result<uint16_t> Listen(const std::string& host, uint16_t port) = 0;
  // Connects to "host:port" and completes the handshake; Unavailable naming
  // the address, PermissionDenied when the peer refused our proof (or gave
  // a wrong one), FailedPrecondition when it speaks another version.
  virtual Result<ConnectionPtr> Connect(const std::string& address) = 0;
  // Closes every connection and the listener, and joins the threads. May be
  // called from a handler or reply callback (that thread is joined by the
  // destructor instead); destroying the transport there is not allowed.
  virtual void Shutdown() = 0;
};

// Sends a request and blocks until its reply (or the Request's error).
// Never call it on a transport thread: the reply arrives on one.
Result<Message> Call(const ConnectionPtr& c, Body body, int timeout_ms);
// Call for requests answered with StatusReply: that status, or why there is
// none (Internal naming an unexpected reply).
Status CallStatus(const ConnectionPtr& c, Body body, int timeout_ms);

// Splits "host:port"; InvalidArgument naming the text otherwise.
Status ParseAddress(const std::string& address, std::string* host, uint16_t* port);

}  // namespace net
}  // namespace sf
