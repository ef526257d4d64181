// Cap'n Proto RPC connections over mutual TLS (net/peer_rpc.h).
//
// Threads: one kj event loop (all sockets, TLS, RPC state) and a pool of
// handler threads. Other threads reach the loop through Core::Post, an inbox
// drained between kj events. Everything named Link lives on the loop
// thread only; ConnImpl is the thread-safe face users hold.
#include "net/peer_rpc.h"

#include <capnp/message.h>
#include <capnp/rpc-twoparty.h>
#include <capnp/rpc.h>
#include <kj/async-io.h>
#include <kj/debug.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "graph/tensor_proto.h"
#include "net/peer.capnp.h"
#include "net/tls_stream.h"
#include "net/wire_envelope.h"

namespace sf {
namespace net {

Result<Message> Call(const ConnectionPtr& c, Body body, int timeout_ms) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<Message>> reply;
  c->RequestInline(std::move(body), timeout_ms, [&](Result<Message> r) {
    std::lock_guard<std::mutex> l(mu);
    reply.emplace(std::move(r));
    cv.notify_all();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return reply.has_value(); });
  return std::move(*reply);
}

Status CallStatus(const ConnectionPtr& c, Body body, int timeout_ms) {
  auto r = Call(c, std::move(body), timeout_ms);
  if (!r.ok()) return r.status();
  if (auto* s = std::get_if<StatusReply>(&r->body)) return s->status;
  return Internal(std::string("unexpected reply ") + BodyName(r->body));
}

Status ParseAddress(const std::string& address, std::string* host, uint16_t* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    return InvalidArgument("address '" + address + "' is not HOST:PORT");
  const std::string p = address.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(p.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > 65535)
    return InvalidArgument("address '" + address + "' has no valid port (0-65535)");
  *host = address.substr(0, colon);
  *port = static_cast<uint16_t>(v);
  return Status::OK();
}

namespace {

using VatId = capnp::rpc::twoparty::VatId;
using Side = capnp::rpc::twoparty::Side;
namespace rp = proto::rpc;

// Small messages (a heartbeat, a reply, a TLS record's tail) must not wait
// for the peer's delayed ACK behind Nagle's algorithm.
void NoDelay(kj::AsyncIoStream& s) {
  int one = 1;
  try {
    s.setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  } catch (const kj::Exception&) {
    // not a TCP socket (a pipe in tests): nothing to tune
  }
}

// Replies with at least this many tensor bytes travel as tells (no copy).
constexpr size_t kReplyByTellBytes = size_t{1} << 20;
// One-way messages of a turn are batched into one tell up to this size.
constexpr size_t kBatchBytes = size_t{1} << 20;
// The request id of the marker a handler's reply becomes when sent as a tell.
constexpr uint64_t kSentByTell = ~uint64_t{0};
// Events the I/O loop runs in a row before it polls the sockets and timers.
constexpr unsigned kBusyPollEvents = 1024;

// The bytes of m's tensors that an encoding could reference.
size_t TensorBytes(const Message& m) {
  size_t n = 0;
  auto add = [&](const Tensor& t) {
    if (t.valid()) n += t.bytes();
  };
  std::visit(
      [&](const auto& b) {
        using B = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<B, Echo>) add(b.payload);
        else if constexpr (std::is_same_v<B, RunPartitionDone>) for (const auto& t : b.fetches) add(t);
        else if constexpr (std::is_same_v<B, Variables>) for (const auto& t : b.values) add(t);
        else if constexpr (std::is_same_v<B, SendTensor>) add(b.value);
        else if constexpr (std::is_same_v<B, CollectiveChunk>) add(b.chunk);
      },
      m.body);
  return n;
}

// The services of net/peer.capnp, as bits of a peer's offer.
enum : uint32_t {
  kChannelService = 1,
  kPartitionsService = 2,
  kVariablesService = 4,
  kMembersService = 8,
  kMembershipService = 16,
  kRendezvousService = 32,
  kCollectivesService = 64,
  kDiagnosticsService = 128,
  // Not a service: this node may send the peer (a session or another
  // watcher without membership) views of the membership on its channel.
  kMembershipViews = 256,
};

const char* ServiceName(uint32_t s) {
  switch (s) {
    case kChannelService: return "channel";
    case kPartitionsService: return "partition host";
    case kVariablesService: return "variable store";
    case kMembersService: return "member list";
    case kMembershipService: return "membership";
    case kRendezvousService: return "rendezvous";
    case kCollectivesService: return "collectives";
    case kDiagnosticsService: return "diagnostics";
  }
  return "unknown";
}

// How a message body travels: the service whose method carries it, and
// whether it is asked (a request with a reply) or told (one-way). A body
// with neither (StatusReply, RunPartitionDone) is only ever a reply.
struct Route {
  uint32_t service = 0;
  bool ask = false;
  bool tell = false;
};

Route RouteOf(const Body& body) {
  return std::visit(
      [](const auto& b) -> Route {
        using B = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<B, Heartbeat> || std::is_same_v<B, StepProgress>) return {kChannelService, false, true};
        else if constexpr (std::is_same_v<B, ListMembers>) return {kMembersService, true, false};
        else if constexpr (std::is_same_v<B, Membership>) return {kMembershipService, true, true};
        else if constexpr (std::is_same_v<B, RegisterPartition> || std::is_same_v<B, RunPartition> ||
                           std::is_same_v<B, CloseSession>)
          return {kPartitionsService, true, false};
        else if constexpr (std::is_same_v<B, AbortStep> || std::is_same_v<B, CleanupStep>)
          return {kPartitionsService, false, true};
        else if constexpr (std::is_same_v<B, SendTensor>) return {kRendezvousService, false, true};
        else if constexpr (std::is_same_v<B, CollectiveChunk>) return {kCollectivesService, false, true};
        else if constexpr (std::is_same_v<B, Variables>) return {kVariablesService, true, false};
        else if constexpr (std::is_same_v<B, Echo>) return {kDiagnosticsService, true, false};
        else return {};
      },
      body);
}

// OK when body can go to a peer offering `offered` as a request (ask) or
// one-way; InvalidArgument for the wrong form, PermissionDenied naming the
// service (and the peer, by who(), called only then) when the peer gave
// this process none (its role may not use it).
template <class Who>
Status CheckRoute(const Body& body, bool ask, uint32_t offered, const Who& who) {
  const Route r = RouteOf(body);
  if (ask && !r.ask)
    return InvalidArgument(std::string(BodyName(body)) + " is not a request (it is " +
                           (r.tell ? "sent one-way)" : "only a reply)"));
  if (!ask && !r.tell)
    return InvalidArgument(std::string(BodyName(body)) + " is not a one-way message (it is " +
                           (r.ask ? "a request)" : "only a reply)"));
  if (!ask && std::holds_alternative<Membership>(body) && (offered & kMembershipViews)) return Status::OK();
  if ((offered & r.service) == 0)
    return PermissionDenied(who() + " offers this process no " + ServiceName(r.service) + " service, which " +
                            BodyName(body) + " needs (the role of this process's certificate may not use it)");
  return Status::OK();
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Describe(const kj::Exception& e) { return e.getDescription().cStr(); }

// ------------------------------------------------------------ handler pool

class HandlerPool;

// Runs its tasks one at a time, in order, on the pool's threads.
class Strand : public std::enable_shared_from_this<Strand> {
 public:
  explicit Strand(HandlerPool* pool) : pool_(pool) {}
  void Add(std::function<void()> fn);
  // Runs up to a few tasks; true when more remain (the strand is requeued).
  bool RunSome();

 private:
  HandlerPool* pool_;
  std::mutex mu_;
  std::deque<std::function<void()>> q_;  // GUARDED_BY(mu_)
  bool scheduled_ = false;               // GUARDED_BY(mu_)
};

class HandlerPool {
 public:
  explicit HandlerPool(int n) {
    for (int i = 0; i < std::max(1, n); ++i) threads_.emplace_back([this] { Work(); });
  }
  void Schedule(std::shared_ptr<Strand> s) {
    std::lock_guard<std::mutex> l(mu_);
    ready_.push_back(std::move(s));
    cv_.notify_one();
  }
  // Runs what is queued, then ends the threads; a pool thread calling it is
  // left for Join to detach.
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
  }
  void Join() {
    const auto self = std::this_thread::get_id();
    for (auto& t : threads_) {
      if (!t.joinable()) continue;
      if (t.get_id() == self) t.detach();
      else t.join();
    }
  }
  bool OnPoolThread() const {
    for (const auto& t : threads_)
      if (t.get_id() == std::this_thread::get_id()) return true;
    return false;
  }

 private:
  void Work() {
    for (;;) {
      std::shared_ptr<Strand> s;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !ready_.empty(); });
        if (ready_.empty()) return;  // stopping and drained
        s = std::move(ready_.front());
        ready_.pop_front();
      }
      if (s->RunSome()) Schedule(std::move(s));
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Strand>> ready_;  // GUARDED_BY(mu_)
  bool stop_ = false;                          // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

void Strand::Add(std::function<void()> fn) {
  bool schedule = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    q_.push_back(std::move(fn));
    if (!scheduled_) schedule = scheduled_ = true;
  }
  if (schedule) pool_->Schedule(shared_from_this());
}

bool Strand::RunSome() {
  for (int i = 0; i < 16; ++i) {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (q_.empty()) {
        scheduled_ = false;
        return false;
      }
      fn = std::move(q_.front());
      q_.pop_front();
    }
    fn();
  }
  std::lock_guard<std::mutex> l(mu_);
  if (q_.empty()) {
    scheduled_ = false;
    return false;
  }
  return true;
}

// ------------------------------------------------------------ metered stream

// Forwards to the TLS (or plain) stream and records progress, so the loop
// can tell a silent peer, a slow message and a peer that stopped reading.
// Large reads and writes go in pieces, each one stamping progress.
class Meter final : public kj::AsyncIoStream {
 public:
  explicit Meter(kj::Own<kj::AsyncIoStream> inner) : inner_(kj::mv(inner)) {
    last_read_ms = last_write_ms = NowMs();
  }

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override {
    // Cap'n Proto reads a message's first word alone and then its body with
    // minBytes = the body's size: that is a message under way.
    if (minBytes <= 8) return inner_->tryRead(buffer, minBytes, maxBytes).then([this](size_t n) {
      if (n > 0) last_read_ms = NowMs();
      return n;
    });
    frame_start_ms = window_start_ms = NowMs();
    frame_bytes = window_bytes = 0;
    in_frame = true;
    return ReadAtLeast(static_cast<kj::byte*>(buffer), minBytes, maxBytes, 0);
  }

  kj::Promise<void> write(const void* buffer, size_t size) override {
    kj::ArrayPtr<const kj::byte> one(static_cast<const kj::byte*>(buffer), size);
    auto pieces = kj::heapArray<kj::ArrayPtr<const kj::byte>>(1);
    pieces[0] = one;
    return WritePieces(kj::mv(pieces));
  }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    return WritePieces(kj::heapArray(pieces));
  }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }

  // Milliseconds the pending write has made no progress (0: none pending).
  int64_t WriteStalledMs(int64_t now) const { return writing > 0 ? now - last_write_ms : 0; }
  // When the peer last showed it is alive: the last bytes read from it, the
  // last progress of a write under way, or, after a long message of ours,
  // the time the peer may spend taking it in (decoding it holds the peer's
  // loop: 0.3 s for 256 MiB here, past a heartbeat; kDigestBytesPerMs).
  int64_t HeardMs() const {
    return std::max({last_read_ms, writing > 0 ? last_write_ms : int64_t{0},
                     long_write_end_ms + static_cast<int64_t>(long_write_bytes / kDigestBytesPerMs)});
  }
  // True when a message under way arrived slower than min_rate bytes/s over
  // the last window of a second or more (the window then starts again). A
  // rate since the message began would let a peer send most of a big
  // message fast and trickle the rest, holding its memory for minutes.
  bool SlowFrame(int64_t now, uint64_t min_rate) {
    if (!in_frame) return false;
    const int64_t ms = now - window_start_ms;
    if (ms <= 1000) return false;
    const bool slow = window_bytes * 1000 / static_cast<uint64_t>(ms) < min_rate;
    window_start_ms = now;
    window_bytes = 0;
    return slow;
  }
  // Bytes of the message under way received so far (0: none under way).
  uint64_t FrameBytesHeld() const { return in_frame ? frame_bytes : 0; }

  int64_t last_read_ms = 0;
  int64_t last_write_ms = 0;
  int64_t long_write_end_ms = 0;  // when the last write of more than kChunk bytes ended
  uint64_t long_write_bytes = 0;  // and its size
  int writing = 0;
  bool in_frame = false;
  int64_t frame_start_ms = 0;
  uint64_t frame_bytes = 0;
  int64_t window_start_ms = 0;  // the rate window (SlowFrame)
  uint64_t window_bytes = 0;

 private:
  static constexpr size_t kChunk = size_t{1} << 20;
  // How fast a peer is assumed to take in a message once it has its bytes
  // (decode and copy; a slow machine under load): 64 MB/s.
  static constexpr uint64_t kDigestBytesPerMs = 64 * 1000;

  kj::Promise<size_t> ReadAtLeast(kj::byte* buf, size_t min, size_t max, size_t got) {
    return inner_->tryRead(buf + got, 1, max - got).then([this, buf, min, max, got](size_t n) -> kj::Promise<size_t> {
      const size_t total = got + n;
      if (n > 0) {
        last_read_ms = NowMs();
        frame_bytes += n;
        window_bytes += n;
      }
      if (n == 0 || total >= min) {
        in_frame = false;
        return total;
      }
      return ReadAtLeast(buf, min, max, total);
    });
  }

  kj::Promise<void> WritePieces(kj::Array<kj::ArrayPtr<const kj::byte>> pieces) {
    ++writing;
    last_write_ms = NowMs();
    uint64_t bytes = 0;
    for (const auto& p : pieces) bytes += p.size();
    auto done = kj::defer([this, bytes] {
      --writing;
      last_write_ms = NowMs();
      if (bytes > kChunk) {
        long_write_end_ms = last_write_ms;
        long_write_bytes = bytes;
      }
    });
    return WriteFrom(kj::mv(pieces), 0, 0).attach(kj::mv(done));
  }

  // Writes pieces[i] from offset on, at most kChunk bytes per write.
  kj::Promise<void> WriteFrom(kj::Array<kj::ArrayPtr<const kj::byte>> pieces, size_t i, size_t offset) {
    std::vector<kj::ArrayPtr<const kj::byte>> chunk;
    size_t bytes = 0;
    while (i < pieces.size() && bytes < kChunk) {
      auto p = pieces[i];
      const size_t take = std::min(p.size() - offset, kChunk - bytes);
      if (take > 0) chunk.push_back(p.slice(offset, offset + take));
      bytes += take;
      offset += take;
      if (offset == p.size()) {
        ++i;
        offset = 0;
      }
    }
    if (chunk.empty()) return kj::READY_NOW;
    auto arr = kj::heapArray<kj::ArrayPtr<const kj::byte>>(chunk.data(), chunk.size());
    auto view = arr.asPtr();
    return inner_->write(view).attach(kj::mv(arr)).then(
        [this, pieces = kj::mv(pieces), i, offset]() mutable -> kj::Promise<void> {
          last_write_ms = NowMs();
          return WriteFrom(kj::mv(pieces), i, offset);
        });
  }

  kj::Own<kj::AsyncIoStream> inner_;
};

// ------------------------------------------------------------ the pieces

class Core;
struct Link;

struct PendingRequest {
  const char* what;
  std::function<void(Result<Message>)> cb;
  bool inline_reply;
};

class ConnImpl final : public Connection, public std::enable_shared_from_this<ConnImpl> {
 public:
  ConnImpl(std::shared_ptr<Core> core, uint64_t id, HandlerPool* pool, std::string peer_address)
      : core_(std::move(core)), id_(id), strand_(std::make_shared<Strand>(pool)), peer_address_(std::move(peer_address)) {}

  Status Send(const Message& m) override;
  void Request(Body body, int timeout_ms, std::function<void(Result<Message>)> on_reply) override {
    StartRequest(std::move(body), timeout_ms, std::move(on_reply), false);
  }
  void RequestInline(Body body, int timeout_ms, std::function<void(Result<Message>)> on_reply) override {
    StartRequest(std::move(body), timeout_ms, std::move(on_reply), true);
  }
  void Close() override;
  bool is_up() const override { return up_; }
  const std::string& peer_name() const override { return peer_name_; }
  const std::string& peer_address() const override { return peer_address_; }
  const std::string& peer_listen_address() const override { return peer_listen_; }
  Role peer_role() const override { return peer_role_; }

  std::string Who() const {
    if (!peer_name_.empty()) return "node '" + peer_name_ + "' (" + peer_address_ + ")";
    return peer_address_;
  }
  std::string DownReason() {
    std::lock_guard<std::mutex> l(mu_);
    return down_why_.empty() ? "" : ": " + down_why_;
  }

  // Marks the connection down once (any thread): fails pending requests and,
  // when it had been up, queues the down handler. False when already down.
  bool MarkDown(const Status& why);
  // Marks it up after hello (loop thread); false when it went down meanwhile.
  bool MarkUp() {
    std::lock_guard<std::mutex> l(mu_);
    if (down_) return false;
    up_ = true;
    was_up_ = true;
    return true;
  }
  // Hands a message to the handler, in order (loop thread).
  void Deliver(Message m);
  // Adds a pending request; its id, or 0 when the connection is down.
  uint64_t AddPending(const char* what, std::function<void(Result<Message>)>& cb, bool inline_reply) {
    std::lock_guard<std::mutex> l(mu_);
    if (down_) return 0;  // cb is left to the caller
    const uint64_t rid = next_rid_++;
    pending_.emplace(rid, PendingRequest{what, std::move(cb), inline_reply});
    return rid;
  }
  // Completes a pending request once (any thread); later results are dropped.
  void Finish(uint64_t rid, Result<Message> r) {
    PendingRequest p;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = pending_.find(rid);
      if (it == pending_.end()) return;
      p = std::move(it->second);
      pending_.erase(it);
    }
    Complete(std::move(p), std::move(r));
  }

  uint64_t id() const { return id_; }
  std::string peer_name_;
  std::string peer_listen_;
  Role peer_role_ = Role::kNode;
  // The services the peer offers this process (bits of kChannelService...),
  // set before the connection is up.
  std::atomic<uint32_t> services_{0};

 private:
  void StartRequest(Body body, int timeout_ms, std::function<void(Result<Message>)> cb, bool inline_reply);
  void Complete(PendingRequest p, Result<Message> r) {
    if (p.inline_reply) {
      p.cb(std::move(r));
      return;
    }
    auto cb = std::make_shared<std::function<void(Result<Message>)>>(std::move(p.cb));
    auto res = std::make_shared<Result<Message>>(std::move(r));
    strand_->Add([cb, res] { (*cb)(std::move(*res)); });
  }

  std::shared_ptr<Core> core_;
  const uint64_t id_;
  std::shared_ptr<Strand> strand_;
  std::string peer_address_;
  std::atomic<bool> up_{false};
  std::mutex mu_;
  bool down_ = false;                           // GUARDED_BY(mu_)
  bool was_up_ = false;                         // GUARDED_BY(mu_)
  std::string down_why_;                        // GUARDED_BY(mu_)
  uint64_t next_rid_ = 1;                       // GUARDED_BY(mu_)
  std::map<uint64_t, PendingRequest> pending_;  // GUARDED_BY(mu_)
  friend class Core;
  friend class PeerServer;
  friend class Service;
};

// Counts a connection against the endpoint's caps while it lives.
struct Slot {
  Core* core = nullptr;
  std::string source;
  uint64_t handshake = 0;  // its entry in Core::handshaking_ until hello (0: done)
  ~Slot();
  void HandshakeDone();
};

class PeerServer;

// One connection's kj objects (loop thread only). Members are destroyed in
// reverse order: tasks first, the stream last.
struct Link {
  std::shared_ptr<ConnImpl> conn;
  kj::Own<Slot> slot;
  Side side = Side::CLIENT;
  kj::Own<Meter> meter;
  // Requests whose bytes may still sit in the network's queue (a call that
  // timed out or failed before its reply): kept until the queue empties.
  std::vector<std::shared_ptr<Message>> keepalive;
  // One-way messages of this turn, sent as one tell by Flush.
  std::vector<std::shared_ptr<Message>> outbox;
  size_t outbox_bytes = 0;
  bool flush_scheduled = false;
  kj::Own<capnp::TwoPartyVatNetwork> network;
  kj::Own<capnp::RpcSystem<VatId>> rpc;
  kj::Maybe<rp::Peer::Client> remote;  // the dialed side's bootstrap (hello only)
  // What the peer offers this process; null capabilities where it offers none.
  struct Remote {
    rp::Channel::Client channel = nullptr;
    rp::PartitionHost::Client partitions = nullptr;
    rp::VariableStore::Client variables = nullptr;
    rp::Members::Client members = nullptr;
    rp::Membership::Client membership = nullptr;
    rp::Rendezvous::Client rendezvous = nullptr;
    rp::Collectives::Client collectives = nullptr;
    rp::Diagnostics::Client diagnostics = nullptr;
  } services;
  // The tensor this peer is streaming to us (Rendezvous.sendPiece), if any.
  struct Assembly {
    SendTensor message;
    uint64_t total = 0;
    uint64_t got = 0;
    int64_t start_ms = 0;
  };
  std::unique_ptr<Assembly> assembly;
  int64_t heartbeat_sent_ms = 0;  // when the heartbeat in flight left (0: none)
  uint64_t unanswered_bytes = 0;  // of one-way calls sent and not yet returned
  bool hello_done = false;
  bool cert_checked = false;  // TLS: the role below is the certificate's
  Role cert_role = Role::kNode;
  uint64_t next_incoming = 2;  // even: never a pending request id of ours
  // Requests of the peer's being handled here, by our local id: how to
  // answer, and the peer's own id for a reply sent as a tell.
  struct Incoming {
    kj::Own<kj::PromiseFulfiller<Message>> fulfiller;
    uint64_t asker_id = 0;
  };
  std::unordered_map<uint64_t, Incoming> incoming;
  int64_t last_tick_ms = 0;
  kj::Own<kj::TaskSet> tasks;
};

class Core : public std::enable_shared_from_this<Core>, public kj::TaskSet::ErrorHandler {
 public:
  Core(EndpointOptions o, Credential cred, Endpoint::MessageHandler m, Endpoint::DownHandler d)
      : options(std::move(o)), credential(std::move(cred)), on_message(std::move(m)), on_down(std::move(d)),
        pool(options.handler_threads) {
    limits.max_frame_bytes = options.max_frame_bytes;
  }

  // Starts the loop thread; Internal when its TLS context cannot be made.
  Status Start() {
    std::promise<Status> ready;
    auto f = ready.get_future();
    loop_thread_ = std::thread([this, &ready] { LoopMain(&ready); });
    return f.get();
  }

  // Runs fn on the loop thread between events; false when the loop ended.
  bool Post(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(inbox_mu_);
    if (closed_) return false;
    inbox_.push_back(std::move(fn));
    if (wake_ && !signaled_) {
      signaled_ = true;
      wake_->fulfill();
    }
    return true;
  }

  bool OnLoopThread() const { return std::this_thread::get_id() == loop_id_; }

  // Runs start() on the loop and waits for its result; Unavailable when the
  // endpoint shuts down first.
  template <class T>
  Result<T> RunOnLoop(std::function<kj::Promise<Result<T>>()> start) {
    struct State {
      std::mutex mu;
      std::condition_variable cv;
      std::optional<Result<T>> r;
      void Set(Result<T> v) {
        std::lock_guard<std::mutex> l(mu);
        if (!r) r.emplace(std::move(v));
        cv.notify_all();
      }
    };
    auto st = std::make_shared<State>();
    const bool posted = Post([this, st, start] {
      auto guard = kj::defer([st] { st->Set(Unavailable("the endpoint shut down")); });
      tasks_->add(start()
                      .then([st](Result<T> r) { st->Set(std::move(r)); },
                            [st](kj::Exception&& e) { st->Set(Unavailable(Describe(e))); })
                      .attach(kj::mv(guard)));
    });
    if (!posted) return Unavailable("the endpoint is shut down");
    std::unique_lock<std::mutex> l(st->mu);
    st->cv.wait(l, [&] { return st->r.has_value(); });
    return std::move(*st->r);
  }

  kj::Promise<Result<uint16_t>> ListenOnLoop(std::string host, uint16_t port);
  kj::Promise<Result<ConnectionPtr>> ConnectOnLoop(std::string address);

  // Stops everything; idempotent.
  void Shutdown() {
    {
      std::lock_guard<std::mutex> l(inbox_mu_);
      if (shutting_down_) return;
      shutting_down_ = true;
    }
    Post([this] { stop_requested_ = true; });
    if (loop_thread_.joinable()) {
      if (loop_thread_.get_id() == std::this_thread::get_id()) loop_thread_.detach();
      else loop_thread_.join();
    }
    pool.Stop();
    pool.Join();
  }
  ~Core() { Shutdown(); }

  // Loop thread: a link's connection went down.
  void Down(Link* link, const Status& why) {
    auto it = links_.find(link->conn->id());
    if (it == links_.end()) return;
    if (link->conn->MarkDown(why) && options.log && why.code() != Code::kUnavailable)
      Log("dropping " + link->conn->Who() + ": " + why.message());
    graveyard_.push_back(kj::mv(it->second));
    links_.erase(it);
    // Wake the loop so the graveyard is emptied soon, not at the next post.
    std::lock_guard<std::mutex> l(inbox_mu_);
    if (wake_ && !signaled_) {
      signaled_ = true;
      wake_->fulfill();
    }
  }
  void DownById(uint64_t id, const Status& why) {
    auto it = links_.find(id);
    if (it != links_.end()) Down(it->second.get(), why);
  }
  Link* FindLink(uint64_t id) {
    auto it = links_.find(id);
    return it == links_.end() ? nullptr : it->second.get();
  }

  void SendOnLoop(uint64_t id, std::shared_ptr<Message> m);
  void Flush(uint64_t id);
  void ReplyOnLoop(uint64_t id, Message m);
  void AskOnLoop(uint64_t id, uint64_t rid, std::shared_ptr<Message> m, int timeout_ms);

  // Rate-limited log line about a source (at most one per source and kind
  // of refusal per 10 s, and 20 a second in all): keyed by the source alone,
  // junk sent first hid a later, different refusal (an expired certificate).
  void LogRefusal(const std::string& source, const std::string& why) {
    if (!options.log) return;
    const int64_t now = NowMs();
    auto& last = refusal_log_[source + '\x1f' + why.substr(0, 48)];
    if (last != 0 && now - last < 10000) return;
    if (now / 1000 != log_second_) {
      log_second_ = now / 1000;
      log_count_ = 0;
    }
    if (++log_count_ > 20) return;
    last = now;
    if (refusal_log_.size() > 4096) refusal_log_.clear();  // bounded by sources and kinds, not by time
    Log("refused peer " + source + ": " + why);
  }
  void Log(const std::string& line) const {
    std::fprintf(stderr, "shardflow: %s%s\n", options.node_name.empty() ? "" : (options.node_name + ": ").c_str(),
                 line.c_str());
  }

  const EndpointOptions options;
  // Sent in hello: options.listen_address, or the first address listened on (loop thread only).
  std::string listen_address_ = options.listen_address;
  const Credential credential;
  const Endpoint::MessageHandler on_message;
  const Endpoint::DownHandler on_down;
  WireLimits limits;
  HandlerPool pool;

  // Caps (loop thread).
  int total_conns = 0;
  std::unordered_map<std::string, int> per_source;
  // Accepted peers not through TLS and hello yet, oldest first: the TLS
  // stage (cancelled through its canceler) or a link awaiting hello.
  struct Handshake {
    kj::Own<kj::Canceler> canceler;
    uint64_t link = 0;
  };
  std::map<uint64_t, Handshake> handshaking_;
  uint64_t next_handshake_ = 1;
  // Drops the oldest peer still handshaking (a silent one, most likely):
  // room for a new peer when the cap or the descriptors run out. False
  // when none is handshaking.
  bool EvictOldestHandshake() {
    if (handshaking_.empty()) return false;
    auto it = handshaking_.begin();
    Handshake h = kj::mv(it->second);
    handshaking_.erase(it);
    if (h.canceler) h.canceler->cancel("evicted: newer peers need the room");
    if (h.link) DownById(h.link, ResourceExhausted("evicted while handshaking: newer peers need the room"));
    return true;
  }

 private:
  friend class PeerServer;
  void taskFailed(kj::Exception&& e) override {
    if (options.log && e.getType() != kj::Exception::Type::DISCONNECTED) Log("I/O task failed: " + Describe(e));
  }
  void LoopMain(std::promise<Status>* ready);
  void AcceptLoop(kj::ConnectionReceiver& r);
  void OnAccepted(kj::AuthenticatedStream s);
  // Makes the link of an authenticated stream; its connection, not yet up.
  Link* StartLink(Side side, kj::Own<kj::AsyncIoStream> stream, std::string peer_address, kj::Own<Slot> slot,
                  const std::string* common_name);
  void Tick();
  kj::Promise<void> TickLoop() {
    return timer_->afterDelay(tick_ms_ * kj::MILLISECONDS).then([this] {
      Tick();
      return TickLoop();
    });
  }

  std::thread loop_thread_;
  std::thread::id loop_id_;
  kj::Timer* timer_ = nullptr;
  kj::Network* network_ = nullptr;
  std::shared_ptr<TlsContext> tls_;  // null when insecure
  kj::Own<kj::TaskSet> tasks_;
  std::vector<kj::Own<kj::ConnectionReceiver>> receivers_;
  std::map<uint64_t, kj::Own<Link>> links_;
  std::vector<kj::Own<Link>> graveyard_;
  uint64_t next_link_id_ = 1;
  int tick_ms_ = 50;
  bool stop_requested_ = false;
  std::unordered_map<std::string, int64_t> refusal_log_;
  int64_t log_second_ = 0;
  int log_count_ = 0;

  std::mutex inbox_mu_;
  std::deque<std::function<void()>> inbox_;                       // GUARDED_BY(inbox_mu_)
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> wake_;           // GUARDED_BY(inbox_mu_)
  bool signaled_ = false;                                         // GUARDED_BY(inbox_mu_)
  bool closed_ = false;                                           // GUARDED_BY(inbox_mu_)
  bool shutting_down_ = false;                                    // GUARDED_BY(inbox_mu_)
};

Slot::~Slot() {
  if (!core) return;
  --core->total_conns;
  HandshakeDone();
  auto it = core->per_source.find(source);
  if (it != core->per_source.end() && --it->second <= 0) core->per_source.erase(it);
}

void Slot::HandshakeDone() {
  if (core && handshake != 0) core->handshaking_.erase(handshake);
  handshake = 0;
}

// ------------------------------------------------------------ ConnImpl

bool ConnImpl::MarkDown(const Status& why) {
  std::map<uint64_t, PendingRequest> pending;
  bool was_up = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (down_) return false;
    down_ = true;
    up_ = false;
    down_why_ = why.message();
    was_up = was_up_;
    pending.swap(pending_);
  }
  for (auto& [rid, p] : pending)
    Complete(std::move(p), Unavailable(std::string(p.what) + " to " + Who() + " failed: " + why.message()));
  if (was_up && core_->on_down) {
    auto self = shared_from_this();
    strand_->Add([self, why] { self->core_->on_down(self, why); });
  }
  return true;
}

void ConnImpl::Deliver(Message m) {
  if (!core_->on_message) return;
  auto self = shared_from_this();
  auto msg = std::make_shared<Message>(std::move(m));
  strand_->Add([self, msg] { self->core_->on_message(self, std::move(*msg)); });
}

Status ConnImpl::Send(const Message& m) {
  if (!up_) return Unavailable("connection to " + Who() + " is down" + DownReason());
  auto copy = std::make_shared<Message>(m);  // tensors by reference
  if (m.request_id != 0) {
    auto core = core_;
    const uint64_t id = id_;
    if (!core->Post([core, id, copy] { core->ReplyOnLoop(id, std::move(*copy)); }))
      return Unavailable("connection to " + Who() + " is down: the endpoint shut down");
    return Status::OK();
  }
  SF_RETURN_IF_ERROR(CheckRoute(m.body, /*ask=*/false, services_, [this] { return Who(); }));
  SF_RETURN_IF_ERROR(CheckEncodable(m).WithPrefix(std::string("encoding ") + BodyName(m.body)));
  auto core = core_;
  const uint64_t id = id_;
  if (!core->Post([core, id, copy] { core->SendOnLoop(id, copy); }))
    return Unavailable("connection to " + Who() + " is down: the endpoint shut down");
  return Status::OK();
}

void ConnImpl::StartRequest(Body body, int timeout_ms, std::function<void(Result<Message>)> cb, bool inline_reply) {
  const char* what = BodyName(body);
  if (up_) {
    Status route = CheckRoute(body, /*ask=*/true, services_, [this] { return Who(); });
    if (!route.ok()) return Complete(PendingRequest{what, std::move(cb), inline_reply}, route);
  }
  const uint64_t rid = AddPending(what, cb, inline_reply);
  if (rid == 0) {
    Complete(PendingRequest{what, std::move(cb), inline_reply},
             Unavailable(std::string(what) + " to " + Who() + " failed: the connection is down" + DownReason()));
    return;
  }
  auto m = std::make_shared<Message>();
  m->body = std::move(body);
  auto core = core_;
  const uint64_t id = id_;
  if (!core->Post([core, id, rid, m, timeout_ms] { core->AskOnLoop(id, rid, m, timeout_ms); }))
    Finish(rid, Unavailable(std::string(what) + " to " + Who() + " failed: the endpoint shut down"));
}

void ConnImpl::Close() {
  if (!MarkDown(Unavailable("connection to " + Who() + " closed"))) return;
  auto core = core_;
  const uint64_t id = id_;
  core->Post([core, id] { core->DownById(id, Unavailable("closed")); });
}

// ------------------------------------------------------------ the served services

// A request of the peer's, handled like any message: its reply is the
// call's return (or, when large, a call on the asker's Channel).
class Service {
 public:
  Service(Core* core, Link* link) : core_(core), id_(link->conn->id()) {}

 protected:
  // Finds this connection's link for the call being served (link_), false
  // once the link is gone: a call Cap'n Proto queued keeps its server alive
  // past the link that made it. Every entry point binds before using
  // link_, and only synchronously (no continuation reads it).
  bool Bind() {
    link_ = core_->FindLink(id_);
    return link_ != nullptr;
  }
  static kj::Promise<void> Gone() { return KJ_EXCEPTION(DISCONNECTED, "the connection is closed"); }

  template <class Ctx>
  kj::Promise<void> Ask(Ctx context, Body body, uint64_t asker_id) {
    Message m;
    m.body = std::move(body);
    const uint64_t id = link_->next_incoming;
    link_->next_incoming += 2;
    auto paf = kj::newPromiseAndFulfiller<Message>();
    link_->incoming.emplace(id, Link::Incoming{kj::mv(paf.fulfiller), asker_id});
    m.request_id = id;
    if (Inline(m)) core_->on_message(link_->conn, std::move(m));
    else link_->conn->Deliver(std::move(m));
    return paf.promise.then([context](Message reply) mutable {
      if (std::holds_alternative<Heartbeat>(reply.body) && reply.request_id == kSentByTell) {
        context.getResults().setByTell(true);
        return;
      }
      // A return's bytes leave after this promise is done, with no way to
      // know when: its tensors are copied, not referenced.
      Status s = EncodeEnvelope(reply, context.getResults().initReply(), /*reference_tensors=*/false);
      if (!s.ok()) {
        Message e;
        e.request_id = reply.request_id;
        e.body = StatusReply{s.WithPrefix("the reply cannot be sent")};
        Status s2 = EncodeEnvelope(e, context.getResults().initReply(), false);
        if (!s2.ok()) throw KJ_EXCEPTION(FAILED, s2.message());
      }
    });
  }

  // A request whose parameters are (request :T, id).
  template <class T, class Ctx>
  kj::Promise<void> AskStruct(Ctx context) {
    if (!Bind()) return Gone();
    auto p = context.getParams();
    T m;
    Status s = DecodeStruct<T>(p.getRequest(), core_->limits, &m);
    const uint64_t asker = p.getId();
    context.releaseParams();
    if (!s.ok()) return Malformed(s);
    return Ask(kj::mv(context), Body(std::move(m)), asker);
  }

  // One-way messages of kind T: handled in order; the call returns once
  // they are, which bounds what a sender can have queued here.
  template <class T, class List>
  kj::Promise<void> TellStructs(List list) {
    if (list.size() > core_->limits.max_list_elements)
      return Malformed(InvalidArgument("a call of " + std::to_string(list.size()) + " messages"));
    std::vector<Message> queued;
    for (auto r : list) {
      T m;
      Status s = DecodeStruct<T>(r, core_->limits, &m);
      if (!s.ok()) return Malformed(s);
      Message msg;
      msg.body = std::move(m);
      HandOver(std::move(msg), &queued);
    }
    return Queue(std::move(queued));
  }

  // A decoded one-way message: handled now when inline, else queued for
  // the connection's strand.
  void HandOver(Message m, std::vector<Message>* queued) {
    if (!core_->on_message) return;
    if (Inline(m)) core_->on_message(link_->conn, std::move(m));
    else queued->push_back(std::move(m));
  }

  // TellStructs over a list of context's parameters, which are released
  // once decoded.
  template <class T, class Ctx, class List>
  kj::Promise<void> TellReleasing(Ctx& context, List list) {
    if (!Bind()) return Gone();
    auto p = TellStructs<T>(list);
    context.releaseParams();
    return p;
  }

  kj::Promise<void> Queue(std::vector<Message> queued) {
    if (queued.empty()) return kj::READY_NOW;
    auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
    auto done = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(kj::mv(paf.fulfiller));
    auto conn = link_->conn;
    auto msgs = std::make_shared<std::vector<Message>>(std::move(queued));
    conn->strand_->Add([conn, msgs, done] {
      for (auto& m : *msgs) conn->core_->on_message(conn, std::move(m));
      (*done)->fulfill();
    });
    return kj::mv(paf.promise);
  }

  // Malformed bytes from an authenticated peer: it is dropped (the stream
  // cannot be trusted further) and the call fails.
  kj::Promise<void> Malformed(const Status& s) {
    Core* core = core_;
    const uint64_t id = link_->conn->id();
    link_->tasks->add(kj::evalLater([core, id, s] { core->DownById(id, s.WithPrefix("malformed message")); }));
    return KJ_EXCEPTION(FAILED, s.message());
  }

  bool Inline(const Message& m) const {
    return core_->on_message && core_->options.handle_inline && core_->options.handle_inline(m);
  }

  Core* core_;
  const uint64_t id_;
  Link* link_ = nullptr;  // the bound call's (Bind)
};

class ChannelServer final : public rp::Channel::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> heartbeat(HeartbeatContext) override { return kj::READY_NOW; }
  kj::Promise<void> replies(RepliesContext context) override {
    if (!Bind()) return Gone();
    auto list = context.getParams().getReplies();
    if (list.size() > core_->limits.max_list_elements)
      return Malformed(InvalidArgument("a call of " + std::to_string(list.size()) + " replies"));
    for (auto env : list) {
      auto m = DecodeEnvelope(env, core_->limits);
      if (!m.ok()) return Malformed(m.status());
      if (m->request_id == 0) return Malformed(InvalidArgument("a reply that names no request"));
      link_->conn->Finish(m->request_id, std::move(*m));
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> progress(ProgressContext c) override {
    return TellReleasing<StepProgress>(c, c.getParams().getReports());
  }
  kj::Promise<void> members(MembersContext context) override {
    // Nodes change membership only through the Membership service, which
    // is handed to nodes alone; views are for watchers.
    if (core_->credential.role == Role::kNode)
      return Malformed(PermissionDenied("a membership view sent to a node's channel"));
    return TellReleasing<Membership>(context, context.getParams().getViews());
  }
};

class PartitionHostServer final : public rp::PartitionHost::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> registerPartition(RegisterPartitionContext c) override { return AskStruct<RegisterPartition>(c); }
  kj::Promise<void> run(RunContext c) override { return AskStruct<RunPartition>(c); }
  kj::Promise<void> closeSession(CloseSessionContext c) override { return AskStruct<CloseSession>(c); }
  kj::Promise<void> abort(AbortContext c) override { return TellReleasing<AbortStep>(c, c.getParams().getSteps()); }
  kj::Promise<void> cleanup(CleanupContext c) override {
    return TellReleasing<CleanupStep>(c, c.getParams().getSteps());
  }
};

class VariableStoreServer final : public rp::VariableStore::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> variables(VariablesContext c) override { return AskStruct<Variables>(c); }
};

class MembersServer final : public rp::Members::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> list(ListContext c) override {
    if (!Bind()) return Gone();
    const uint64_t asker = c.getParams().getId();
    c.releaseParams();
    return Ask(c, Body(ListMembers{}), asker);
  }
};

class MembershipServer final : public rp::Membership::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> exchange(ExchangeContext c) override { return AskStruct<Membership>(c); }
  kj::Promise<void> gossip(GossipContext c) override { return TellReleasing<Membership>(c, c.getParams().getUpdates()); }
};

class RendezvousServer final : public rp::Rendezvous::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> send(SendContext c) override { return TellReleasing<SendTensor>(c, c.getParams().getTensors()); }

  kj::Promise<void> sendPiece(SendPieceContext c) override {
    if (!Bind()) return Gone();
    auto piece = c.getParams().getPiece();
    if (piece.hasHeader()) {
      if (link_->assembly) return Malformed(InvalidArgument("a streamed tensor began before the last one ended"));
      auto a = std::make_unique<Link::Assembly>();
      DType dtype = DType::kInvalid;
      Shape shape;
      Status s = DecodeStreamedHeader(piece.getHeader(), core_->limits, &a->message, &dtype, &shape, &a->total);
      if (!s.ok()) return Malformed(s);
      // No larger than one message or all the peer may have in flight here.
      const uint64_t cap = std::max(core_->options.max_frame_bytes, core_->options.max_peer_buffer_bytes);
      if (a->total > cap)
        return Malformed(InvalidArgument("a streamed tensor of " + std::to_string(a->total) + " bytes; the limit is " +
                                         std::to_string(cap)));
      try {
        a->message.value = Tensor(dtype, std::move(shape));
      } catch (const std::exception& e) {
        return Malformed(ResourceExhausted(std::string("a streamed tensor cannot be allocated: ") + e.what()));
      }
      a->start_ms = NowMs();
      link_->assembly = std::move(a);
    }
    if (!link_->assembly) return Malformed(InvalidArgument("a tensor piece without a streamed tensor begun"));
    Link::Assembly& a = *link_->assembly;
    auto data = piece.getData();
    if (piece.getOffset() != a.got || data.size() > a.total - a.got)
      return Malformed(InvalidArgument("a tensor piece of " + std::to_string(data.size()) + " bytes at offset " +
                                       std::to_string(piece.getOffset()) + " of a tensor of " +
                                       std::to_string(a.total) + " bytes, " + std::to_string(a.got) + " received"));
    auto* dst = static_cast<uint8_t*>(a.message.value.raw_data()) + a.got;
    if (data.size() > 0) std::memcpy(dst, data.begin(), data.size());
    if (a.message.value.dtype() == DType::kBool)  // any nonzero byte is true, as decoded whole
      for (size_t i = 0; i < data.size(); ++i) dst[i] = dst[i] != 0;
    a.got += data.size();
    c.releaseParams();
    if (a.got < a.total) return kj::READY_NOW;
    Message m;
    m.body = std::move(a.message);
    link_->assembly.reset();
    std::vector<Message> queued;
    HandOver(std::move(m), &queued);
    return Queue(std::move(queued));
  }
};

class CollectivesServer final : public rp::Collectives::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> chunks(ChunksContext c) override {
    return TellReleasing<CollectiveChunk>(c, c.getParams().getChunks());
  }
};

class DiagnosticsServer final : public rp::Diagnostics::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> echo(EchoContext c) override { return AskStruct<Echo>(c); }
};

// The services this process lets a peer of peer_role call: a node serves
// partitions, variables and the member list to every peer, membership
// changes, tensors and collectives to nodes only; everyone serves the
// channel and diagnostics.
void BuildServices(Core* core, Link* l, Role self, Role peer_role, rp::Services::Builder b) {
  b.setChannel(kj::heap<ChannelServer>(core, l));
  b.setDiagnostics(kj::heap<DiagnosticsServer>(core, l));
  if (self != Role::kNode) return;
  b.setPartitions(kj::heap<PartitionHostServer>(core, l));
  b.setVariables(kj::heap<VariableStoreServer>(core, l));
  b.setMembers(kj::heap<MembersServer>(core, l));
  if (peer_role != Role::kNode) return;
  b.setMembership(kj::heap<MembershipServer>(core, l));
  b.setRendezvous(kj::heap<RendezvousServer>(core, l));
  b.setCollectives(kj::heap<CollectivesServer>(core, l));
}

// Keeps the services a peer handed over; InvalidArgument when it gave no
// channel (every peer must take heartbeats and replies).
Status TakeServices(Link* l, Role self, rp::Services::Reader s) {
  if (!s.hasChannel()) return InvalidArgument("the peer's hello offers no channel");
  Link::Remote& r = l->services;
  uint32_t mask = 0;
  r.channel = s.getChannel();
  mask |= kChannelService;
  if (s.hasPartitions()) r.partitions = s.getPartitions(), mask |= kPartitionsService;
  if (s.hasVariables()) r.variables = s.getVariables(), mask |= kVariablesService;
  if (s.hasMembers()) r.members = s.getMembers(), mask |= kMembersService;
  if (s.hasMembership()) r.membership = s.getMembership(), mask |= kMembershipService;
  if (s.hasRendezvous()) r.rendezvous = s.getRendezvous(), mask |= kRendezvousService;
  if (s.hasCollectives()) r.collectives = s.getCollectives(), mask |= kCollectivesService;
  if (s.hasDiagnostics()) r.diagnostics = s.getDiagnostics(), mask |= kDiagnosticsService;
  if (self == Role::kNode && !s.hasMembership()) mask |= kMembershipViews;
  l->conn->services_ = mask;
  return Status::OK();
}

// The bootstrap: hello only, on the side that was dialed.
class PeerServer final : public rp::Peer::Server {
 public:
  PeerServer(Core* core, Link* link) : core_(core), id_(link->conn->id()) {}

  kj::Promise<void> hello(HelloContext context) override {
    // As Service::Bind: the call may come after the link is gone.
    link_ = core_->FindLink(id_);
    if (!link_) return KJ_EXCEPTION(DISCONNECTED, "the connection is closed");
    auto params = context.getParams();
    auto in = params.getInfo();
    auto out = context.getResults();
    auto info = out.initInfo();
    info.setVersion(kWireVersion);
    info.setName(core_->options.node_name);
    info.setListenAddress(core_->listen_address_);
    info.setRole(RoleName(core_->credential.role));
    Status s = refused_ ? FailedPrecondition("hello after a refused hello") : Check(in, params.getServices());
    auto st = out.initStatus();
    st.setCode(static_cast<uint32_t>(s.code()));
    st.setMessage(s.message());
    if (!s.ok()) {
      refused_ = true;
      core_->LogRefusal(link_->conn->peer_address(), s.message());
      // Answer first, then drop once the answer had time to leave: the
      // dialer learns why (dropped at once, the answer could die queued).
      Core* core = core_;
      const uint64_t id = link_->conn->id();
      link_->tasks->add(core->timer_->afterDelay(100 * kj::MILLISECONDS).then([core, id, s] { core->DownById(id, s); }));
      return kj::READY_NOW;
    }
    BuildServices(core_, link_, core_->credential.role, link_->conn->peer_role_, out.initServices());
    return kj::READY_NOW;
  }

 private:
  bool refused_ = false;
  Status Check(rp::HelloInfo::Reader in, rp::Services::Reader services) {
    if (link_->side == Side::CLIENT) return PermissionDenied("hello goes to the side that was dialed");
    if (link_->hello_done) return FailedPrecondition("hello twice");
    if (in.getVersion() != kWireVersion)
      return FailedPrecondition("peer speaks wire version " + std::to_string(in.getVersion()) +
                                ", this node speaks " + std::to_string(kWireVersion));
    auto claimed = ParseRole(in.getRole().cStr());
    if (!claimed.ok()) return PermissionDenied(claimed.status().message());
    if (link_->cert_checked && *claimed != link_->cert_role)
      return PermissionDenied(std::string("peer claims role ") + RoleName(*claimed) + " but its certificate is for " +
                              RoleName(link_->cert_role));
    if (in.getName().size() > 1024 || in.getListenAddress().size() > 1024)
      return InvalidArgument("hello names longer than 1024 bytes");
    SF_RETURN_IF_ERROR(TakeServices(link_, core_->credential.role, services));
    ConnImpl& c = *link_->conn;
    c.peer_name_ = in.getName().cStr();
    c.peer_listen_ = in.getListenAddress().cStr();
    c.peer_role_ = link_->cert_checked ? link_->cert_role : *claimed;
    if (!c.MarkUp()) return Unavailable("went down during hello");
    link_->hello_done = true;
    if (link_->slot) link_->slot->HandshakeDone();
    return Status::OK();
  }

  Core* core_;
  const uint64_t id_;
  Link* link_ = nullptr;  // the current call's
};

// ------------------------------------------------------------ Core

void Core::LoopMain(std::promise<Status>* ready) {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  loop_id_ = std::this_thread::get_id();
  timer_ = &io.provider->getTimer();
  network_ = &io.provider->getNetwork();
  tasks_ = kj::heap<kj::TaskSet>(*this);
  tick_ms_ = std::max(10, std::min(options.heartbeat_ms, options.peer_timeout_ms) / 4);
  if (!options.insecure) {
    auto ctx = TlsContext::Create(credential);
    if (ctx.ok()) {
      tls_ = *ctx;
    } else {
      tasks_ = nullptr;
      {
        std::lock_guard<std::mutex> l(inbox_mu_);
        closed_ = true;
      }
      ready->set_value(ctx.status());
      return;
    }
  }
  tasks_->add(TickLoop());
  // kj runs queued events without looking at the sockets or the timers until
  // none is left, and a long message read or written in chunks is a chain of
  // ready events: for a 256 MiB TLS echo this loop went 2 s without a tick,
  // a heartbeat or another peer's bytes, and its peers dropped it as silent.
  io.waitScope.setBusyPollInterval(kBusyPollEvents);
  ready->set_value(Status::OK());
  while (!stop_requested_) {
    auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
    {
      std::lock_guard<std::mutex> l(inbox_mu_);
      wake_ = kj::mv(paf.fulfiller);
      signaled_ = !inbox_.empty();
      if (signaled_) wake_->fulfill();
    }
    paf.promise.wait(io.waitScope);
    std::deque<std::function<void()>> work;
    {
      std::lock_guard<std::mutex> l(inbox_mu_);
      work.swap(inbox_);
    }
    for (auto& fn : work) fn();
    graveyard_.clear();
  }
  // Shut down: every connection fails now, on this thread, with its kj objects.
  {
    std::lock_guard<std::mutex> l(inbox_mu_);
    closed_ = true;
    wake_ = nullptr;
    inbox_.clear();
  }
  for (auto& [id, link] : links_) link->conn->MarkDown(Unavailable("the endpoint shut down"));
  links_.clear();
  graveyard_.clear();
  receivers_.clear();
  tasks_ = nullptr;
  tls_ = nullptr;
}

kj::Promise<Result<uint16_t>> Core::ListenOnLoop(std::string host, uint16_t port) {
  const std::string where = host + ":" + std::to_string(port);
  return network_->parseAddress(host, port)
      .then([this, host](kj::Own<kj::NetworkAddress> addr) -> Result<uint16_t> {
        auto r = addr->listen();
        const uint16_t bound = static_cast<uint16_t>(r->getPort());
        // Peers' hellos carry where this endpoint listens, so a node can
        // check an address it was told is really a node's (read on this thread).
        if (listen_address_.empty()) listen_address_ = host + ":" + std::to_string(bound);
        receivers_.push_back(kj::mv(r));
        AcceptLoop(*receivers_.back());
        return bound;
      })
      .catch_([where](kj::Exception&& e) -> Result<uint16_t> {
        return Unavailable("cannot listen on " + where + ": " + Describe(e));
      });
}

void Core::AcceptLoop(kj::ConnectionReceiver& r) {
  // evalNow: kj's accept throws at once when out of descriptors; that must
  // reach the retry below, not end the loop.
  tasks_->add(kj::evalNow([&r] { return r.acceptAuthenticated(); }).then(
      [this, &r](kj::AuthenticatedStream s) -> kj::Promise<void> {
        // Re-armed first: nothing one peer's setup throws may end accepting.
        AcceptLoop(r);
        KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { OnAccepted(kj::mv(s)); })) {
          LogRefusal("(accept)", "setting up a peer failed: " + Describe(*e));
        }
        return kj::READY_NOW;
      },
      [this, &r](kj::Exception&& e) -> kj::Promise<void> {
        // Out of descriptors (or another failed accept): free one by dropping
        // the oldest handshake and retry, or retry shortly; never stop accepting.
        LogRefusal("(accept)", Describe(e));
        if (EvictOldestHandshake()) return kj::evalLater([this, &r] { AcceptLoop(r); });
        return timer_->afterDelay(50 * kj::MILLISECONDS).then([this, &r] { AcceptLoop(r); });
      }));
}

void Core::OnAccepted(kj::AuthenticatedStream s) {
  NoDelay(*s.stream);
  std::string address = "unknown peer";
  if (auto* id = dynamic_cast<kj::NetworkPeerIdentity*>(s.peerIdentity.get())) address = id->getAddress().toString().cStr();
  std::string source = address;
  const size_t colon = source.rfind(':');
  if (colon != std::string::npos) source = source.substr(0, colon);
  if (total_conns >= options.max_connections) return LogRefusal(source, "too many connections in all");
  if (per_source[source] >= options.max_connections_per_source)
    return LogRefusal(source, "too many connections from this address");
  if (static_cast<int>(handshaking_.size()) >= options.max_handshakes) {
    LogRefusal(source, "too many handshakes in flight: dropping the oldest");
    EvictOldestHandshake();
  }
  auto slot = kj::heap<Slot>();
  slot->core = this;
  slot->source = source;
  const uint64_t hs = slot->handshake = next_handshake_++;
  handshaking_[hs];
  ++total_conns;
  ++per_source[source];
  if (!tls_) {
    if (Link* l = StartLink(Side::SERVER, kj::mv(s.stream), address, kj::mv(slot), nullptr)) handshaking_[hs].link = l->conn->id();
    return;
  }
  auto canceler = kj::heap<kj::Canceler>();
  kj::Canceler& cancel = *canceler;
  handshaking_[hs].canceler = kj::mv(canceler);
  auto deadline = timer_->afterDelay(options.handshake_timeout_ms * kj::MILLISECONDS).then([]() -> TlsStream {
    kj::throwFatalException(KJ_EXCEPTION(FAILED, "no TLS handshake within the deadline"));
  });
  auto handshake = kj::evalNow([&] { return WrapTls(tls_, kj::mv(s.stream), false, ""); });
  tasks_->add(cancel.wrap(handshake.exclusiveJoin(kj::mv(deadline)))
                  .then(
                      [this, address, hs, slot = kj::mv(slot)](TlsStream t) mutable {
                        Link* l = StartLink(Side::SERVER, kj::mv(t.stream), address, kj::mv(slot), &t.peer_common_name);
                        auto it = handshaking_.find(hs);
                        if (l && it != handshaking_.end()) it->second.link = l->conn->id();
                      },
                      [this, source](kj::Exception&& e) {
                        LogRefusal(source, "TLS handshake failed: " + Describe(e));
                      }));
}

Link* Core::StartLink(Side side, kj::Own<kj::AsyncIoStream> stream, std::string peer_address, kj::Own<Slot> slot,
                      const std::string* common_name) {
  const uint64_t id = next_link_id_++;
  auto link = kj::heap<Link>();
  Link* l = link.get();
  l->conn = std::make_shared<ConnImpl>(shared_from_this(), id, &pool, std::move(peer_address));
  l->slot = kj::mv(slot);
  l->side = side;
  l->tasks = kj::heap<kj::TaskSet>(*this);
  l->last_tick_ms = NowMs();
  if (common_name) {
    std::string name;
    Status s = ParseCommonName(*common_name, &l->cert_role, &name);
    if (!s.ok()) {
      LogRefusal(l->conn->peer_address(), s.message());
      return nullptr;  // link and stream dropped
    }
    l->cert_checked = true;
  }
  if (!options.insecure && !l->cert_checked) {
    LogRefusal(l->conn->peer_address(), "no client certificate");
    return nullptr;
  }
  l->meter = kj::heap<Meter>(kj::mv(stream));
  capnp::ReaderOptions ro;
  ro.traversalLimitInWords = options.max_frame_bytes / sizeof(capnp::word) + 4096;
  ro.nestingLimit = 32;
  l->network = kj::heap<capnp::TwoPartyVatNetwork>(*l->meter, side, ro);
  rp::Peer::Client boot = kj::heap<PeerServer>(this, l);
  l->rpc = kj::heap<capnp::RpcSystem<VatId>>(capnp::makeRpcServer(*l->network, kj::mv(boot)));
  l->rpc->setFlowLimit(std::max<uint64_t>(options.max_peer_buffer_bytes / sizeof(capnp::word), 1 << 16));
  capnp::MallocMessageBuilder vat;
  auto vid = vat.initRoot<VatId>();
  vid.setSide(side == Side::CLIENT ? Side::SERVER : Side::CLIENT);
  l->remote = l->rpc->bootstrap(vid).castAs<rp::Peer>();
  l->tasks->add(l->network->onDisconnect().then([this, l] {
    Down(l, Unavailable("connection closed by " + l->conn->Who()));
  }));
  // A dialer gives up on its own deadline; this one drops the link too.
  const int hello_ms = side == Side::SERVER ? options.handshake_timeout_ms : options.connect_timeout_ms;
  l->tasks->add(timer_->afterDelay(std::max(1, hello_ms) * kj::MILLISECONDS).then([this, l, hello_ms] {
    if (l->hello_done) return;
    if (l->side == Side::SERVER)
      LogRefusal(l->conn->peer_address(), "no hello within " + std::to_string(hello_ms) + " ms");
    Down(l, DeadlineExceeded("no hello within " + std::to_string(hello_ms) + " ms"));
  }));
  links_.emplace(id, kj::mv(link));
  return l;
}

kj::Promise<Result<ConnectionPtr>> Core::ConnectOnLoop(std::string address) {
  std::string host;
  uint16_t port = 0;
  Status ps = ParseAddress(address, &host, &port);
  if (!ps.ok()) return Result<ConnectionPtr>(ps);
  auto stage = std::make_shared<std::string>("connect");
  auto work =
      network_->parseAddress(host, port)
          .then([](kj::Own<kj::NetworkAddress> a) { return a->connectAuthenticated().attach(kj::mv(a)); })
          .then([this, stage](kj::AuthenticatedStream s) -> kj::Promise<TlsStream> {
            NoDelay(*s.stream);
            if (!tls_) {
              TlsStream plain;
              plain.stream = kj::mv(s.stream);
              return kj::mv(plain);
            }
            *stage = "tls";
            return WrapTls(tls_, kj::mv(s.stream), true, kNodeHostName);
          })
          .then([this, stage, address](TlsStream s) -> kj::Promise<Result<ConnectionPtr>> {
            *stage = "hello";
            Link* l = StartLink(Side::CLIENT, kj::mv(s.stream), address, kj::Own<Slot>(),
                                tls_ ? &s.peer_common_name : nullptr);
            if (!l) return Result<ConnectionPtr>(PermissionDenied("node " + address + " presented a certificate without a role"));
            if (l->cert_checked && l->cert_role != Role::kNode) {
              Down(l, PermissionDenied("not a node"));
              return Result<ConnectionPtr>(PermissionDenied(address + " is not a node (its certificate is for a " +
                                                            RoleName(l->cert_role) + ")"));
            }
            auto req = KJ_ASSERT_NONNULL(l->remote).helloRequest();
            auto info = req.initInfo();
            info.setVersion(kWireVersion);
            info.setName(options.node_name);
            info.setListenAddress(listen_address_);
            info.setRole(RoleName(credential.role));
            // Only nodes are dialed (a TLS peer of another role was refused above).
            BuildServices(this, l, credential.role, Role::kNode, req.initServices());
            const uint64_t id = l->conn->id();
            return req.send().then([this, id, address](capnp::Response<rp::Peer::HelloResults> r) -> Result<ConnectionPtr> {
              Link* l = FindLink(id);
              if (!l) return Unavailable("connection to " + address + " went down during hello");
              auto st = r.getStatus();
              if (st.getCode() != 0) {
                const auto code = st.getCode() <= static_cast<uint32_t>(Code::kResourceExhausted)
                                      ? static_cast<Code>(st.getCode())
                                      : Code::kUnavailable;
                Status s(code, "refused by " + address + ": " + std::string(st.getMessage().cStr()));
                Down(l, s);
                return s;
              }
              auto info = r.getInfo();
              if (info.getVersion() != kWireVersion) {
                Status s = FailedPrecondition("node " + address + " speaks wire version " +
                                              std::to_string(info.getVersion()) + ", this process speaks " +
                                              std::to_string(kWireVersion));
                Down(l, s);
                return s;
              }
              if (info.getName().size() > 1024 || info.getListenAddress().size() > 1024) {
                Down(l, InvalidArgument("hello name too long"));
                return InvalidArgument("node " + address + " sent a name or address longer than 1024 bytes");
              }
              l->conn->peer_name_ = info.getName().cStr();
              // What the node says, not what was dialed: a node checks a
              // member's address by dialing it and comparing the two.
              l->conn->peer_listen_ = info.getListenAddress().cStr();
              l->conn->peer_role_ = Role::kNode;
              Status taken = TakeServices(l, credential.role, r.getServices());
              if (!taken.ok()) {
                Down(l, taken);
                return InvalidArgument("node " + address + ": " + taken.message());
              }
              l->hello_done = true;
              if (!l->conn->MarkUp()) return Unavailable("connection to " + address + " went down during hello");
              return ConnectionPtr(l->conn);
            });
          });
  const int ms = options.connect_timeout_ms;
  auto deadline = timer_->afterDelay(std::max(1, ms) * kj::MILLISECONDS).then([address, ms]() -> Result<ConnectionPtr> {
    return Unavailable("cannot connect to " + address + ": no answer within " + std::to_string(ms) + " ms");
  });
  return work
      .catch_([stage, address](kj::Exception&& e) -> Result<ConnectionPtr> {
        if (*stage == "tls") {
          // A peer that closes mid-handshake may be full (out of connections
          // or descriptors) or may have refused our certificate without an
          // alert: not necessarily a credentials problem, so not PermissionDenied.
          if (e.getType() == kj::Exception::Type::DISCONNECTED)
            return Unavailable("TLS handshake with " + address + " failed: " + Describe(e) +
                               " (the node closed the connection: it may be out of connections or file "
                               "descriptors, or have refused this certificate; its log says which)");
          const std::string why = Describe(e);
          return PermissionDenied("TLS handshake with " + address + " failed: " + why +
                                  (why.find("wrong version number") != std::string::npos
                                       ? " (the node may be running --insecure, without TLS)"
                                       : ""));
        }
        if (*stage == "hello") return Unavailable("hello with " + address + " failed: " + Describe(e));
        return Unavailable("cannot connect to " + address + ": " + Describe(e));
      })
      .exclusiveJoin(kj::mv(deadline));
}

void Core::SendOnLoop(uint64_t id, std::shared_ptr<Message> m) {
  Link* l = FindLink(id);
  if (!l || !l->hello_done) return;
  // One call for what this turn sends (the inbox is drained in one go): a
  // call costs three RPC messages, a tensor of a burst should not. Big
  // tensors are not batched: the receiver reads a call whole.
  const size_t bytes = TensorBytes(*m) + 256;
  if (!l->outbox.empty() && l->outbox_bytes + bytes > kBatchBytes) Flush(id);
  l->outbox.push_back(std::move(m));
  l->outbox_bytes += bytes;
  if (l->flush_scheduled) return;
  l->flush_scheduled = true;
  l->tasks->add(kj::evalLater([this, id] { Flush(id); }));
}

namespace {

using Batch = std::vector<std::shared_ptr<Message>>;

// The method a one-way message goes by: replies to the peer's asks share
// one (Channel.replies), the rest one per body kind.
size_t TellKey(const Message& m) { return m.request_id != 0 ? ~size_t{0} : m.body.index(); }

template <class T, class List>
Status FillList(List list, const Batch& batch, size_t from) {
  for (unsigned k = 0; k < list.size(); ++k)
    SF_RETURN_IF_ERROR(EncodeStruct<T>(std::get<T>(batch[from + k]->body), list[k]));
  return Status::OK();
}

// Starts the one call carrying batch[from, from + n), all of one TellKey;
// its promise, or why it cannot be sent. Connection::Send checked the
// route against what the peer offers (fixed before the connection is up).
Result<kj::Promise<void>> TellCall(Link::Remote& r, uint32_t offered, const Batch& batch, size_t from, unsigned n) {
  const Message& first = *batch[from];
  if (first.request_id != 0) {
    auto req = r.channel.repliesRequest();
    auto list = req.initReplies(n);
    for (unsigned k = 0; k < n; ++k) SF_RETURN_IF_ERROR(EncodeEnvelope(*batch[from + k], list[k]));
    return kj::Promise<void>(req.send().ignoreResult());
  }
  using P = kj::Promise<void>;
  return std::visit(
      [&](const auto& b) -> Result<P> {
        using B = std::decay_t<decltype(b)>;
        // Fills the request's list (made by init) with the run and sends it.
        auto send = [&](auto req, auto init) -> Result<P> {
          SF_RETURN_IF_ERROR(FillList<B>(init(req), batch, from));
          return P(req.send().ignoreResult());
        };
        if constexpr (std::is_same_v<B, Heartbeat>) {
          return P(r.channel.heartbeatRequest().send().ignoreResult());
        } else if constexpr (std::is_same_v<B, StepProgress>) {
          return send(r.channel.progressRequest(), [n](auto& q) { return q.initReports(n); });
        } else if constexpr (std::is_same_v<B, AbortStep>) {
          return send(r.partitions.abortRequest(), [n](auto& q) { return q.initSteps(n); });
        } else if constexpr (std::is_same_v<B, CleanupStep>) {
          return send(r.partitions.cleanupRequest(), [n](auto& q) { return q.initSteps(n); });
        } else if constexpr (std::is_same_v<B, Membership>) {
          if ((offered & kMembershipService) == 0)  // a view for a watcher
            return send(r.channel.membersRequest(), [n](auto& q) { return q.initViews(n); });
          return send(r.membership.gossipRequest(), [n](auto& q) { return q.initUpdates(n); });
        } else if constexpr (std::is_same_v<B, SendTensor>) {
          return send(r.rendezvous.sendRequest(), [n](auto& q) { return q.initTensors(n); });
        } else if constexpr (std::is_same_v<B, CollectiveChunk>) {
          return send(r.collectives.chunksRequest(), [n](auto& q) { return q.initChunks(n); });
        } else {
          return InvalidArgument(std::string(BodyName(first.body)) + " cannot be sent one-way");
        }
      },
      first.body);
}

// Streams one large SendTensor as pieces of kBatchBytes, each a call that
// references its slice of the tensor (the last is copied when it is not
// whole words); the promise of them all.
Result<kj::Promise<void>> PieceCalls(Link::Remote& r, const SendTensor& st) {
  const Tensor& v = st.value;
  const auto* base = static_cast<const capnp::byte*>(v.raw_data());
  const uint64_t total = v.bytes();
  kj::Vector<kj::Promise<void>> calls;
  for (uint64_t off = 0; off < total; off += kBatchBytes) {
    const uint64_t len = std::min<uint64_t>(kBatchBytes, total - off);
    auto req = r.rendezvous.sendPieceRequest();
    auto piece = req.initPiece();
    if (off == 0) {
      SendTensor header = st;
      header.value = Tensor();
      auto h = piece.initHeader();
      SF_RETURN_IF_ERROR(EncodeStruct<SendTensor>(header, h));
      auto value = h.initValue();
      value.setDtype(DTypeToProto(v.dtype()));
      auto shape = value.initShape(v.rank());
      for (int i = 0; i < v.rank(); ++i) shape.set(i, v.dim(i));
    }
    piece.setOffset(off);
    if (len % sizeof(capnp::word) == 0) {
      piece.adoptData(capnp::Orphanage::getForMessageContaining(piece).referenceExternalData(
          capnp::Data::Reader(base + off, len)));
    } else {
      auto d = piece.initData(static_cast<unsigned>(len));
      std::memcpy(d.begin(), base + off, len);
    }
    calls.add(req.send().ignoreResult());
  }
  return kj::joinPromises(calls.releaseAsArray());
}

// True for a message that goes as pieces (Rendezvous.sendPiece).
bool Streamed(const Message& m) {
  auto* st = std::get_if<SendTensor>(&m.body);
  return m.request_id == 0 && st && st->value.valid() && st->value.bytes() > kBatchBytes;
}

// Starts the call for request m (id rid) on the peer's service for it
// (Connection::Request checked the route).
Result<kj::Promise<capnp::Response<rp::Reply>>> AskCall(Link::Remote& r, const Message& m, uint64_t rid) {
  using P = kj::Promise<capnp::Response<rp::Reply>>;
  return std::visit(
      [&](const auto& b) -> Result<P> {
        using B = std::decay_t<decltype(b)>;
        auto typed = [&](auto req) -> Result<P> {
          req.setId(rid);
          SF_RETURN_IF_ERROR(EncodeStruct<B>(b, req.initRequest()));
          return P(req.send());
        };
        if constexpr (std::is_same_v<B, RegisterPartition>) return typed(r.partitions.registerPartitionRequest());
        else if constexpr (std::is_same_v<B, RunPartition>) return typed(r.partitions.runRequest());
        else if constexpr (std::is_same_v<B, CloseSession>) return typed(r.partitions.closeSessionRequest());
        else if constexpr (std::is_same_v<B, Variables>) return typed(r.variables.variablesRequest());
        else if constexpr (std::is_same_v<B, Membership>) return typed(r.membership.exchangeRequest());
        else if constexpr (std::is_same_v<B, Echo>) return typed(r.diagnostics.echoRequest());
        else if constexpr (std::is_same_v<B, ListMembers>) {
          auto req = r.members.listRequest();
          req.setId(rid);
          return P(req.send());
        } else {
          return InvalidArgument(std::string(BodyName(m.body)) + " is not a request");
        }
      },
      m.body);
}

}  // namespace

void Core::Flush(uint64_t id) {
  Link* l = FindLink(id);
  if (!l) return;
  l->flush_scheduled = false;
  Batch out = std::move(l->outbox);
  l->outbox.clear();
  l->outbox_bytes = 0;
  size_t i = 0;
  while (i < out.size()) {
    // One call per run of one method, of at most kBatchBytes (or one
    // message). Every call goes now: asks are never held behind one-way
    // messages sent before them, and what a peer has not handled is
    // bounded by its flow limit (it stops reading) and our write deadline.
    size_t j = i + 1, bytes = TensorBytes(*out[i]) + 256;
    while (j < out.size() && TellKey(*out[j]) == TellKey(*out[i])) {
      const size_t b = TensorBytes(*out[j]) + 256;
      if (bytes + b > kBatchBytes) break;
      bytes += b;
      ++j;
    }
    auto batch = std::make_shared<Batch>(out.begin() + i, out.begin() + j);
    // A streamed tensor is alone in its run: it exceeds kBatchBytes.
    const Message& first = *(*batch)[0];
    auto call = Streamed(first) ? PieceCalls(l->services, std::get<SendTensor>(first.body))
                                : TellCall(l->services, l->conn->services_, *batch, 0,
                                           static_cast<unsigned>(batch->size()));
    if (!call.ok()) {
      Down(l, call.status().WithPrefix("sending a message"));
      return;
    }
    l->unanswered_bytes += bytes;
    // The return proves the bytes left; until then the tensors must live.
    l->tasks->add(call->then(
        [this, id, batch, bytes] {
          if (Link* l = FindLink(id)) l->unanswered_bytes -= bytes;
        },
        [this, id, batch](kj::Exception&& e) {
          if (Link* l = FindLink(id)) {
            for (auto& m : *batch) l->keepalive.push_back(m);
            Down(l, Unavailable(std::string("sending ") + BodyName((*batch)[0]->body) + " failed: " + Describe(e)));
          }
        }));
    i = j;
  }
}

void Core::ReplyOnLoop(uint64_t id, Message m) {
  Link* l = FindLink(id);
  if (!l) return;
  auto it = l->incoming.find(m.request_id);
  if (it == l->incoming.end()) return;  // not a request of this peer's, or answered
  Link::Incoming in = kj::mv(it->second);
  l->incoming.erase(it);
  // A reply that cannot be encoded takes the return path, which answers
  // with the error instead (a failed tell would drop the connection).
  if (in.asker_id != 0 && TensorBytes(m) >= kReplyByTellBytes && CheckEncodable(m).ok()) {
    // Large: the reply goes as a tell (referenced, kept alive until acked)
    // and the return only says so; the asker matches it by its own id.
    m.request_id = in.asker_id;
    SendOnLoop(id, std::make_shared<Message>(std::move(m)));
    Message marker;
    marker.request_id = kSentByTell;
    marker.body = Heartbeat{};
    in.fulfiller->fulfill(std::move(marker));
    return;
  }
  in.fulfiller->fulfill(std::move(m));
}

void Core::AskOnLoop(uint64_t id, uint64_t rid, std::shared_ptr<Message> m, int timeout_ms) {
  Link* l = FindLink(id);
  if (!l) return;  // its pending request was failed when it went down
  std::shared_ptr<ConnImpl> conn = l->conn;
  m->request_id = rid;  // a reply sent through our channel names it
  auto started = AskCall(l->services, *m, rid);
  if (!started.ok()) {
    conn->Finish(rid, started.status().WithPrefix(std::string("encoding ") + BodyName(m->body)));
    return;
  }
  auto call = started->then(
      [this, conn, rid](capnp::Response<rp::Reply> r) {
        if (r.getByTell()) return;  // the reply comes through our channel (Finish runs from it)
        auto reply = DecodeEnvelope(r.getReply(), limits);
        if (!reply.ok()) {
          conn->Finish(rid, reply.status().WithPrefix("reply from " + conn->Who()));
          DownById(conn->id(), reply.status().WithPrefix("malformed reply"));
          return;
        }
        conn->Finish(rid, std::move(*reply));
      },
      [this, conn, rid, m](kj::Exception&& e) {
        if (Link* l = FindLink(conn->id())) l->keepalive.push_back(m);
        conn->Finish(rid, Unavailable(std::string(BodyName(m->body)) + " to " + conn->Who() + " failed: " + Describe(e)));
      });
  auto deadline = timer_->afterDelay(std::max(1, timeout_ms) * kj::MILLISECONDS).then([this, conn, rid, m] {
    if (Link* l = FindLink(conn->id())) l->keepalive.push_back(m);
    conn->Finish(rid, DeadlineExceeded(std::string("request ") + BodyName(m->body) + " to " + conn->Who() + " timed out"));
  });
  l->tasks->add(call.exclusiveJoin(kj::mv(deadline)));
}

void Core::Tick() {
  const int64_t now = NowMs();
  std::vector<std::pair<Link*, Status>> down;
  for (auto& [id, lp] : links_) {
    Link* l = lp.get();
    Meter& m = *l->meter;
    // This thread ran late (a loaded machine): what it did not read is not
    // the peer's silence.
    if (now - l->last_tick_ms > 3 * tick_ms_ + 100) m.last_read_ms = std::max(m.last_read_ms, now - tick_ms_);
    l->last_tick_ms = now;
    if (l->network->getCurrentQueueCount() == 0) l->keepalive.clear();
    // A peer taking our bytes is not silent, though it sends none: it is
    // reading a long message of ours (for a 256 MiB reply over TLS, longer
    // than peer_timeout_ms here), and its own loop may be too busy to send a
    // heartbeat until it is done. A peer that stops taking them is the
    // write deadline's.
    const int64_t heard = m.HeardMs();
    if (now - heard > options.peer_timeout_ms) {
      down.push_back({l, Unavailable("no message from " + l->conn->Who() + " for " +
                                     std::to_string(now - heard) + " ms (peer hung or unreachable)")});
      continue;
    }
    if (m.WriteStalledMs(now) > options.write_timeout_ms) {
      down.push_back({l, ResourceExhausted(l->conn->Who() + " took none of our bytes for " +
                                           std::to_string(m.WriteStalledMs(now)) + " ms (not reading)")});
      continue;
    }
    if (l->assembly && now - l->assembly->start_ms > 1000 &&
        l->assembly->got < static_cast<uint64_t>(now - l->assembly->start_ms - 1000) * options.min_bytes_per_sec / 1000) {
      down.push_back({l, ResourceExhausted("a tensor " + l->conn->Who() + " streams arrives at under " +
                                           std::to_string(options.min_bytes_per_sec) + " bytes/s")});
      continue;
    }
    if (m.SlowFrame(now, options.min_bytes_per_sec)) {
      down.push_back({l, ResourceExhausted("a message from " + l->conn->Who() + " arrives at under " +
                                           std::to_string(options.min_bytes_per_sec) + " bytes/s")});
      continue;
    }
    // A peer that reads our calls but never answers them would keep every
    // one (and what it references) here: its heartbeat must come back
    // within the write deadline, and one is in flight at a time.
    if (l->heartbeat_sent_ms != 0 && now - l->heartbeat_sent_ms > options.write_timeout_ms) {
      down.push_back({l, ResourceExhausted(l->conn->Who() + " answered no heartbeat for " +
                                           std::to_string(now - l->heartbeat_sent_ms) + " ms")});
      continue;
    }
    if (l->unanswered_bytes > 2 * options.max_peer_buffer_bytes) {
      down.push_back({l, ResourceExhausted(l->conn->Who() + " leaves " + std::to_string(l->unanswered_bytes) +
                                           " bytes of our calls unanswered")});
      continue;
    }
    if (l->hello_done && l->heartbeat_sent_ms == 0 && m.writing == 0 && now - m.last_write_ms >= options.heartbeat_ms) {
      m.last_write_ms = now;
      l->heartbeat_sent_ms = now;
      const uint64_t id = l->conn->id();
      l->tasks->add(l->services.channel.heartbeatRequest().send().then([this, id](auto&&) {
        if (Link* l = FindLink(id)) l->heartbeat_sent_ms = 0;
      }));
    }
  }
  // What all peers' messages under way (and tensors streaming in) hold here,
  // together: each peer is capped on its own, but a thousand of them near
  // their caps would not be. Past the budget, the peers holding the most are
  // dropped until it is met.
  std::vector<std::pair<uint64_t, Link*>> held;
  uint64_t total = 0;
  for (auto& [id, lp] : links_) {
    Link* l = lp.get();
    const uint64_t b = l->meter->FrameBytesHeld() + (l->assembly ? l->assembly->got : 0);
    if (b == 0) continue;
    bool going = false;
    for (auto& d : down) going = going || d.first == l;
    if (going) continue;
    held.push_back({b, l});
    total += b;
  }
  if (total > options.max_inflight_bytes) {
    std::sort(held.begin(), held.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (auto& [b, l] : held) {
      if (total <= options.max_inflight_bytes) break;
      down.push_back({l, ResourceExhausted("the node holds " + std::to_string(total) + " bytes of messages under way "
                                           "from its peers, past its budget of " +
                                           std::to_string(options.max_inflight_bytes) + "; " + l->conn->Who() +
                                           " holds the most (" + std::to_string(b) + ")")});
      total -= b;
    }
  }
  for (auto& [l, why] : down) Down(l, why);
}

// ------------------------------------------------------------ Endpoint

class EndpointImpl final : public Endpoint {
 public:
  explicit EndpointImpl(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  ~EndpointImpl() override { Shutdown(); }

  Result<uint16_t> Listen(const std::string& host, uint16_t port) override {
    if (core_->OnLoopThread()) return Internal("Listen called on the endpoint's I/O thread");
    Core* c = core_.get();
    return core_->RunOnLoop<uint16_t>([c, host, port] { return c->ListenOnLoop(host, port); });
  }
  Result<ConnectionPtr> Connect(const std::string& address) override {
    if (core_->OnLoopThread()) return Internal("Connect called on the endpoint's I/O thread");
    Core* c = core_.get();
    return core_->RunOnLoop<ConnectionPtr>([c, address] { return c->ConnectOnLoop(address); });
  }
  void Shutdown() override { core_->Shutdown(); }

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace

Result<std::unique_ptr<Endpoint>> Endpoint::Create(EndpointOptions options, MessageHandler on_message,
                                                   DownHandler on_down) {
  if (options.heartbeat_ms <= 0 || options.peer_timeout_ms <= options.heartbeat_ms)
    return InvalidArgument("peer_timeout_ms (" + std::to_string(options.peer_timeout_ms) +
                           ") must exceed heartbeat_ms (" + std::to_string(options.heartbeat_ms) + ") > 0");
  if (options.max_connections <= 0 || options.max_connections_per_source <= 0 || options.max_handshakes <= 0)
    return InvalidArgument("connection caps must be positive");
  if (options.max_frame_bytes < 4096) return InvalidArgument("max_frame_bytes must be at least 4096");
  if (options.max_inflight_bytes < 4096) return InvalidArgument("max_inflight_bytes must be at least 4096");
  Credential cred;
  if (options.insecure) {
    cred.role = options.role;
  } else {
    if (options.tls_dir.empty())
      return InvalidArgument("no TLS credentials: give a directory made by `shardflow certs init` (or run insecure)");
    const std::string name = options.tls_name.empty() ? RoleName(options.role) : options.tls_name;
    SF_ASSIGN_OR_RETURN(cred, LoadCredential(options.tls_dir, name));
    if (cred.role != options.role)
      return InvalidArgument("credential '" + name + "' in " + options.tls_dir + " is for a " + RoleName(cred.role) +
                             ", this process is a " + RoleName(options.role));
  }
  auto core = std::make_shared<Core>(std::move(options), std::move(cred), std::move(on_message), std::move(on_down));
  SF_RETURN_IF_ERROR(core->Start());
  return std::unique_ptr<Endpoint>(new EndpointImpl(std::move(core)));
}

}  // namespace net
}  // namespace sf
