// PeerRouter: a node's connections to the other members, by address. It
// dials on first use, remembers failed dials (an address is not dialed
// again for kRedialMs, so a step sending to a node that is gone fails at
// once), and queues messages for members not connected yet for its own
// dialer thread, so neither the all-reduce hub (on the CAF threads the
// variable shards share) nor a compute thread ever waits on a dial.
//
// Thread-safety: every method may be called from any thread; it has its own
// lock, never held while it dials, sends or calls back.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "net/peer_rpc.h"

namespace sf {
namespace cluster {

class PeerRouter {
 public:
  struct Hooks {
    std::function<std::string()> node_name;  // for errors
    // Dials a member ("host:port"): TLS and hello; the connection or why not.
    std::function<Result<net::ConnectionPtr>(const std::string&)> dial;
    // Messages queued without a callback (the hub's) could not be sent to `to`.
    std::function<void(const std::string& to, const Status& why)> on_unsent;
  };

  // Starts the dialer thread.
  explicit PeerRouter(Hooks hooks);
  // Stop().
  ~PeerRouter();

  // The connection to the member at addr, dialed on first use; Unavailable
  // naming the failure (and its age) when its last dial failed less than
  // kRedialMs ago, or the node is stopping.
  Result<net::ConnectionPtr> Peer(const std::string& addr);
  // Sends one-way message m (a SendTensor, CollectiveChunk or
  // CollectiveAnnounce) to `to` without waiting on a dial: over a live
  // connection at once (false); otherwise m waits, in order, for the dialer
  // (true), which calls later(status) (later null: a failure goes to
  // on_unsent). Unavailable when the address failed less than kRedialMs ago
  // or the node stops; ResourceExhausted past kMaxQueuedBytes waiting in all.
  template <class M>
  Result<bool> SendOrQueue(const std::string& to, M m, std::function<void(Status)> later) {
    const int64_t bytes = 256 + PayloadBytes(m);
    return Route(to, Outgoing{[m = std::move(m)](const net::ConnectionPtr& c) mutable { return net::Tell(c, std::move(m)); },
                              bytes},
                 std::move(later));
  }
  // Whether the connection to addr went down (a closed socket, or no
  // heartbeat for the peer timeout) within the last ms and none is up now.
  bool LostWithin(const std::string& addr, int64_t ms) const;
  // Forgets connection c, which went down; the address it served, or "".
  std::string Forget(const net::Connection* c);
  // Refuses new work, tells every queued message's callback the node is
  // stopping, and joins the dialer; idempotent.
  void Stop();
  // Drops every connection it holds (after Stop).
  void Clear();

  static constexpr int64_t kRedialMs = 2000;
  static constexpr int64_t kMaxQueuedBytes = int64_t{1} << 30;

 private:
  // A message on its way: how it is sent (once), and its size.
  struct Outgoing {
    std::function<Status(const net::ConnectionPtr&)> send;
    int64_t bytes = 0;
  };
  struct Queued {
    Outgoing out;
    std::function<void(Status)> later;  // null: the hub's
  };
  static int64_t PayloadBytes(const net::SendTensor& t) { return t.value.valid() ? t.value.bytes() : 0; }
  static int64_t PayloadBytes(const net::CollectiveChunk& c) { return c.chunk.valid() ? c.chunk.bytes() : 0; }
  static int64_t PayloadBytes(const net::CollectiveAnnounce&) { return 0; }
  Result<bool> Route(const std::string& to, Outgoing out, std::function<void(Status)> later);
  void DialLoop();
  Status RecentFailureLocked(const std::string& addr, bool forget_old);

  const Hooks hooks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;                                             // GUARDED_BY(mu_)
  std::map<std::string, net::ConnectionPtr> peers_;                  // GUARDED_BY(mu_)
  std::map<std::string, std::pair<int64_t, Status>> failed_dials_;   // GUARDED_BY(mu_): when, why (<= 4096)
  std::map<std::string, int64_t> lost_;                              // GUARDED_BY(mu_): when a connection went down (<= 4096)
  std::map<std::string, std::deque<Queued>> queued_;                 // GUARDED_BY(mu_)
  int64_t queued_bytes_ = 0;                                         // GUARDED_BY(mu_)
  std::thread dialer_;
};

}  // namespace cluster
}  // namespace sf
