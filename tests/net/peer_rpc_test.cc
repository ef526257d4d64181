// Cap'n Proto RPC connections between in-process endpoints on 127.0.0.1:
// mutual TLS with the cluster CA (and plaintext with insecure), requests,
// replies, timeouts, big tensors, and peers that misbehave before and after
// authentication.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "net/credentials.h"
#include "net/peer_rpc.h"
#include "tests/support/test_credentials.h"
#include "tests/support/raw_socket.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace sf::net;
using namespace std::chrono_literals;

namespace {

bool Contains(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

EndpointOptions Opts(Role role, bool insecure = false) {
  EndpointOptions o;
  o.role = role;
  o.insecure = insecure;
  o.tls_dir = testing::TestTlsDir();
  o.log = false;
  return o;
}

// A listening endpoint that answers Echo with Echo and counts messages, downs and roles.
struct Server : Handler {
  std::unique_ptr<Endpoint> e;
  std::string address;
  std::atomic<int> downs{0};
  std::atomic<int> messages{0};
  std::atomic<int> from_sessions{0};
  // Non-null: runs before each Echo is answered, on the I/O thread.
  const std::function<void()> echo_on_io;
  explicit Server(EndpointOptions o = Opts(Role::kNode), std::function<void()> on_echo = nullptr)
      : echo_on_io(std::move(on_echo)) {
    o.node_name = "server";
    auto r = Endpoint::Create(o, this, [this](const ConnectionPtr&, const Status&) { ++downs; });
    REQUIRE(r.ok());
    e = std::move(*r);
    auto port = e->Listen("127.0.0.1", 0);
    REQUIRE(port.ok());
    address = "127.0.0.1:" + std::to_string(*port);
  }
  ~Server() override { e.reset(); }
  void Count(const ConnectionPtr& c) {
    ++messages;
    if (c->peer_role() == Role::kSession) ++from_sessions;
  }
  bool OnIoThread(const std::type_info& m) const override { return echo_on_io && m == typeid(Echo); }
  void ServeEcho(const ConnectionPtr& c, Echo m, Answer<Echo> done) override {
    Count(c);
    if (echo_on_io) echo_on_io();
    done(std::move(m));
  }
  // Left unanswered: timeouts are tested with it.
  void ServeMembers(const ConnectionPtr& c, Answer<Membership>) override { Count(c); }
  void OnCleanup(const ConnectionPtr& c, CleanupStep) override { Count(c); }
  void OnTensor(const ConnectionPtr& c, SendTensor) override { Count(c); }
};

// A handler that runs fn for each Echo (on a handler thread) and answers it with a scalar 7.
struct EchoAfter : Handler {
  explicit EchoAfter(std::function<void()> f) : fn(std::move(f)) {}
  void ServeEcho(const ConnectionPtr&, Echo, Answer<Echo> done) override {
    fn();
    done(Echo{Tensor::Scalar<int32_t>(7)});
  }
  std::function<void()> fn;
};

// o with a heartbeat every 50 ms and a peer silent for 250 ms down.
EndpointOptions QuickToTimeOut(EndpointOptions o) {
  o.heartbeat_ms = 50;
  o.peer_timeout_ms = 250;
  return o;
}

std::unique_ptr<Endpoint> Client(EndpointOptions o = Opts(Role::kSession)) {
  auto r = Endpoint::Create(o, nullptr, nullptr);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(*r);
}

// A tensor of about `bytes` bytes with a pattern a copy error would break.
Tensor Filled(int64_t bytes) {
  const int64_t n = std::max<int64_t>(1, bytes / 4);
  Tensor t(DType::kInt32, {n});
  auto* p = t.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(i * 7 + 3);
  return t;
}

using testing::RawConnect;

// True once the peer closed fd (read returns 0 or an error) within deadline.
bool ClosedWithin(int fd, std::chrono::milliseconds deadline) {
  timeval tv{static_cast<time_t>(deadline.count() / 1000), static_cast<suseconds_t>(deadline.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[4096];
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return true;
    if (r < 0) return false;  // timed out
  }
  return false;
}

// Starts a one-segment message of `words` words on raw connection fd, then
// sends `body` bytes of it at once; the bytes sent (fewer when the peer
// dropped us).
size_t StartMessage(int fd, uint32_t words, size_t body) {
  const uint32_t table[2] = {0, words};
  if (::write(fd, table, sizeof table) != sizeof table) return 0;
  std::vector<char> bytes(body, 0);
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return sent;
}

// Sends a byte every 100 ms until the peer closes fd (at most 10 s); the
// seconds it took, or -1 when it never closed.
double TrickleUntilClosed(int fd) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    char b = 0;
    if (::send(fd, &b, 1, MSG_NOSIGNAL) != 1 || ClosedWithin(fd, 100ms))
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return -1;
}

}  // namespace

TEST_CASE("RPC: mutual TLS admits a cluster peer, echoes and tells roles apart", "[rpc]") {
  Server s;
  auto c = Client();
  auto conn = c->Connect(s.address);
  INFO(conn.status().ToString());
  REQUIRE(conn.ok());
  CHECK((*conn)->peer_name() == "server");
  CHECK((*conn)->peer_role() == Role::kNode);
  auto r = Call(*conn, Echo{Tensor::FromVector<float>({1, 2, 3}, {3})}, 5000);
  REQUIRE(r.ok());
  CHECK(r->payload.ToVector<float>() == std::vector<float>{1, 2, 3});
  CHECK(s.from_sessions == 1);  // the role came from the session's certificate

  // One-way messages arrive in order.
  for (int i = 0; i < 50; ++i) REQUIRE((*conn)->Send(Message{0, CleanupStep{i, 0}}).ok());
  REQUIRE(testing::WaitFor([&] { return s.messages >= 51; }, 20s));
}

TEST_CASE("RPC: a request the peer's handler does not serve is answered at once, naming it", "[rpc]") {
  // A node endpoint whose handler serves only Echo: every other request of
  // the services it hands out is answered InvalidArgument by the Handler's
  // default, not left to the asker's deadline; an endpoint made without a
  // handler answers Echo so too, and one-way messages to it are dropped.
  Server s;
  auto c = Client();
  auto conn = c->Connect(s.address);
  REQUIRE(conn.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto read = Call(*conn, ReadVariables{{"w"}}, 30000);
  auto ns = Call(*conn, ListNamespaces{}, 30000);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(read.status().code() == Code::kInvalidArgument);
  CHECK(Contains(read.status(), "does not serve ReadVariables"));
  CHECK(Contains(ns.status(), "does not serve ListNamespaces"));
  REQUIRE(Call(*conn, Echo{Tensor::Scalar<float>(1.f)}, 5000).ok());

  auto bare = Endpoint::Create(Opts(Role::kNode), nullptr, nullptr);
  REQUIRE(bare.ok());
  auto port = (*bare)->Listen("127.0.0.1", 0);
  REQUIRE(port.ok());
  auto to_bare = c->Connect("127.0.0.1:" + std::to_string(*port));
  REQUIRE(to_bare.ok());
  REQUIRE(Tell(*to_bare, CleanupStep{1, 0}).ok());
  auto echo = Call(*to_bare, Echo{Tensor::Scalar<float>(1.f)}, 30000);
  CHECK(Contains(echo.status(), "does not serve Echo"));
  CHECK((*to_bare)->is_up());
}

TEST_CASE("RPC: a 64 MiB tensor arrives intact, with TLS and without", "[rpc]") {
  for (bool insecure : {false, true}) {
    INFO("insecure " << insecure);
    Server s(Opts(Role::kNode, insecure));
    auto c = Client(Opts(Role::kSession, insecure));
    auto conn = c->Connect(s.address);
    REQUIRE(conn.ok());
    Tensor t = Filled(int64_t{64} << 20);
    auto r = Call(*conn, Echo{t}, 60000);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    const Tensor& back = (*r).payload;
    REQUIRE(back.bytes() == t.bytes());
    REQUIRE(std::memcmp(back.raw_data(), t.raw_data(), t.bytes()) == 0);
  }
}

TEST_CASE("RPC: an echo that takes longer than the peer timeout is not dropped as silence", "[rpc]") {
  // While one side writes a long reply, the other's loop is busy reading it
  // and sends no heartbeat; the writer heard nothing since the request. The
  // node dropped a session this way in the middle of a 256 MiB TLS echo.
  Server s(QuickToTimeOut(Opts(Role::kNode)));
  auto c = Client(QuickToTimeOut(Opts(Role::kSession)));
  auto conn = c->Connect(s.address);
  REQUIRE(conn.ok());
  Tensor t = Filled(int64_t{256} << 20);
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = Call(*conn, Echo{t}, 60000);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    INFO("round trip " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
    CHECK((*r).payload.bytes() == t.bytes());
  }
  CHECK(s.downs == 0);
}

TEST_CASE("RPC: a peer that hangs after taking a long message is still dropped as silent", "[rpc][hostile]") {
  // The grace a long message buys its reader (a second per 64 MB) is
  // bounded: a peer whose loop stops once it has 16 MiB of ours is dropped
  // within the timeout plus a quarter second, not kept alive.
  testing::Flag release;
  EndpointOptions so = QuickToTimeOut(Opts(Role::kNode));
  // Runs on the server's I/O thread: while it waits, that loop reads,
  // writes and ticks nothing, as a stopped process would.
  Server hangs(so, [&] { release.WaitFor(30s); });
  auto c = Client(QuickToTimeOut(Opts(Role::kSession)));
  auto conn = c->Connect(hangs.address);
  REQUIRE(conn.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Call(*conn, Echo{Filled(16 << 20)}, 30000);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  release.Set();
  REQUIRE(!r.ok());
  INFO(r.status().ToString());
  CHECK(Contains(r.status(), "no message from"));
  CHECK(secs < 5);
}

TEST_CASE("RPC: a peer that reads none of us while it answers our call past its flow limit is not dropped",
          "[rpc]") {
  // Cap'n Proto reads nothing more of an asker whose calls in flight are
  // past its flow limit until it answers them, so the asker's heartbeat
  // waits unread: a session dropped a node as hung, after the write
  // timeout, while the node took a 77 MB registration for 10 s on a loaded
  // machine. The peer still sends its own heartbeats: a hung one is silent.
  EndpointOptions so = QuickToTimeOut(Opts(Role::kNode));
  so.max_peer_buffer_bytes = 4 << 20;
  so.node_name = "slow";
  // An answer later than the asker's write timeout is the point.
  EchoAfter late([] { testing::PauseFor(3s); });
  auto made = Endpoint::Create(so, &late, nullptr);
  REQUIRE(made.ok());
  std::unique_ptr<Endpoint> slow = std::move(*made);
  auto port = slow->Listen("127.0.0.1", 0);
  REQUIRE(port.ok());
  EndpointOptions co = QuickToTimeOut(Opts(Role::kSession));
  co.max_peer_buffer_bytes = 4 << 20;
  co.write_timeout_ms = 1000;
  auto c = Client(co);
  auto conn = c->Connect("127.0.0.1:" + std::to_string(*port));
  REQUIRE(conn.ok());
  auto r = Call(*conn, Echo{Filled(8 << 20)}, 30000);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK((*r).payload.data<int32_t>()[0] == 7);
  // And the connection stays: a small call goes through.
  auto again = Call(*conn, Echo{Filled(16)}, 30000);
  INFO(again.status().ToString());
  CHECK(again.ok());
  slow->Shutdown();
}

TEST_CASE("RPC: many concurrent echoes of ragged sizes arrive intact over TLS", "[rpc]") {
  // Sizes around a TLS record (16 KiB), the ciphertext read (256 KiB) and
  // the plaintext encrypted per turn (1 MiB), in flight together so records
  // of several messages share reads and writes.
  Server s;
  auto c = Client();
  auto conn = c->Connect(s.address);
  REQUIRE(conn.ok());
  const std::vector<int64_t> sizes = {4, 16380, 16388, 262140, 262148, (int64_t{1} << 20) - 4, (int64_t{1} << 20) + 4,
                                      (int64_t{3} << 20) + 12};
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int round = 0; round < 3; ++round)
    for (int64_t bytes : sizes)
      threads.emplace_back([&, bytes] {
        Tensor t = Filled(bytes);
        auto r = Call(*conn, Echo{t}, 60000);
        if (!r.ok()) return;
        const Tensor& back = (*r).payload;
        if (back.bytes() == t.bytes() && std::memcmp(back.raw_data(), t.raw_data(), t.bytes()) == 0) ++good;
      });
  for (auto& t : threads) t.join();
  REQUIRE(good == static_cast<int>(3 * sizes.size()));
}

TEST_CASE("RPC: a certificate of another CA, plaintext and a session posing as a node are refused", "[rpc]") {
  Server s;
  auto other = MakeTemporaryCredentials();
  REQUIRE(other.ok());
  EndpointOptions foreign = Opts(Role::kSession);
  foreign.tls_dir = *other;
  auto c = Client(foreign);
  auto conn = c->Connect(s.address);
  REQUIRE(!conn.ok());
  INFO(conn.status().ToString());
  CHECK(conn.status().code() == Code::kPermissionDenied);
  CHECK(Contains(conn.status(), "TLS"));
  // A node of the other CA: our dialer refuses it, its dialer refuses us.
  EndpointOptions foreign_node = Opts(Role::kNode);
  foreign_node.tls_dir = *other;
  Server theirs(foreign_node);
  auto ours = Client();
  auto to_theirs = ours->Connect(theirs.address);
  REQUIRE(!to_theirs.ok());
  CHECK(to_theirs.status().code() == Code::kPermissionDenied);
  std::filesystem::remove_all(*other);
  // Plaintext to a TLS endpoint goes nowhere.
  auto plain = Client(Opts(Role::kSession, true));
  auto p = plain->Connect(s.address);
  REQUIRE(!p.ok());
  // A session's certificate cannot serve as a node: dialers check for a node's.
  EndpointOptions session_server = Opts(Role::kSession);
  Server fake(session_server);
  auto dialer = Client(Opts(Role::kNode));
  auto f = dialer->Connect(fake.address);
  REQUIRE(!f.ok());
  CHECK(f.status().code() == Code::kPermissionDenied);
  // The real server still serves.
  auto fresh = Client();
  auto good = fresh->Connect(s.address);
  REQUIRE(good.ok());
  REQUIRE(Call(*good, Echo{Tensor::FromVector<float>({1}, {1})}, 5000).ok());
}

TEST_CASE("RPC: bad options and credentials are refused with clear errors", "[rpc]") {
  EndpointOptions none = Opts(Role::kSession);
  none.tls_dir.clear();
  auto a = Endpoint::Create(none, nullptr, nullptr);
  REQUIRE(!a.ok());
  CHECK(Contains(a.status(), "certs init"));
  EndpointOptions wrong_role = Opts(Role::kNode);
  wrong_role.tls_name = "session";
  auto b = Endpoint::Create(wrong_role, nullptr, nullptr);
  REQUIRE(!b.ok());
  CHECK(Contains(b.status(), "is for a session"));
  EndpointOptions missing = Opts(Role::kSession);
  missing.tls_name = "nobody";
  auto m = Endpoint::Create(missing, nullptr, nullptr);
  REQUIRE(!m.ok());
  CHECK(m.status().code() == Code::kNotFound);
  CHECK(Contains(m.status(), "nobody.crt"));
  EndpointOptions timeouts = Opts(Role::kSession);
  timeouts.peer_timeout_ms = timeouts.heartbeat_ms;
  CHECK(!Endpoint::Create(timeouts, nullptr, nullptr).ok());

  // A readable key is refused like ssh refuses one.
  auto dir = MakeTemporaryCredentials();
  REQUIRE(dir.ok());
  ::chmod((*dir + "/session.key").c_str(), 0644);
  EndpointOptions loose = Opts(Role::kSession);
  loose.tls_dir = *dir;
  auto l = Endpoint::Create(loose, nullptr, nullptr);
  REQUIRE(!l.ok());
  CHECK(l.status().code() == Code::kFailedPrecondition);
  CHECK(Contains(l.status(), "chmod 600"));
  std::filesystem::remove_all(*dir);

  auto c = Client();
  CHECK(c->Connect("no-port").status().code() == Code::kInvalidArgument);
  CHECK(c->Connect("127.0.0.1:1").status().code() == Code::kUnavailable);  // nobody listens on port 1
}

TEST_CASE("RPC: credentials: init, issue, roles and names", "[rpc]") {
  const std::string dir = std::filesystem::temp_directory_path() / ("sf_creds_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  REQUIRE(InitCredentials(dir).ok());
  CHECK(InitCredentials(dir).code() == Code::kFailedPrecondition);  // never overwrites a CA
  struct stat st {};
  REQUIRE(::stat((dir + "/ca.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(IssueCredential(dir, Role::kNode, "worker-7", {"10.0.0.7", "w7.example"}).ok());
  CHECK(IssueCredential(dir, Role::kNode, "worker-7").code() == Code::kFailedPrecondition);
  CHECK(IssueCredential(dir, Role::kNode, "bad/name").code() == Code::kInvalidArgument);
  CHECK(IssueCredential(dir, Role::kNode, "ca").code() == Code::kInvalidArgument);
  auto c = LoadCredential(dir, "worker-7");
  REQUIRE(c.ok());
  CHECK(c->role == Role::kNode);
  auto s = LoadCredential(dir, "session");
  REQUIRE(s.ok());
  CHECK(s->role == Role::kSession);
  // A certificate from another CA put into this directory is refused on load.
  auto other = MakeTemporaryCredentials();
  REQUIRE(other.ok());
  std::filesystem::copy_file(*other + "/node.crt", dir + "/stray.crt");
  std::filesystem::copy_file(*other + "/node.key", dir + "/stray.key");
  auto stray = LoadCredential(dir, "stray");
  REQUIRE(!stray.ok());
  CHECK(Contains(stray.status(), "not signed by"));
  std::filesystem::remove_all(*other);
  std::filesystem::remove_all(dir);
  Role r;
  std::string name;
  CHECK(ParseCommonName("node:a", &r, &name).ok());
  CHECK(!ParseCommonName("admin:a", &r, &name).ok());
  CHECK(!ParseCommonName("nocolon", &r, &name).ok());
  CHECK(!ParseCommonName("session:", &r, &name).ok());  // names no one
  CHECK(!ParseCommonName("node:" + std::string(65, 'a'), &r, &name).ok());
}

TEST_CASE("RPC: a request nobody answers times out naming the peer", "[rpc]") {
  Server s;
  auto c = Client();
  auto conn = c->Connect(s.address);
  REQUIRE(conn.ok());
  auto r = Call(*conn, ListMembers{}, 200);
  REQUIRE(!r.ok());
  CHECK(r.status().code() == Code::kDeadlineExceeded);
  CHECK(Contains(r.status(), "server"));
  CHECK(Contains(r.status(), "ListMembers"));
}

TEST_CASE("RPC: a silent listener fails Connect within the connect timeout", "[rpc]") {
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(lfd, 8) == 0);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  EndpointOptions o = Opts(Role::kSession);
  o.connect_timeout_ms = 300;
  auto c = Client(o);
  const auto t0 = std::chrono::steady_clock::now();
  auto conn = c->Connect("127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(!conn.ok());
  CHECK(conn.status().code() == Code::kUnavailable);
  CHECK(Contains(conn.status(), "no answer within 300 ms"));
  CHECK(secs < 5);
  ::close(lfd);
}

TEST_CASE("RPC: Shutdown from a message handler or a reply callback returns", "[rpc]") {
  std::unique_ptr<Endpoint> server;
  testing::Flag shut;
  struct ShutsDown : Handler {
    std::function<void()> fn;
    void ServeMembers(const ConnectionPtr&, Answer<Membership>) override { fn(); }
  } shuts;
  shuts.fn = [&] {
    server->Shutdown();
    shut.Set();
  };
  auto r = Endpoint::Create(Opts(Role::kNode), &shuts, nullptr);
  REQUIRE(r.ok());
  server = std::move(*r);
  auto port = server->Listen("127.0.0.1", 0);
  REQUIRE(port.ok());
  auto c = Client();
  auto conn = c->Connect("127.0.0.1:" + std::to_string(*port));
  REQUIRE(conn.ok());
  auto reply = Call(*conn, ListMembers{}, 5000);
  REQUIRE(!reply.ok());
  REQUIRE(shut.WaitFor(20s));
  server.reset();

  Server s;
  testing::Flag done;
  auto c2 = Client();
  auto conn2 = c2->Connect(s.address);
  REQUIRE(conn2.ok());
  Endpoint* e2 = c2.get();
  (*conn2)->Request(ListMembers{}, 100, [&](Result<Message>) {
    e2->Shutdown();
    done.Set();
  });
  REQUIRE(done.WaitFor(20s));
  c2.reset();
}

TEST_CASE("RPC: sending on a connection that went down says why", "[rpc]") {
  auto s = std::make_unique<Server>();
  auto c = Client();
  auto conn = c->Connect(s->address);
  REQUIRE(conn.ok());
  s.reset();
  REQUIRE(testing::WaitFor([&] { return !(*conn)->is_up(); }, 20s));
  Status st = (*conn)->Send(Message{0, Echo{}});
  REQUIRE(st.code() == Code::kUnavailable);
  INFO(st.ToString());
  CHECK(Contains(st, "server"));
  auto r = Call(*conn, ListMembers{}, 1000);
  CHECK(r.status().code() == Code::kUnavailable);
}

TEST_CASE("RPC: a flood of silent connections does not keep a real peer out", "[rpc][hostile]") {
  EndpointOptions o = Opts(Role::kNode);
  o.max_handshakes = 8;
  o.handshake_timeout_ms = 30000;  // only the caps can make room in time
  Server s(o);
  // From another address than the real peer's: one address holds at most
  // half the handshakes, and its next connections are closed at once.
  // Each sends a byte (a handshake begun, then silence): a connection that
  // sends nothing is not even accepted (TCP_DEFER_ACCEPT).
  std::vector<int> silent;
  for (int i = 0; i < 100; ++i) {
    const int fd = RawConnect(s.address, "127.0.0.2");
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, "\x16", 1) == 1);
    silent.push_back(fd);
  }
  auto c = Client();
  auto conn = c->Connect(s.address);
  INFO(conn.status().ToString());
  REQUIRE(conn.ok());
  REQUIRE(Call(*conn, Echo{Tensor::FromVector<float>({1}, {1})}, 5000).ok());
  // Most silent ones were closed: at most the cap are still open.
  int open = 0;
  for (int fd : silent) open += ClosedWithin(fd, 50ms) ? 0 : 1;
  CHECK(open <= 8);
  for (int fd : silent) ::close(fd);
  auto fresh = Client();
  auto again = fresh->Connect(s.address);
  REQUIRE(again.ok());
  REQUIRE(Call(*again, Echo{Filled(1000)}, 5000).ok());
}

TEST_CASE("RPC: an oversized message from an authenticated peer drops only that peer", "[rpc][hostile]") {
  EndpointOptions o = Opts(Role::kNode);
  o.max_frame_bytes = 1 << 20;
  Server s(o);
  auto c = Client();
  auto conn = c->Connect(s.address);
  REQUIRE(conn.ok());
  auto r = Call(*conn, Echo{Filled(4 << 20)}, 10000);
  REQUIRE(!r.ok());
  REQUIRE(testing::WaitFor([&] { return !(*conn)->is_up(); }, 20s));
  auto fresh = Client();
  auto good = fresh->Connect(s.address);
  REQUIRE(good.ok());
  REQUIRE(Call(*good, Echo{Filled(1000)}, 5000).ok());
}

TEST_CASE("RPC: a message trickled in is dropped at the minimum rate", "[rpc][hostile]") {
  // Plaintext, so this test can speak Cap'n Proto's framing by hand.
  EndpointOptions o = Opts(Role::kNode, true);
  o.handshake_timeout_ms = 60000;  // the rate rule, not the hello deadline, must act
  o.peer_timeout_ms = 60000;
  Server s(o);
  const int fd = RawConnect(s.address);
  REQUIRE(fd >= 0);
  // One segment of 128 Ki words (1 MiB): a message under way.
  StartMessage(fd, 128 * 1024, 0);
  const double secs = TrickleUntilClosed(fd);
  CHECK(secs >= 0);
  CHECK(secs < 8);
  ::close(fd);
  auto fresh = Client(Opts(Role::kSession, true));
  auto good = fresh->Connect(s.address);
  REQUIRE(good.ok());
  REQUIRE(Call(*good, Echo{Filled(1000)}, 5000).ok());
}

TEST_CASE("RPC: a message sent fast, then trickled, is dropped at the minimum rate", "[rpc][hostile]") {
  // 2 MiB of a 4 MiB message at once, then a byte every 100 ms: the rate
  // since the message began stayed above 64 KiB/s for half a minute; the
  // rate over the last second does not.
  EndpointOptions o = Opts(Role::kNode, true);
  o.handshake_timeout_ms = 60000;
  o.peer_timeout_ms = 60000;
  Server s(o);
  const int fd = RawConnect(s.address);
  REQUIRE(fd >= 0);
  REQUIRE(StartMessage(fd, 512 * 1024, 2 << 20) == (2 << 20));
  const double secs = TrickleUntilClosed(fd);
  CHECK(secs >= 0);
  CHECK(secs < 6);
  ::close(fd);
}

TEST_CASE("RPC: messages under way from many peers are held to the node's budget", "[rpc][hostile]") {
  // Three peers each hold 3 MiB of a 4 MiB message; the budget is 4 MiB in
  // all: the node keeps one, drops the others, and still serves.
  EndpointOptions o = Opts(Role::kNode, true);
  o.handshake_timeout_ms = 60000;
  o.peer_timeout_ms = 60000;
  o.min_bytes_per_sec = 1;  // the budget, not the rate rule, must act
  o.max_inflight_bytes = 4 << 20;
  Server s(o);
  std::vector<int> fds;
  for (int p = 0; p < 3; ++p) {
    const int fd = RawConnect(s.address);
    REQUIRE(fd >= 0);
    fds.push_back(fd);
    StartMessage(fd, 512 * 1024, 3 << 20);  // fewer bytes when dropped already
  }
  int closed = 0;
  REQUIRE(testing::WaitFor([&] {
    closed = 0;
    for (int fd : fds) closed += ClosedWithin(fd, 10ms) ? 1 : 0;
    return closed >= 2;
  }, 10s));
  CHECK(closed == 2);
  for (int fd : fds) ::close(fd);
  auto fresh = Client(Opts(Role::kSession, true));
  auto good = fresh->Connect(s.address);
  REQUIRE(good.ok());
  REQUIRE(Call(*good, Echo{Filled(1000)}, 5000).ok());
}

TEST_CASE("RPC: a peer that stops reading is dropped and blocks no one else", "[rpc][hostile]") {
  // The stalled peer: an endpoint whose handler blocks, so its flow limit
  // stops it reading; the server's writes to it stall.
  testing::Flag release;
  EndpointOptions po = Opts(Role::kNode);
  po.max_peer_buffer_bytes = 1 << 20;
  po.handler_threads = 1;
  po.peer_timeout_ms = 60000;
  struct Stalls : Handler {
    testing::Flag* release = nullptr;
    void OnTensor(const ConnectionPtr&, SendTensor) override { release->WaitFor(60s); }
  } stalls;
  stalls.release = &release;
  auto stalled = Endpoint::Create(po, &stalls, nullptr);
  REQUIRE(stalled.ok());
  auto port = (*stalled)->Listen("127.0.0.1", 0);
  REQUIRE(port.ok());
  EndpointOptions so = Opts(Role::kNode);
  so.write_timeout_ms = 1000;
  so.peer_timeout_ms = 60000;
  std::atomic<int> downs{0};
  std::string why;
  std::mutex mu;
  auto sender = Endpoint::Create(so, nullptr, [&](const ConnectionPtr&, const Status& s) {
    std::lock_guard<std::mutex> l(mu);
    why = s.message();
    ++downs;
  });
  REQUIRE(sender.ok());
  auto to_stalled = (*sender)->Connect("127.0.0.1:" + std::to_string(*port));
  REQUIRE(to_stalled.ok());
  Server other;
  auto to_other = (*sender)->Connect(other.address);
  REQUIRE(to_other.ok());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 64 && (*to_stalled)->is_up(); ++i) (*to_stalled)->Send(Message{0, SendTensor{i, "e", "", 0, false, Filled(4 << 20)}});
  // Meanwhile the other peer is served at once.
  REQUIRE(Call(*to_other, Echo{Filled(1000)}, 5000).ok());
  REQUIRE(testing::WaitFor([&] { return downs > 0; }, 30s));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> l(mu);
    INFO(why);
    CHECK(why.find("not reading") != std::string::npos);
  }
  CHECK(secs < 20);
  REQUIRE(Call(*to_other, Echo{Filled(1000)}, 5000).ok());
  release.Set();
}
