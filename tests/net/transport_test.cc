// The TCP transport between two in-process endpoints on 127.0.0.1: the
// handshake (both sides prove the secret), requests and replies, timeouts,
// large frames, and peers that misbehave.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>

#include "net/auth.h"
#include "net/transport.h"
#include "net/wire.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace sf::net;

namespace {

const char* kSecret = "a-cluster-secret-of-some-length";

bool Contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

// A listening transport that answers Echo with Echo and counts downs.
struct Server {
  std::unique_ptr<Transport> t;
  std::string address;
  std::atomic<int> downs{0};
  std::atomic<int> messages{0};
  explicit Server(const std::string& secret = kSecret, TransportOptions o = {}) {
    o.secret = secret;
    o.node_name = "server";
    auto r = Transport::Create(
        o,
        [this](const ConnectionPtr& c, Message m) {
          ++messages;
          if (auto* e = std::get_if<Echo>(&m.body)) {
            Message reply;
            reply.request_id = m.request_id;
            reply.body = Echo{e->payload};
            c->Send(reply);
          }
          // Anything else is left unanswered (timeouts are tested with it).
        },
        [this](const ConnectionPtr&, const Status&) { ++downs; });
    REQUIRE(r.ok());
    t = std::move(*r);
    auto port = t->Listen("127.0.0.1", 0);
    REQUIRE(port.ok());
    address = "127.0.0.1:" + std::to_string(*port);
  }
};

std::unique_ptr<Transport> Client(const std::string& secret = kSecret, TransportOptions o = {}) {
  o.secret = secret;
  auto r = Transport::Create(o, nullptr, nullptr);
  REQUIRE(r.ok());
  return std::move(*r);
}

Result<Message> Call(Connection& c, Body body, int timeout_ms) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<Message>> reply;
  c.Request(std::move(body), timeout_ms, [&](Result<Message> r) {
    std::lock_guard<std::mutex> l(mu);
    reply.emplace(std::move(r));
    cv.notify_all();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return reply.has_value(); });
  return std::move(*reply);
}

}  // namespace

TEST_CASE("Transport: the handshake admits a peer with the secret and echoes", "[transport]") {
  Server s;
  auto c = Client();
  auto conn = c->Connect(s.address);
  REQUIRE(conn.ok());
  REQUIRE((*conn)->peer_name() == "server");
  std::vector<float> v(1000);
  for (int i = 0; i < 1000; ++i) v[i] = 0.5f * i;
  auto r = Call(**conn, Echo{Tensor::FromVector(v, {10, 100})}, 5000);
  REQUIRE(r.ok());
  const Tensor& back = std::get<Echo>(r->body).payload;
  REQUIRE(back.shape() == Shape{10, 100});
  REQUIRE(std::memcmp(back.raw_data(), v.data(), v.size() * 4) == 0);
}

TEST_CASE("Transport: a 64 MiB tensor arrives intact", "[transport]") {
  Server s;
  auto c = Client();
  auto conn = c->Connect(s.address);
  REQUIRE(conn.ok());
  Tensor big(DType::kInt32, {16 << 20});
  for (int64_t i = 0; i < big.num_elements(); ++i) big.data<int32_t>()[i] = static_cast<int32_t>(i * 2654435761u);
  auto r = Call(**conn, Echo{big}, 60000);
  REQUIRE(r.ok());
  const Tensor& back = std::get<Echo>(r->body).payload;
  REQUIRE(back.bytes() == big.bytes());
  REQUIRE(std::memcmp(back.raw_data(), big.raw_data(), big.bytes()) == 0);
}

TEST_CASE("Transport: a wrong secret is refused on both sides, the server keeps serving", "[transport]") {
  Server s;
  auto bad = Client("some-other-secret-entirely");
  auto conn = bad->Connect(s.address);
  REQUIRE(!conn.ok());
  REQUIRE(conn.status().code() == Code::kPermissionDenied);
  // A server without the secret cannot pass as a member either.
  Server impostor("an-impostor-who-guessed-wrong");
  auto good = Client();
  auto c2 = good->Connect(impostor.address);
  REQUIRE(!c2.ok());
  REQUIRE(c2.status().code() == Code::kPermissionDenied);
  REQUIRE(Contains(c2.status(), "secret"));
  REQUIRE(impostor.messages == 0);
  // The real server still admits the right peer.
  auto c3 = good->Connect(s.address);
  REQUIRE(c3.ok());
  REQUIRE(Call(**c3, Echo{Tensor::Scalar(1.0f)}, 5000).ok());
  REQUIRE(s.messages == 1);  // nothing from the refused peer got through
}

TEST_CASE("Transport: short secrets and bad addresses are refused with clear errors", "[transport]") {
  TransportOptions o;
  o.secret = "short";
  auto t = Transport::Create(o, nullptr, nullptr);
  REQUIRE(!t.ok());
  REQUIRE(Contains(t.status(), "16 bytes"));
  auto c = Client();
  auto r = c->Connect("no-port-here");
  REQUIRE(!r.ok());
  REQUIRE(r.status().code() == Code::kInvalidArgument);
  auto r2 = c->Connect("127.0.0.1:1");  // nobody listens on port 1
  REQUIRE(!r2.ok());
  REQUIRE(r2.status().code() == Code::kUnavailable);
  REQUIRE(Contains(r2.status(), "127.0.0.1:1"));
}

TEST_CASE("Transport: a request nobody answers times out naming the peer", "[transport]") {
  Server s;
  auto c = Client();
  auto conn = c->Connect(s.address);
  REQUIRE(conn.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Call(**conn, ListMembers{}, 300);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(!r.ok());
  REQUIRE(r.status().code() == Code::kDeadlineExceeded);
  REQUIRE(Contains(r.status(), "server"));
  REQUIRE(secs < 2.0);
}

TEST_CASE("Transport: a silent listener fails the handshake within the connect timeout", "[transport]") {
  // A socket that accepts (the kernel does) but never speaks.
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  REQUIRE(::bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::listen(ls, 4) == 0);
  REQUIRE(::getsockname(ls, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  TransportOptions o;
  o.connect_timeout_ms = 300;
  auto c = Client(kSecret, o);
  auto r = c->Connect("127.0.0.1:" + std::to_string(ntohs(sa.sin_port)));
  ::close(ls);
  REQUIRE(!r.ok());
  REQUIRE(r.status().code() == Code::kDeadlineExceeded);
}

TEST_CASE("Transport: a peer that goes quiet is declared down by the heartbeat timeout", "[transport]") {
  // The client sends no heartbeats (a huge interval), so the server sees
  // silence and closes the connection after its peer timeout.
  TransportOptions so;
  so.heartbeat_ms = 50;
  so.peer_timeout_ms = 300;
  Server s(kSecret, so);
  TransportOptions co;
  co.heartbeat_ms = 100000;
  co.peer_timeout_ms = 200000;
  auto c = Client(kSecret, co);
  auto conn = c->Connect(s.address);
  REQUIRE(conn.ok());
  REQUIRE(sf::testing::WaitFor([&] { return s.downs > 0; }, std::chrono::seconds(20)));
  REQUIRE(s.downs == 1);
}

TEST_CASE("Transport: a frame from a newer wire version is refused by name", "[transport]") {
  Server s;
  // Handcraft a Hello whose envelope speaks version kWireVersion + 1: encode
  // a normal one and patch the version field through the decoder's view is
  // not possible, so check the decoder's verdict on such a frame instead.
  Message hello;
  hello.body = Hello{kWireVersion + 1, "future", "", RandomNonce()};
  auto frame = EncodeToString(hello);
  REQUIRE(frame.ok());
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  std::string host;
  uint16_t port = 0;
  REQUIRE(ParseAddress(s.address, &host, &port).ok());
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::write(fd, frame->data(), frame->size()) == static_cast<ssize_t>(frame->size()));
  // The server answers Refused naming both versions, then closes.
  std::string got;
  char buf[4096];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r <= 0) break;
    got.append(buf, r);
  }
  ::close(fd);
  auto reply = DecodeFrameString(got);
  REQUIRE(reply.ok());
  auto* refused = std::get_if<Refused>(&reply->body);
  REQUIRE(refused != nullptr);
  REQUIRE(refused->reason.find("version " + std::to_string(kWireVersion + 1)) != std::string::npos);
  REQUIRE(s.messages == 0);
}

TEST_CASE("Transport: a listener whose accept queue is full fails Connect within the connect timeout",
          "[transport]") {
  // Backlog 0 admits one connection; the kernel drops the next SYNs, so a
  // blocking connect() would wait minutes (the dialer may be a node's reader
  // thread: it must not stall).
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  REQUIRE(::bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::listen(ls, 0) == 0);
  REQUIRE(::getsockname(ls, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  int filler = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(::connect(filler, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  TransportOptions o;
  o.connect_timeout_ms = 300;
  auto c = Client(kSecret, o);
  const std::string address = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = c->Connect(address);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(!r.ok());
    INFO(r.status().ToString());
    REQUIRE(Contains(r.status(), address));
    REQUIRE(secs < 1.5);
  }
  ::close(filler);
  ::close(ls);
}

TEST_CASE("Transport: Shutdown from a message handler or a reply callback returns", "[transport]") {
  // A handler that shuts its own transport down (a node told to stop by a
  // message, a client finishing in a callback) must not join its own thread.
  std::unique_ptr<Transport> server;
  sf::testing::Flag shut;
  TransportOptions so;
  so.secret = kSecret;
  auto r = Transport::Create(
      so,
      [&](const ConnectionPtr&, Message) {
        server->Shutdown();
        shut.Set();
      },
      nullptr);
  REQUIRE(r.ok());
  server = std::move(*r);
  auto port = server->Listen("127.0.0.1", 0);
  REQUIRE(port.ok());
  auto c = Client();
  auto conn = c->Connect("127.0.0.1:" + std::to_string(*port));
  REQUIRE(conn.ok());
  auto reply = Call(**conn, ListMembers{}, 5000);
  REQUIRE(!reply.ok());
  REQUIRE(reply.status().code() == Code::kUnavailable);
  REQUIRE(shut.WaitFor(std::chrono::seconds(20)));
  server.reset();  // joins the thread that ran the handler

  // A reply callback (the timer thread, on a deadline) shutting its transport down.
  Server s;
  sf::testing::Flag done;
  auto c2 = Client();
  auto conn2 = c2->Connect(s.address);
  REQUIRE(conn2.ok());
  Transport* t2 = c2.get();
  (*conn2)->Request(ListMembers{}, 100, [&](Result<Message>) {
    t2->Shutdown();
    done.Set();
  });
  REQUIRE(done.WaitFor(std::chrono::seconds(20)));
  c2.reset();
}

TEST_CASE("Transport: sending on a connection that went down says why it went down", "[transport]") {
  auto s = std::make_unique<Server>();
  auto c = Client();
  auto conn = c->Connect(s->address);
  REQUIRE(conn.ok());
  s.reset();  // the server goes away: the client's reader sees the socket close
  REQUIRE(sf::testing::WaitFor([&] { return !(*conn)->is_up(); }, std::chrono::seconds(20)));
  Status st = (*conn)->Send(Message{0, Echo{}});
  REQUIRE(st.code() == Code::kUnavailable);
  INFO(st.ToString());
  REQUIRE(Contains(st, "server"));
  REQUIRE(Contains(st, "closed by"));
}
