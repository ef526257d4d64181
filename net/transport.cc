// The TCP transport (net/transport.h): one reader thread per connection,
// one timer thread for heartbeats, peer timeouts and request deadlines.
#include "net/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "net/auth.h"
#include "net/wire.h"

namespace sf {
namespace net {

Result<Message> Call(const ConnectionPtr& c, Body body, int timeout_ms) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<Message>> reply;
  c->Request(std::move(body), timeout_ms, [&](Result<Message> r) {
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

using Clock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Waits until fd is readable or the deadline (ms since epoch, -1: none)
// passes; false on timeout.
bool WaitReadable(int fd, int64_t deadline_ms) {
  for (;;) {
    int timeout = -1;
    if (deadline_ms >= 0) {
      const int64_t left = deadline_ms - NowMs();
      if (left <= 0) return false;
      timeout = static_cast<int>(std::min<int64_t>(left, 1 << 30));
    }
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, timeout);
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let read() report it
  }
}

// Reads exactly n bytes; Unavailable on EOF or error, DeadlineExceeded on
// timeout. Each chunk that arrives stamps *alive (when given): a peer in the
// middle of sending a large frame is alive, not hung.
Status ReadFull(int fd, void* buf, size_t n, int64_t deadline_ms, const std::string& peer,
                std::atomic<int64_t>* alive = nullptr) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    if (deadline_ms >= 0 && !WaitReadable(fd, deadline_ms))
      return DeadlineExceeded("timed out reading from " + peer);
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      if (alive) alive->store(NowMs(), std::memory_order_relaxed);
    } else if (r == 0) {
      return Unavailable("connection closed by " + peer);
    } else if (errno != EINTR) {
      return Unavailable(Errno("read from " + peer));
    }
  }
  return Status::OK();
}

// Writes every piece; Unavailable on error.
Status WriteAll(int fd, std::vector<iovec> iov, const std::string& peer) {
  size_t i = 0;
  while (i < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - i, IOV_MAX));
    msghdr msg{};
    msg.msg_iov = &iov[i];
    msg.msg_iovlen = count;
    const ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Unavailable(Errno("write to " + peer));
    }
    size_t left = static_cast<size_t>(w);
    while (i < iov.size() && left >= iov[i].iov_len) left -= iov[i++].iov_len;
    if (left > 0) {
      iov[i].iov_base = static_cast<uint8_t*>(iov[i].iov_base) + left;
      iov[i].iov_len -= left;
    }
  }
  return Status::OK();
}

// Reads one frame; the decoded message or why not.
Result<Message> ReadMessage(int fd, int64_t deadline_ms, const WireLimits& limits,
                            const std::string& peer, std::atomic<int64_t>* alive = nullptr) {
  uint8_t header[kFrameHeaderBytes];
  SF_RETURN_IF_ERROR(ReadFull(fd, header, sizeof header, deadline_ms, peer, alive));
  auto size = ParseFrameHeader(header, limits);
  if (!size.ok()) return size.status().WithPrefix("frame from " + peer);
  // Uninitialised and 8-byte aligned: zeroing a 64 MiB body would cost as
  // much as reading it.
  std::unique_ptr<uint64_t[]> body(new uint64_t[(*size + 7) / 8]);
  auto* bytes = reinterpret_cast<uint8_t*>(body.get());
  SF_RETURN_IF_ERROR(ReadFull(fd, bytes, *size, deadline_ms, peer, alive));
  auto m = DecodeBody(bytes, *size, limits);
  if (!m.ok()) return m.status().WithPrefix("message from " + peer);
  return m;
}

Status WriteMessage(int fd, const Message& m, const std::string& peer) {
  auto frame = EncodeFrame(m);
  if (!frame.ok()) return frame.status().WithPrefix(std::string("encoding ") + BodyName(m.body));
  return WriteAll(fd, frame->pieces(), peer);
}

std::string SocketPeer(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "unknown peer";
  return std::string(host) + ":" + serv;
}

// Connects fd within timeout_ms. A blocking connect() waits minutes for a
// peer that drops SYNs (full accept queue, unreachable host), and nodes dial
// from threads that must not stall that long. Unavailable naming the address.
Status ConnectWithin(int fd, const sockaddr* addr, socklen_t len, int timeout_ms,
                     const std::string& address) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return Unavailable(Errno("socket for " + address));
  int r = ::connect(fd, addr, len);
  if (r != 0 && errno != EINPROGRESS && errno != EINTR)
    return Unavailable(Errno("cannot connect to " + address));
  if (r != 0) {
    const int64_t deadline = NowMs() + std::max(1, timeout_ms);
    for (;;) {
      const int64_t left = deadline - NowMs();
      if (left <= 0)
        return Unavailable("cannot connect to " + address + ": no answer within " +
                           std::to_string(timeout_ms) + " ms");
      pollfd p{fd, POLLOUT, 0};
      const int n = ::poll(&p, 1, static_cast<int>(left));
      if (n > 0) break;
      if (n < 0 && errno != EINTR) return Unavailable(Errno("cannot connect to " + address));
    }
    int err = 0;
    socklen_t elen = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
    if (err != 0) {
      errno = err;
      return Unavailable(Errno("cannot connect to " + address));
    }
  }
  if (::fcntl(fd, F_SETFL, flags) != 0) return Unavailable(Errno("socket for " + address));
  return Status::OK();
}

void TuneSocket(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

class TransportImpl;

class ConnImpl : public Connection, public std::enable_shared_from_this<ConnImpl> {
 public:
  ConnImpl(TransportImpl* t, int fd, bool dialer, std::string peer_addr)
      : transport_(t), fd_(fd), next_id_(dialer ? 1 : 2), peer_address_(std::move(peer_addr)) {
    const int64_t now = NowMs();
    last_recv_ms_ = now;
    last_send_ms_ = now;
  }
  ~ConnImpl() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Send(const Message& m) override {
    if (!up_) return Unavailable("connection to " + Describe() + " is down" + DownReason());
    auto frame = EncodeFrame(m);
    if (!frame.ok())
      return frame.status().WithPrefix(std::string("encoding ") + BodyName(m.body));
    Status s;
    {
      std::lock_guard<std::mutex> l(write_mu_);
      last_send_ms_ = NowMs();
      s = WriteAll(fd_, frame->pieces(), Describe());
      last_send_ms_ = NowMs();
    }
    if (!s.ok()) Down(s);
    return s;
  }

  void Request(Body body, int timeout_ms,
               std::function<void(Result<Message>)> on_reply) override {
    Message m;
    m.body = std::move(body);
    const char* name = BodyName(m.body);
    {
      std::lock_guard<std::mutex> l(pending_mu_);
      m.request_id = next_id_;
      next_id_ += 2;
      pending_[m.request_id] = Pending{NowMs() + std::max(1, timeout_ms), name, on_reply};
    }
    Status s = Send(m);
    if (!s.ok()) Fail(m.request_id, s);
  }

  void Close() override { Down(Unavailable("connection to " + Describe() + " closed")); }
  bool is_up() const override { return up_; }
  const std::string& peer_name() const override { return peer_name_; }
  const std::string& peer_address() const override { return peer_address_; }
  const std::string& peer_listen_address() const override { return peer_listen_; }

  // ": why" the connection went down ("" while up or when not known).
  std::string DownReason() {
    std::lock_guard<std::mutex> l(pending_mu_);
    return down_why_.empty() ? "" : ": " + down_why_;
  }

  std::string Describe() const {
    if (!peer_name_.empty()) return "node '" + peer_name_ + "' (" + peer_address_ + ")";
    return peer_address_;
  }

  // Marks the connection down once: wakes the reader, fails pending requests
  // and tells the transport.
  void Down(const Status& why);
  // Fails one pending request (when still pending).
  void Fail(uint64_t id, const Status& s) {
    std::function<void(Result<Message>)> cb;
    {
      std::lock_guard<std::mutex> l(pending_mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;
      cb = std::move(it->second.cb);
      pending_.erase(it);
    }
    cb(s);
  }
  // Heartbeat, silence and deadline checks (timer thread).
  void Tick(int64_t now, const TransportOptions& o);
  // Reads messages until the connection goes down (reader thread).
  void ReadLoop();
  // The dialer's and the listener's side of the handshake.
  Status DialHandshake(const TransportOptions& o);
  Status AcceptHandshake(const TransportOptions& o);


 private:
  struct Pending {
    int64_t deadline_ms;
    const char* what;
    std::function<void(Result<Message>)> cb;
  };
  bool IsOurRequest(uint64_t id) const { return id != 0 && (id % 2) == (next_parity_); }

  TransportImpl* transport_;
  int fd_;
  std::atomic<bool> up_{false};
  std::mutex write_mu_;
  std::mutex pending_mu_;
  uint64_t next_id_;                        // GUARDED_BY(pending_mu_)
  uint64_t next_parity_ = next_id_ % 2;
  std::map<uint64_t, Pending> pending_;     // GUARDED_BY(pending_mu_)
  std::string down_why_;                    // GUARDED_BY(pending_mu_): the first Down's cause
  std::atomic<int64_t> last_recv_ms_{0};
  std::atomic<int64_t> last_send_ms_{0};
  std::string peer_name_;
  std::string peer_address_;
  std::string peer_listen_;
  friend class TransportImpl;
};

class TransportImpl : public Transport {
 public:
  TransportImpl(TransportOptions o, MessageHandler m, DownHandler d)
      : options_(std::move(o)), on_message_(std::move(m)), on_down_(std::move(d)) {
    limits_.max_frame_bytes = options_.max_frame_bytes;
    timer_ = std::thread([this] { TimerLoop(); });
  }
  ~TransportImpl() override {
    Shutdown();
    // Threads that called Shutdown themselves (a handler, a reply callback)
    // were not joined there; they have returned from it by now or soon.
    std::vector<std::thread> deferred;
    {
      std::lock_guard<std::mutex> l(mu_);
      deferred.swap(deferred_);
    }
    for (auto& t : deferred) {
      if (t.get_id() == std::this_thread::get_id()) t.detach();  // destroyed by its own handler
      else t.join();
    }
  }

  Result<uint16_t> Listen(const std::string& host, uint16_t port) override {
    const std::string where = host + ":" + std::to_string(port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res))
      return Unavailable("cannot resolve " + where + ": " + gai_strerror(e));
    int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      Status s = Unavailable(Errno("cannot listen on " + where));
      ::freeaddrinfo(res);
      if (fd >= 0) ::close(fd);
      return s;
    }
    ::freeaddrinfo(res);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    const uint16_t bound = ntohs(ss.ss_family == AF_INET6
                                     ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                     : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) {
      ::close(fd);
      return Unavailable("transport is shut down");
    }
    listen_fds_.push_back(fd);
    acceptors_.emplace_back([this, fd] { AcceptLoop(fd); });
    return bound;
  }

  Result<ConnectionPtr> Connect(const std::string& address) override {
    std::string host;
    uint16_t port = 0;
    SF_RETURN_IF_ERROR(ParseAddress(address, &host, &port));
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res))
      return Unavailable("cannot resolve " + address + ": " + gai_strerror(e));
    int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      ::freeaddrinfo(res);
      return Unavailable(Errno("socket for " + address));
    }
    Status connected = ConnectWithin(fd, res->ai_addr, res->ai_addrlen,
                                     options_.connect_timeout_ms, address);
    ::freeaddrinfo(res);
    if (!connected.ok()) {
      ::close(fd);
      return connected;
    }
    TuneSocket(fd);
    auto c = std::make_shared<ConnImpl>(this, fd, /*dialer=*/true, address);
    Status s = c->DialHandshake(options_);
    if (!s.ok()) return s;  // ~ConnImpl closes fd
    return StartDialed(c);
  }

  void Shutdown() override {
    std::vector<std::shared_ptr<ConnImpl>> conns;
    std::vector<std::thread> acceptors;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      stopping_ = true;
      for (int fd : listen_fds_) ::shutdown(fd, SHUT_RDWR);
      conns.assign(conns_.begin(), conns_.end());
      acceptors.swap(acceptors_);
    }
    timer_cv_.notify_all();
    for (auto& c : conns) c->Close();
    for (auto& t : acceptors) t.join();
    // A handler or reply callback may call Shutdown on a reader or the timer
    // thread: that thread cannot join itself, the destructor joins it.
    const auto self = std::this_thread::get_id();
    std::vector<std::thread> deferred;
    if (timer_.joinable()) {
      if (timer_.get_id() == self) deferred.push_back(std::move(timer_));
      else timer_.join();
    }
    // Readers end once their socket is shut down; handshakes within the
    // connect timeout.
    std::list<std::thread> threads;
    {
      std::lock_guard<std::mutex> l(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) {
      if (t.get_id() == self) deferred.push_back(std::move(t));
      else t.join();
    }
    std::lock_guard<std::mutex> l(mu_);
    for (auto& t : deferred) deferred_.push_back(std::move(t));
    for (int fd : listen_fds_) ::close(fd);
    listen_fds_.clear();
    conns_.clear();
  }

  // Registers an authenticated connection; false when shutting down.
  bool Register(const std::shared_ptr<ConnImpl>& c) {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return false;
    c->up_ = true;
    conns_.push_back(c);
    return true;
  }

  // Runs fn on a new thread the transport joins (when it ends, or at
  // shutdown); false when shutting down.
  bool Spawn(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return false;
    threads_.emplace_back([this, fn = std::move(fn)] {
      fn();
      std::lock_guard<std::mutex> l2(mu_);
      done_ids_.push_back(std::this_thread::get_id());
    });
    return true;
  }

  // Registers a dialed connection and starts its reader.
  Result<ConnectionPtr> StartDialed(const std::shared_ptr<ConnImpl>& c) {
    if (!Register(c) || !Spawn([c] { c->ReadLoop(); })) {
      c->Close();
      return Unavailable("transport is shut down");
    }
    return ConnectionPtr(c);
  }

  // A connection went down: forget it and tell the owner.
  void OnDown(const std::shared_ptr<ConnImpl>& c, const Status& why) {
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto it = conns_.begin(); it != conns_.end(); ++it) {
        if (it->get() != c.get()) continue;
        conns_.erase(it);
        break;
      }
    }
    if (on_down_) on_down_(c, why);
  }

  void Deliver(const std::shared_ptr<ConnImpl>& c, Message m) {
    if (on_message_) on_message_(c, std::move(m));
  }

  const WireLimits& limits() const { return limits_; }
  const TransportOptions& options() const { return options_; }

 private:
  void AcceptLoop(int fd) {
    for (;;) {
      const int cfd = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (cfd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // shut down
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stopping_) {
          ::close(cfd);
          return;
        }
      }
      TuneSocket(cfd);
      auto c = std::make_shared<ConnImpl>(this, cfd, /*dialer=*/false, SocketPeer(cfd));
      // The handshake runs on the connection's own thread, so a slow or
      // silent peer never holds up other peers; that thread then reads.
      Spawn([this, c] {
        Status s = c->AcceptHandshake(options_);
        if (!s.ok()) {
          std::fprintf(stderr, "shardflow: refused peer %s: %s\n", c->peer_address().c_str(),
                       s.ToString().c_str());
          return;
        }
        if (Register(c)) c->ReadLoop();
      });
    }
  }

  void TimerLoop() {
    const int period = std::max(10, std::min(options_.heartbeat_ms, options_.peer_timeout_ms) / 2);
    std::unique_lock<std::mutex> l(mu_);
    while (!stopping_) {
      timer_cv_.wait_for(l, std::chrono::milliseconds(period));
      if (stopping_) break;
      std::vector<std::shared_ptr<ConnImpl>> conns(conns_.begin(), conns_.end());
      l.unlock();
      const int64_t now = NowMs();
      for (auto& c : conns) c->Tick(now, options_);
      JoinFinished();
      l.lock();
    }
  }

  // Joins the threads that ended (a node serves many short connections).
  void JoinFinished() {
    std::vector<std::thread> done;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto id : done_ids_) {
        for (auto it = threads_.begin(); it != threads_.end(); ++it) {
          if (it->get_id() != id) continue;
          done.push_back(std::move(*it));
          threads_.erase(it);
          break;
        }
      }
      done_ids_.clear();
    }
    for (auto& t : done) t.join();
  }

  friend class ConnImpl;
  TransportOptions options_;
  WireLimits limits_;
  MessageHandler on_message_;
  DownHandler on_down_;
  std::mutex mu_;
  std::condition_variable timer_cv_;
  bool stopping_ = false;                          // GUARDED_BY(mu_)
  std::vector<int> listen_fds_;                    // GUARDED_BY(mu_)
  std::vector<std::thread> acceptors_;             // GUARDED_BY(mu_)
  std::list<std::thread> threads_;                 // GUARDED_BY(mu_): readers, handshakes
  std::vector<std::thread::id> done_ids_;          // GUARDED_BY(mu_): ended threads_
  std::list<std::shared_ptr<ConnImpl>> conns_;     // GUARDED_BY(mu_)
  std::vector<std::thread> deferred_;              // GUARDED_BY(mu_): called Shutdown themselves
  std::thread timer_;
};

void ConnImpl::Down(const Status& why) {
  bool was_up = false;
  std::map<uint64_t, Pending> pending;
  {
    // The reason is recorded in the same critical section that flips up_, so
    // whoever sees the connection down also sees why (DownReason takes this lock).
    std::lock_guard<std::mutex> l(pending_mu_);
    bool expected = true;
    was_up = up_.compare_exchange_strong(expected, false);
    if (was_up) down_why_ = why.message();
    pending.swap(pending_);
  }
  ::shutdown(fd_, SHUT_RDWR);
  for (auto& [id, p] : pending)
    p.cb(Unavailable(std::string(p.what) + " to " + Describe() + " failed: " + why.message()));
  if (was_up) transport_->OnDown(shared_from_this(), why);
}

void ConnImpl::Tick(int64_t now, const TransportOptions& o) {
  if (!up_) return;
  if (now - last_recv_ms_ > o.peer_timeout_ms) {
    // Bytes waiting unread mean the peer spoke and our reader is behind (a
    // starved thread on a loaded machine): that peer is alive.
    int unread = 0;
    if (::ioctl(fd_, FIONREAD, &unread) == 0 && unread > 0) {
      last_recv_ms_ = now;
      return;
    }
    Down(Unavailable("no message from " + Describe() + " for " +
                     std::to_string(now - last_recv_ms_) + " ms (peer hung or unreachable)"));
    return;
  }
  if (now - last_send_ms_ >= o.heartbeat_ms) {
    // Never wait behind a large write: its bytes keep the peer informed.
    std::unique_lock<std::mutex> l(write_mu_, std::try_to_lock);
    if (l.owns_lock()) {
      static const Result<Frame> kHeartbeat = EncodeFrame(Message{0, Heartbeat{}});
      Status s = kHeartbeat.ok() ? WriteAll(fd_, kHeartbeat->pieces(), Describe()) : kHeartbeat.status();
      last_send_ms_ = NowMs();
      l.unlock();
      if (!s.ok()) Down(s);
    }
  }
  std::vector<uint64_t> expired;
  {
    std::lock_guard<std::mutex> l(pending_mu_);
    for (auto& [id, p] : pending_)
      if (p.deadline_ms <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) Fail(id, DeadlineExceeded("request to " + Describe() + " timed out"));
}

void ConnImpl::ReadLoop() {
  auto self = shared_from_this();
  for (;;) {
    auto m = ReadMessage(fd_, -1, transport_->limits(), Describe(), &last_recv_ms_);
    if (!m.ok()) {
      if (up_) {
        // A malformed frame cannot be skipped (the stream is out of step):
        // drop this peer, keep serving the others.
        if (m.status().code() != Code::kUnavailable)
          std::fprintf(stderr, "shardflow: dropping %s: %s\n", Describe().c_str(),
                       m.status().ToString().c_str());
        Down(m.status());
      }
      return;
    }
    last_recv_ms_ = NowMs();
    if (std::holds_alternative<Heartbeat>(m->body)) continue;
    if (IsOurRequest(m->request_id)) {
      std::function<void(Result<Message>)> cb;
      {
        std::lock_guard<std::mutex> l(pending_mu_);
        auto it = pending_.find(m->request_id);
        if (it != pending_.end()) {
          cb = std::move(it->second.cb);
          pending_.erase(it);
        }
      }
      if (cb) cb(std::move(*m));  // a reply after its deadline is dropped
      continue;
    }
    transport_->Deliver(self, std::move(*m));
  }
}

Status ConnImpl::DialHandshake(const TransportOptions& o) {
  const int64_t deadline = NowMs() + o.connect_timeout_ms;
  const WireLimits& limits = transport_->limits();
  Hello hello;
  hello.node_name = o.node_name;
  hello.listen_address = o.listen_address;
  hello.nonce = RandomNonce();
  SF_RETURN_IF_ERROR(WriteMessage(fd_, Message{0, hello}, peer_address_));
  auto ch = ReadMessage(fd_, deadline, limits, peer_address_);
  if (!ch.ok()) return ch.status().WithPrefix("handshake with " + peer_address_);
  if (auto* r = std::get_if<Refused>(&ch->body))
    return PermissionDenied("refused by " + peer_address_ + ": " + r->reason);
  auto* c = std::get_if<Challenge>(&ch->body);
  if (!c) return Unavailable("handshake with " + peer_address_ + ": expected Challenge, got " +
                             BodyName(ch->body));
  if (!ProofEquals(c->proof, Proof(o.secret, "listener", hello.nonce)))
    return PermissionDenied("peer " + peer_address_ +
                            " does not know the cluster secret (its proof is wrong)");
  SF_RETURN_IF_ERROR(
      WriteMessage(fd_, Message{0, AuthProof{Proof(o.secret, "dialer", c->nonce)}}, peer_address_));
  auto w = ReadMessage(fd_, deadline, limits, peer_address_);
  if (!w.ok()) return w.status().WithPrefix("handshake with " + peer_address_);
  if (auto* r = std::get_if<Refused>(&w->body))
    return PermissionDenied("refused by " + peer_address_ + ": " + r->reason);
  auto* welcome = std::get_if<Welcome>(&w->body);
  if (!welcome) return Unavailable("handshake with " + peer_address_ + ": expected Welcome, got " +
                                   BodyName(w->body));
  peer_name_ = welcome->node_name;
  peer_listen_ = peer_address_;
  return Status::OK();
}

Status ConnImpl::AcceptHandshake(const TransportOptions& o) {
  const int64_t deadline = NowMs() + o.connect_timeout_ms;
  const WireLimits& limits = transport_->limits();
  auto refuse = [&](const std::string& reason) {
    WriteMessage(fd_, Message{0, Refused{reason}}, peer_address_);
    return PermissionDenied(reason);
  };
  auto h = ReadMessage(fd_, deadline, limits, peer_address_);
  if (!h.ok()) {
    if (h.status().code() == Code::kFailedPrecondition) return refuse(h.status().message());
    return h.status().WithPrefix("handshake");
  }
  auto* hello = std::get_if<Hello>(&h->body);
  if (!hello) return refuse(std::string("expected Hello, got ") + BodyName(h->body));
  if (hello->version != kWireVersion)
    return refuse("peer speaks wire version " + std::to_string(hello->version) +
                  ", this node speaks " + std::to_string(kWireVersion));
  Challenge c;
  c.nonce = RandomNonce();
  c.proof = Proof(o.secret, "listener", hello->nonce);
  SF_RETURN_IF_ERROR(WriteMessage(fd_, Message{0, c}, peer_address_));
  auto a = ReadMessage(fd_, deadline, limits, peer_address_);
  if (!a.ok()) return a.status().WithPrefix("handshake");
  auto* proof = std::get_if<AuthProof>(&a->body);
  if (!proof) return refuse(std::string("expected AuthProof, got ") + BodyName(a->body));
  if (!ProofEquals(proof->proof, Proof(o.secret, "dialer", c.nonce)))
    return refuse("wrong cluster secret");
  SF_RETURN_IF_ERROR(WriteMessage(fd_, Message{0, Welcome{o.node_name}}, peer_address_));
  peer_name_ = hello->node_name;
  peer_listen_ = hello->listen_address;
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<Transport>> Transport::Create(TransportOptions options,
                                                     MessageHandler on_message,
                                                     DownHandler on_down) {
  if (options.secret.size() < 16)
    return InvalidArgument("the cluster secret must be at least 16 bytes (got " +
                           std::to_string(options.secret.size()) + ")");
  if (options.heartbeat_ms <= 0 || options.peer_timeout_ms <= options.heartbeat_ms)
    return InvalidArgument("peer_timeout_ms (" + std::to_string(options.peer_timeout_ms) +
                           ") must exceed heartbeat_ms (" + std::to_string(options.heartbeat_ms) +
                           ") > 0");
  return std::unique_ptr<Transport>(
      new TransportImpl(std::move(options), std::move(on_message), std::move(on_down)));
}

}  // namespace net
}  // namespace sf
