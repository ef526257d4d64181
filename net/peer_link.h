// The inside of net/peer_rpc.h's Endpoint, shared by its files (not a
// public header: only net/peer_*.cc include it).
//
// Threads: one kj event loop (all sockets, TLS, RPC state) and a pool of
// handler threads. Other threads reach the loop through Core::Post, an inbox
// drained between kj events. Everything named Link lives on the loop
// thread only; ConnImpl is the thread-safe face users hold.
//
// Files: peer_connection.cc (ConnImpl, routes), peer_services.cc (the
// served Cap'n Proto interfaces and hello), peer_core.cc (the loop, accept,
// connect, the tick that enforces the bounds), peer_send.cc (batching,
// streaming, asks and replies), peer_rpc.cc (Endpoint).
#pragma once

#include <capnp/message.h>
#include <capnp/rpc-twoparty.h>
#include <capnp/rpc.h>
#include <kj/async-io.h>
#include <kj/debug.h>

#include <algorithm>
#include <atomic>
#include <bitset>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "net/handler_pool.h"
#include "net/metered_stream.h"
#include "net/peer_rpc.h"
#include "net/tls_stream.h"
#include "net/wire_envelope.h"
#include "proto/peer.capnp.h"

namespace sf {
namespace net {
namespace detail {

using VatId = capnp::rpc::twoparty::VatId;
using Side = capnp::rpc::twoparty::Side;
namespace rp = proto::rpc;


constexpr size_t kReplyByTellBytes = size_t{1} << 20;
// One-way messages of a turn are batched into one tell up to this size.
constexpr size_t kBatchBytes = size_t{1} << 20;
// The request id of the marker a handler's reply becomes when sent as a tell.
constexpr uint64_t kSentByTell = ~uint64_t{0};
// Events the I/O loop runs in a row before it polls the sockets and timers.
constexpr unsigned kBusyPollEvents = 1024;

// T's index among Body's alternatives.
template <class T, class... Ts>
constexpr size_t KindOf(std::variant<Ts...>*) {
  size_t i = 0;
  bool found = false;
  ((found = found || std::is_same_v<T, Ts>, i += found ? 0 : 1), ...);
  return i;
}
// By message kind (Body's index): whether h handles it on the I/O thread.
std::bitset<std::variant_size_v<Body>> OnIoThreadKinds(const Handler& h);

// The bytes of m's tensors that an encoding could reference.
size_t TensorBytes(const Message& m);

// The services of proto/peer.capnp, as bits of a peer's offer.
enum : uint32_t {
  kChannelService = 1,
  kPartitionsService = 2,
  kVariablesService = 4,
  kMembersService = 8,
  kPlacementService = 16,
  kRendezvousService = 32,
  kCollectivesService = 64,
  kDiagnosticsService = 128,
  // Not a service of the peer's: this node may send the peer (a session or
  // another watcher that takes no placement orders) views of the
  // membership on the peer's channel.
  kMembershipViews = 256,
};

// The service's name for errors ("partition host").
const char* ServiceName(uint32_t s);

// whether it is asked (a request with a reply) or told (one-way). A body
// with neither (StatusReply, RunPartitionDone) is only ever a reply.
struct Route {
  uint32_t service = 0;
  bool ask = false;
  bool tell = false;
};

// The service and form (ask or tell) body travels by.
Route RouteOf(const Body& body);

// OK when body can go to a peer offering `offered` as a request (ask) or
// one-way; InvalidArgument for the wrong form, PermissionDenied naming the
// service (and the peer, by who(), called only then) when the peer gave
// this process none (its role may not use it).
template <class Who>
inline Status CheckRoute(const Body& body, bool ask, uint32_t offered, const Who& who) {
  const Route r = RouteOf(body);
  if (ask && !r.ask)
    return InvalidArgument(std::string(BodyName(body)) + " is not a request (it is " +
                           (r.tell ? "sent one-way)" : "only a reply)"));
  if (!ask && !r.tell)
    return InvalidArgument(std::string(BodyName(body)) + " is not a one-way message (it is " +
                           (r.ask ? "a request)" : "only a reply)"));
  if ((offered & r.service) == 0)
    return PermissionDenied(who() + " offers this process no " + ServiceName(r.service) + " service, which " +
                            BodyName(body) + " needs (the role of this process's certificate may not use it)");
  return Status::OK();
}

// A kj exception's description, for errors.
inline std::string Describe(const kj::Exception& e) { return e.getDescription().cStr(); }

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
  const std::string& peer_namespace() const override { return peer_namespace_; }

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
  // Answers the peer's request request_id (our number for it) with body;
  // any thread, once per request (later answers are dropped).
  void Reply(uint64_t request_id, Body body);
  // An Answer that replies to the peer's request request_id.
  template <class R>
  Answer<R> AnswerTo(uint64_t request_id) {
    auto self = shared_from_this();
    return Answer<R>([self, request_id](Body b) { self->Reply(request_id, std::move(b)); });
  }
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
  std::string peer_namespace_;
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
  std::string holder;      // its credential once admitted (Core::Admit), else ""
  ~Slot();
  // Stops counting it against the caps on authenticated connections (once).
  void ReleaseAdmission();
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
    rp::Placement::Client placement = nullptr;
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
  uint64_t reply_tell_bytes = 0;  // of those, our replies to the peer's asks
  // Our replies to the peer's asks not yet written to it, by where they end
  // in what we write to it (Meter::written): what the peer owes us reading.
  std::deque<std::pair<uint64_t, uint64_t>> owed;  // (end, bytes)
  uint64_t owed_bytes = 0;
  // The peer's calls not yet answered here, by their parameters' size: Cap'n
  // Proto stops reading the peer past its flow limit, which is then not
  // the peer's silence (Tick).
  uint64_t calls_bytes = 0;
  // Ours to the peer not yet answered, by their parameters' size: past the
  // peer's flow limit (taken as ours) it stops reading us until it answers,
  // so its silence about our heartbeat is not a hang (Tick).
  uint64_t asked_bytes = 0;
  int64_t heartbeat_held_until_ms = 0;  // when asked_bytes last held the heartbeat check
  // The peer's last call or ours (heartbeats aside): when the caps need a
  // place, the least recently used connection goes.
  int64_t last_used_ms = 0;
  bool hello_done = false;
  bool cert_checked = false;  // TLS: the role below is the certificate's
  std::string credential;     // TLS: the certificate's common name (what the caps count)
  Role cert_role = Role::kNode;
  std::string cert_namespace;  // TLS: a session certificate's namespace ("": default)
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
  Core(EndpointOptions o, Credential cred, Handler* h, Endpoint::DownHandler d)
      : options(std::move(o)), credential(std::move(cred)), handler(h), on_down(std::move(d)),
        on_io_thread(OnIoThreadKinds(*handler)), pool(options.handler_threads) {
    limits.max_frame_bytes = options.max_frame_bytes;
  }

  // Starts the loop thread; Internal when its TLS context cannot be made.
  Status Start() {
    FitCapsToDescriptors();
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

  // As Post, but from the loop thread itself (an inline handler's reply)
  // fn runs as a kj event of this turn: a post there writes the loop's own
  // eventfd and costs it an epoll round per reply. False when the loop ended.
  bool Soon(std::function<void()> fn) {
    if (!OnLoopThread()) return Post(std::move(fn));
    if (!tasks_ || stop_requested_) return false;
    tasks_->add(kj::evalLater(std::move(fn)));
    return true;
  }

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
  Handler* const handler;  // never null
  const Endpoint::DownHandler on_down;
  // By message kind (Body's index): handled on the I/O thread (Handler::OnIoThread).
  const std::bitset<std::variant_size_v<Body>> on_io_thread;
  // True when messages of type T run on the I/O thread.
  template <class T>
  bool OnIoThread() const {
    constexpr size_t kind = KindOf<T>(static_cast<Body*>(nullptr));
    static_assert(kind < std::variant_size_v<Body>, "T is no message of net::Body");
    return on_io_thread[kind];
  }
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
    std::string source;
  };
  std::map<uint64_t, Handshake> handshaking_;
  std::unordered_map<std::string, int> handshakes_per_source;
  uint64_t next_handshake_ = 1;
  // Authenticated peers that dialed us (admitted at hello), in all and by credential.
  int admitted = 0;
  // The caps on admitted connections and handshakes, lowered to fit the
  // descriptor limit (FitCapsToDescriptors).
  int max_admitted = 0;
  int max_handshakes = 0;
  // Sets the two caps above from the options and RLIMIT_NOFILE: accepted
  // peers may use all but an eighth of the descriptors (at least 16), which
  // stay for the process's own files, dials and etcd; handshakes at most a
  // quarter of what accepted peers may use.
  void FitCapsToDescriptors();
  std::unordered_map<std::string, int> per_credential;

  // (net/peer_admission.cc) Enters a handshake from source; its id.
  uint64_t AddHandshake(const std::string& source);
  // Ends handshake hs once (later calls do nothing).
  void EndHandshake(uint64_t hs);
  // Drops the oldest peer still handshaking from the source with the most
  // handshakes (a silent flood evicts only its own): room for a new peer
  // when the cap or the descriptors run out. False when none is handshaking.
  bool EvictOldestHandshake();
  // Counts a peer that passed hello against the caps on authenticated
  // connections, closing the least recently used connection of its
  // credential or of the biggest holder to make room; ResourceExhausted
  // when no other connection can go.
  Status Admit(Link* l);
  // Closes the least recently used admitted connection of holder ("": of
  // the credential holding the most), never `keep`; false when none.
  bool EvictLeastUsed(const std::string& holder, const Link* keep);
  // Whether our replies to l's peer not yet written to it are past its
  // cap, so its reads are held (our own calls and messages never hold them:
  // two nodes streaming to each other would wait on each other for good).
  bool OwesTooMuch(Link* l);
  // Counts a reply of `bytes` to l's peer as owed until written: it is in
  // Cap'n Proto's queue already (queued) or goes in just behind it.
  void NoteReplyQueued(Link* l, uint64_t bytes, bool queued);

 private:
  friend class PeerServer;
  void taskFailed(kj::Exception&& e) override {
    if (options.log && e.getType() != kj::Exception::Type::DISCONNECTED) Log("I/O task failed: " + Describe(e));
  }
  void LoopMain(std::promise<Status>* ready);
  // Connects to host:port (numeric IPv4) from options.local_address.
  kj::Promise<kj::Own<kj::AsyncIoStream>> DialFrom(const std::string& host, uint16_t port);
  void AcceptLoop(kj::ConnectionReceiver& r);
  void OnAccepted(kj::AuthenticatedStream s);
  // Makes the link of an authenticated stream; its connection, not yet up.
  Link* StartLink(Side side, kj::Own<kj::AsyncIoStream> stream, std::string peer_address, kj::Own<Slot> slot,
                  const std::string* common_name, const std::string* unit = nullptr);
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
  kj::LowLevelAsyncIoProvider* low_io_ = nullptr;  // for DialFrom
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

class PeerServer;
// The bootstrap capability of a new link: hello only (peer_services.cc).
rp::Peer::Client MakePeerServer(Core* core, Link* link);
// Fills b with the services this process lets a peer of peer_role call.
void BuildServices(Core* core, Link* l, Role self, Role peer_role, rp::Services::Builder b);
// Keeps the services a peer handed over; InvalidArgument when it gave no channel.
Status TakeServices(Link* l, Role self, rp::Services::Reader s);

}  // namespace detail
}  // namespace net
}  // namespace sf
