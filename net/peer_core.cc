// An endpoint's event loop: listening, accepting (with the caps on
// connections and handshakes), TLS, hello, dialing, and the tick that
// enforces what a peer may cost (net/peer_link.h, net/peer_rpc.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "net/peer_link.h"

namespace sf {
namespace net {
namespace detail {

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

// ------------------------------------------------------------ Core

void Core::LoopMain(std::promise<Status>* ready) {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  loop_id_ = std::this_thread::get_id();
  low_io_ = io.lowLevelProvider.get();
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
        // A connection that sends nothing stays in the kernel (a request
        // socket, no descriptor) until its first bytes: a flood of silent
        // connections at any rate never fills the accept queue, where the
        // kernel drops every source's new connections alike.
        const int defer_s = std::max(1, (options.handshake_timeout_ms + 999) / 1000);
        KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
          r->setsockopt(IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof defer_s);
        })) {
          Log("cannot defer accepting until a peer sends (TCP_DEFER_ACCEPT): " + Describe(*e));
        }
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

kj::Promise<kj::Own<kj::AsyncIoStream>> Core::DialFrom(const std::string& host, uint16_t port) {
  sockaddr_in local{}, remote{};
  local.sin_family = remote.sin_family = AF_INET;
  remote.sin_port = htons(port);
  if (::inet_pton(AF_INET, options.local_address.c_str(), &local.sin_addr) != 1 ||
      ::inet_pton(AF_INET, host.c_str(), &remote.sin_addr) != 1)
    return KJ_EXCEPTION(FAILED, "dialing from a local address takes numeric IPv4 addresses", options.local_address, host);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return KJ_EXCEPTION(FAILED, "cannot make a socket", strerror(errno));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
    const int err = errno;
    ::close(fd);
    return KJ_EXCEPTION(FAILED, "cannot bind to the local address", options.local_address, strerror(err));
  }
  using P = kj::LowLevelAsyncIoProvider;
  return low_io_->wrapConnectingSocketFd(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote,
                                         P::TAKE_OWNERSHIP | P::ALREADY_CLOEXEC | P::ALREADY_NONBLOCK);
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
        // the oldest handshake, else the least recently used connection of
        // the biggest holder (so idle authenticated peers cannot lock new
        // ones out), and retry; never stop accepting. A dropped connection's
        // descriptor closes once the loop empties its graveyard: the retry
        // waits a moment, or it would drop another.
        LogRefusal("(accept)", Describe(e));
        if (EvictOldestHandshake()) return kj::evalLater([this, &r] { AcceptLoop(r); });
        const int ms = EvictLeastUsed("", nullptr) ? 5 : 50;
        return timer_->afterDelay(ms * kj::MILLISECONDS).then([this, &r] { AcceptLoop(r); });
      }));
}

void Core::OnAccepted(kj::AuthenticatedStream s) {
  std::string address = "unknown peer";
  if (auto* id = dynamic_cast<kj::NetworkPeerIdentity*>(s.peerIdentity.get())) address = id->getAddress().toString().cStr();
  std::string source = address;
  const size_t colon = source.rfind(':');
  if (colon != std::string::npos) source = source.substr(0, colon);
  // No cap on connections in all here: authenticated ones are capped at
  // hello (Admit), where a new peer makes room; refusing here locked every
  // new peer out once idle ones filled the cap.
  if (per_source[source] >= options.max_connections_per_source)
    return LogRefusal(source, "too many connections from this address");
  // One address may hold half the handshakes: past that its new peers are
  // closed at once, which costs the loop an accept and a close, so that a
  // flood from one address at any rate neither evicts another's handshake
  // nor holds the loop from accepting it.
  auto busy = handshakes_per_source.find(source);
  if (busy != handshakes_per_source.end() && busy->second >= std::max(1, max_handshakes / 2))
    return LogRefusal(source, "too many handshakes in flight from this address");
  if (static_cast<int>(handshaking_.size()) >= max_handshakes) {
    LogRefusal(source, "too many handshakes in flight: dropping the oldest of the busiest address");
    EvictOldestHandshake();
  }
  NoDelay(*s.stream);  // not before: a refused peer costs an accept and a close, no more
  auto slot = kj::heap<Slot>();
  slot->core = this;
  slot->source = source;
  const uint64_t hs = slot->handshake = AddHandshake(source);
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
                        Link* l = StartLink(Side::SERVER, kj::mv(t.stream), address, kj::mv(slot), &t.peer_common_name,
                                                 &t.peer_unit);
                        auto it = handshaking_.find(hs);
                        if (l && it != handshaking_.end()) it->second.link = l->conn->id();
                      },
                      [this, source](kj::Exception&& e) {
                        LogRefusal(source, "TLS handshake failed: " + Describe(e));
                      }));
}

Link* Core::StartLink(Side side, kj::Own<kj::AsyncIoStream> stream, std::string peer_address, kj::Own<Slot> slot,
                      const std::string* common_name, const std::string* unit) {
  const uint64_t id = next_link_id_++;
  auto link = kj::heap<Link>();
  Link* l = link.get();
  l->conn = std::make_shared<ConnImpl>(shared_from_this(), id, &pool, std::move(peer_address));
  l->slot = kj::mv(slot);
  l->side = side;
  l->tasks = kj::heap<kj::TaskSet>(*this);
  l->last_tick_ms = l->last_used_ms = NowMs();
  if (common_name) {
    std::string name;
    Status s = ParseCommonName(*common_name, &l->cert_role, &name);
    if (!s.ok()) {
      LogRefusal(l->conn->peer_address(), s.message());
      return nullptr;  // link and stream dropped
    }
    l->cert_checked = true;
    l->credential = *common_name;
    // Only a session certificate's unit is a namespace (credentials.h).
    if (unit && l->cert_role == Role::kSession) l->cert_namespace = *unit;
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
  l->meter->HoldReads([this, l] { return OwesTooMuch(l); });
  rp::Peer::Client boot = MakePeerServer(this, l);
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
          .then([this, host, port](kj::Own<kj::NetworkAddress> a) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
            if (!options.local_address.empty()) return DialFrom(host, port);
            return a->connect().attach(kj::mv(a));
          })
          .then([this, stage](kj::Own<kj::AsyncIoStream> s) -> kj::Promise<TlsStream> {
            NoDelay(*s);
            if (!tls_) {
              TlsStream plain;
              plain.stream = kj::mv(s);
              return kj::mv(plain);
            }
            *stage = "tls";
            return WrapTls(tls_, kj::mv(s), true, kNodeHostName);
          })
          .then([this, stage, address](TlsStream s) -> kj::Promise<Result<ConnectionPtr>> {
            *stage = "hello";
            Link* l = StartLink(Side::CLIENT, kj::mv(s.stream), address, kj::Own<Slot>(),
                                tls_ ? &s.peer_common_name : nullptr, tls_ ? &s.peer_unit : nullptr);
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

void Core::Tick() {
  const int64_t now = NowMs();
  std::vector<std::pair<Link*, Status>> down;
  for (auto& [id, lp] : links_) {
    Link* l = lp.get();
    Meter& m = *l->meter;
    // This thread ran late (a loaded machine): what it did not read is not
    // the peer's silence.
    if (now - l->last_tick_ms > 3 * tick_ms_ + 100) m.last_read_ms = std::max(m.last_read_ms, now - tick_ms_);
    // Nor is what we do not read while its calls in flight are past the
    // flow limit (a 134 MB registration, for as long as it takes us). Half
    // the limit: our count of them is close to Cap'n Proto's, not the same.
    const bool flow_held = l->calls_bytes > options.max_peer_buffer_bytes / 2;
    if (flow_held) m.last_read_ms = std::max(m.last_read_ms, now - tick_ms_);
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
    // Not while its reads are held (its answer may wait in what we do not
    // read), nor counting the time they were; nor while our calls in flight
    // are past its flow limit (it does not read us until it answers them,
    // as a node does a 77 MB registration; it still sends us heartbeats).
    m.Recheck();
    const bool peer_holds = l->asked_bytes > options.max_peer_buffer_bytes / 2;
    if (peer_holds) l->heartbeat_held_until_ms = now;
    const int64_t asked = std::max({l->heartbeat_sent_ms, m.held_until_ms, l->heartbeat_held_until_ms});
    if (l->heartbeat_sent_ms != 0 && !m.Held() && !flow_held && !peer_holds && now - asked > options.write_timeout_ms) {
      down.push_back({l, ResourceExhausted(l->conn->Who() + " answered no heartbeat for " +
                                           std::to_string(now - asked) + " ms")});
      continue;
    }
    // Our replies it leaves unacknowledged are capped where they are sent
    // (ReplyOnLoop); the rest are our own messages.
    if (l->unanswered_bytes - l->reply_tell_bytes > options.max_unanswered_bytes) {
      down.push_back({l, ResourceExhausted(l->conn->Who() + " leaves " + std::to_string(l->unanswered_bytes) +
                                           " bytes of our one-way messages unanswered")});
      continue;
    }
    // One heartbeat in flight at a time, except while we do not read the
    // peer (flow limit): its answer waits unread, and the peer must still
    // hear from us.
    if (l->hello_done && (l->heartbeat_sent_ms == 0 || flow_held) && m.writing == 0 &&
        now - m.last_write_ms >= options.heartbeat_ms) {
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

}  // namespace detail
}  // namespace net
}  // namespace sf
