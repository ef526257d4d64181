// The services a node hands a peer at hello (proto/peer.capnp), seen from a
// hand-made Cap'n Proto client that bypasses net::Connection: a session
// gets no capability for placement orders, tensors or collectives at all, a node
// gets every one, and each typed method works through its capability. And
// net::Connection refuses, naming the service, what the peer did not offer.
#include <catch2/catch.hpp>

#include <capnp/ez-rpc.h>
#include <kj/async-io.h>
#include <capnp/message.h>
#include <capnp/serialize.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "net/credentials.h"
#include "proto/peer.capnp.h"
#include "net/peer_rpc.h"
#include "net/wire_envelope.h"
#include "tests/support/raw_socket.h"
#include "tests/support/test_credentials.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace sf::net;
namespace rp = sf::proto::rpc;

namespace {

// A node endpoint that answers Echo with Echo, counts what it is given,
// keeps the tensors it is sent and the reason of its last down connection.
struct TestNode : Handler {
  uint16_t port = 0;
  std::atomic<int> messages{0};
  std::mutex mu;
  std::vector<SendTensor> got;  // GUARDED_BY(mu)
  std::atomic<int> downs{0};
  std::string why;  // GUARDED_BY(mu): the last down's reason
  // Last: destroyed first, so its handlers never run on the members above
  // once they are gone (shutting down reports its connections down).
  std::unique_ptr<Endpoint> e;
  explicit TestNode(bool insecure, uint64_t max_frame_bytes = uint64_t{1} << 31, int write_timeout_ms = 10000) {
    EndpointOptions o;
    o.role = Role::kNode;
    o.insecure = insecure;
    o.tls_dir = testing::TestTlsDir();
    o.node_name = "node";
    o.log = false;
    o.max_frame_bytes = max_frame_bytes;
    o.write_timeout_ms = write_timeout_ms;
    // Hand-made clients send no heartbeats: only what is tested drops them.
    o.peer_timeout_ms = 60000;
    auto r = Endpoint::Create(
        o, this,
        [this](const ConnectionPtr&, const Status& s) {
          std::lock_guard<std::mutex> l(mu);
          why = s.message();
          ++downs;
        });
    REQUIRE(r.ok());
    e = std::move(*r);
    auto p = e->Listen("127.0.0.1", 0);
    REQUIRE(p.ok());
    port = *p;
  }
  // Every message counts; an echo is answered, tensors are kept.
  void ServeEcho(const ConnectionPtr&, Echo m, Answer<Echo> done) override {
    ++messages;
    done(std::move(m));
  }
  void OnTensor(const ConnectionPtr&, SendTensor t) override {
    ++messages;
    std::lock_guard<std::mutex> l(mu);
    got.push_back(std::move(t));
  }
  void ServeMembers(const ConnectionPtr&, Answer<Membership>) override { ++messages; }
  void OnMembership(const ConnectionPtr&, Membership) override { ++messages; }
  void OnCleanup(const ConnectionPtr&, CleanupStep) override { ++messages; }
  void OnAbort(const ConnectionPtr&, AbortStep) override { ++messages; }
  size_t Count() {
    std::lock_guard<std::mutex> l(mu);
    return got.size();
  }
};

// What a dialer must serve: heartbeats and replies arrive on it.
class QuietChannel final : public rp::Channel::Server {
 protected:
  kj::Promise<void> heartbeat(HeartbeatContext) override { return kj::READY_NOW; }
  kj::Promise<void> replies(RepliesContext) override { return kj::READY_NOW; }
  kj::Promise<void> progress(ProgressContext) override { return kj::READY_NOW; }
};

void FillHello(rp::Peer::HelloParams::Builder p, const char* role, bool with_channel) {
  auto info = p.initInfo();
  info.setVersion(kWireVersion);
  info.setRole(role);
  if (with_channel) p.initServices().setChannel(kj::heap<QuietChannel>());
}

}  // namespace

TEST_CASE("Services: a peer is handed the capabilities its role may call, no others", "[rpc]") {
  // Insecure: the claimed role is believed, so one client can claim both.
  TestNode node(/*insecure=*/true);
  for (const char* role : {"session", "node"}) {
    INFO(role);
    const bool is_node = std::string(role) == "node";
    capnp::EzRpcClient client("127.0.0.1", node.port);
    auto& ws = client.getWaitScope();
    auto hello = client.getMain<rp::Peer>().helloRequest();
    FillHello(hello, role, true);
    auto r = hello.send().wait(ws);
    INFO(r.getStatus().getMessage().cStr());
    REQUIRE(r.getStatus().getCode() == 0);
    auto s = r.getServices();
    CHECK(s.hasChannel());
    CHECK(s.hasDiagnostics());
    CHECK(s.hasPartitions());
    CHECK(s.hasVariables());
    CHECK(s.hasMembers());
    CHECK(s.hasPlacement() == is_node);
    CHECK(s.hasRendezvous() == is_node);
    CHECK(s.hasCollectives() == is_node);

    // A typed call through its capability: Diagnostics.echo.
    auto echo = s.getDiagnostics().echoRequest();
    echo.setId(7);
    Tensor payload = Tensor::FromVector<float>({1, 2, 3}, {3});
    REQUIRE(EncodeStruct<Echo>(Echo{payload}, echo.initRequest()).ok());
    auto reply = echo.send().wait(ws);
    CHECK_FALSE(reply.getByTell());
    auto m = DecodeEnvelope(reply.getReply());
    REQUIRE(m.ok());
    auto* back = std::get_if<Echo>(&m->body);
    REQUIRE(back);
    CHECK(back->payload.data<float>()[2] == 3.0f);

    // A capability the session was not given cannot be called: calling a
    // null capability fails here, without a byte reaching the node.
    if (!is_node) {
      rp::Rendezvous::Client none = s.getRendezvous();
      auto send = none.sendRequest();
      send.initTensors(1);
      CHECK_THROWS(send.send().wait(ws));
    }
  }
}

TEST_CASE("Services: a hello without a channel, or twice, is refused", "[rpc]") {
  TestNode node(/*insecure=*/true);
  {
    capnp::EzRpcClient client("127.0.0.1", node.port);
    auto hello = client.getMain<rp::Peer>().helloRequest();
    FillHello(hello, "node", /*with_channel=*/false);
    auto r = hello.send().wait(client.getWaitScope());
    CHECK(r.getStatus().getCode() != 0);
    CHECK(std::string(r.getStatus().getMessage().cStr()).find("channel") != std::string::npos);
    CHECK_FALSE(r.getServices().hasPartitions());
  }
  {
    capnp::EzRpcClient client("127.0.0.1", node.port);
    auto peer = client.getMain<rp::Peer>();
    auto first = peer.helloRequest();
    FillHello(first, "node", true);
    REQUIRE(first.send().wait(client.getWaitScope()).getStatus().getCode() == 0);
    auto again = peer.helloRequest();
    FillHello(again, "node", true);
    auto r = again.send().wait(client.getWaitScope());
    CHECK(r.getStatus().getCode() != 0);
    CHECK_FALSE(r.getServices().hasPlacement());
  }
}

TEST_CASE("Services: a connection refuses what the peer did not offer, naming the service", "[rpc]") {
  TestNode node(/*insecure=*/false);
  std::unique_ptr<Endpoint> session;
  auto c = testing::ConnectAs(Role::kSession, testing::TestTlsDir(), "127.0.0.1:" + std::to_string(node.port),
                              &session);
  REQUIRE(c.ok());
  Status s = (*c)->Send(Message{0, SendTensor{1, "edge", "", 0, false, Tensor::Scalar<float>(1.f)}});
  CHECK(s.code() == Code::kPermissionDenied);
  CHECK(s.message().find("rendezvous") != std::string::npos);
  auto m = Call(*c, MoveSlot{}, 5000);
  CHECK(m.status().code() == Code::kPermissionDenied);
  CHECK(m.status().message().find("placement") != std::string::npos);
  // No method changes the membership (etcd's): a view is not a request.
  auto view = detail::CallBody(*c, Membership{}, 5000);
  CHECK(view.status().code() == Code::kInvalidArgument);
  CHECK(view.status().message().find("Membership is not a request") != std::string::npos);
  // The wrong form for a kind is an error too, before anything is sent.
  auto wrong = detail::CallBody(*c, CleanupStep{1, 0}, 5000);
  CHECK(wrong.status().code() == Code::kInvalidArgument);
  CHECK((*c)->Send(Message{0, Echo{}}).code() == Code::kInvalidArgument);
  // What the session may use still works, and the node saw none of the refused.
  REQUIRE(Call(*c, Echo{Tensor::Scalar<float>(2.f)}, 5000).ok());
  CHECK(node.messages == 1);
}

TEST_CASE("Services: no call changes a node's membership: a view sent to its channel drops the sender",
          "[rpc][hostile]") {
  // Insecure: the claimed role is believed, so one client can claim both.
  TestNode node(/*insecure=*/true);
  for (const char* role : {"session", "node"}) {
    INFO(role);
    capnp::EzRpcClient client("127.0.0.1", node.port);
    auto& ws = client.getWaitScope();
    auto hello = client.getMain<rp::Peer>().helloRequest();
    FillHello(hello, role, true);
    auto r = hello.send().wait(ws);
    REQUIRE(r.getStatus().getCode() == 0);
    // Views go from nodes to their watchers; a node takes none, from anyone.
    auto views = r.getServices().getChannel().membersRequest();
    Membership ghost;
    ghost.members.push_back({"ghost", "127.0.0.1:9", 1});
    ghost.leaving.push_back({"node", "127.0.0.1:1", 1});
    REQUIRE(EncodeStruct<Membership>(ghost, views.initViews(1)[0]).ok());
    CHECK_THROWS(views.send().wait(ws));
    // And the sender is dropped, for that.
    const int want = role[0] == 's' ? 1 : 2;
    REQUIRE(testing::WaitFor([&] { return node.downs >= want; }, std::chrono::seconds(10)));
    std::lock_guard<std::mutex> l(node.mu);
    CHECK(node.why.find("a membership view sent to a node's channel") != std::string::npos);
  }
  CHECK(node.messages == 0);
}

namespace {


Tensor Pattern(DType dtype, int64_t n) {
  Tensor t(dtype, {n});
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.bytes(); ++i) p[i] = static_cast<uint8_t>(i * 131 + 7);
  if (dtype == DType::kBool)
    for (size_t i = 0; i < t.bytes(); ++i) p[i] = p[i] & 1;
  return t;
}

// A connected insecure node client that has said hello, and its rendezvous.
struct RawNode {
  capnp::EzRpcClient client;
  rp::Rendezvous::Client rendezvous = nullptr;
  explicit RawNode(uint16_t port) : client("127.0.0.1", port) {
    auto hello = client.getMain<rp::Peer>().helloRequest();
    FillHello(hello, "node", true);
    auto r = hello.send().wait(client.getWaitScope());
    REQUIRE(r.getStatus().getCode() == 0);
    rendezvous = r.getServices().getRendezvous();
  }
  // Sends one piece; false when the call failed (the node dropped us).
  bool Piece(const Tensor* header_value, uint64_t offset, kj::ArrayPtr<const capnp::byte> data) {
    auto req = rendezvous.sendPieceRequest();
    auto p = req.initPiece();
    if (header_value) {
      auto h = p.initHeader();
      h.setStepId(1);
      h.setEdge("a->b");
      auto v = h.initValue();
      v.setDtype(proto::DType::INT32);
      auto shape = v.initShape(header_value->rank());
      for (int i = 0; i < header_value->rank(); ++i) shape.set(i, header_value->dim(i));
    }
    p.setOffset(offset);
    p.setData(data);
    try {
      req.send().wait(client.getWaitScope());
      return true;
    } catch (const kj::Exception&) {
      return false;
    }
  }
};

}  // namespace

TEST_CASE("Services: a tensor larger than a call streams in pieces and arrives whole", "[rpc]") {
  // No message may exceed 2 MiB: a 5 MiB tensor arrives only in pieces
  // (up to the peer buffer, 2 GiB by default).
  TestNode sink(/*insecure=*/false, /*max_frame_bytes=*/2 << 20);
  std::unique_ptr<Endpoint> sender;
  auto c = testing::ConnectAs(Role::kNode, testing::TestTlsDir(), "127.0.0.1:" + std::to_string(sink.port), &sender);
  REQUIRE(c.ok());
  // Whole pieces; a last piece of partial words; bools; and a small one between.
  const std::vector<Tensor> sent = {Pattern(DType::kFloat32, (5 << 20) / 4), Pattern(DType::kInt32, (3 << 20) / 4 + 1),
                                    Pattern(DType::kInt32, 16), Pattern(DType::kBool, (1 << 20) + 3)};
  for (size_t i = 0; i < sent.size(); ++i)
    REQUIRE((*c)->Send(Message{0, SendTensor{static_cast<int64_t>(i), "e" + std::to_string(i), "", 0, false, sent[i],
                                             900 + i}})
                .ok());
  REQUIRE(sf::testing::WaitFor([&] { return sink.Count() == sent.size(); }, std::chrono::seconds(20)));
  std::lock_guard<std::mutex> l(sink.mu);
  for (size_t i = 0; i < sent.size(); ++i) {
    INFO(i);
    const SendTensor& t = sink.got[i];  // in order
    CHECK(t.edge == "e" + std::to_string(i));
    CHECK(t.session_id == 900 + i);
    CHECK(t.value.dtype() == sent[i].dtype());
    CHECK(t.value.shape() == sent[i].shape());
    REQUIRE(t.value.bytes() == sent[i].bytes());
    CHECK(std::memcmp(t.value.raw_data(), sent[i].raw_data(), sent[i].bytes()) == 0);
  }
  CHECK(sink.downs == 0);
}

TEST_CASE("Services: a peer that breaks the piece stream is dropped", "[rpc]") {
  TestNode sink(/*insecure=*/true);
  const Tensor shape_of = Tensor(DType::kInt32, {1 << 20});  // 4 MiB declared
  std::vector<capnp::byte> chunk(1 << 20, 1);
  const kj::ArrayPtr<const capnp::byte> piece(chunk.data(), chunk.size());
  SECTION("a piece with no tensor begun") {
    RawNode n(sink.port);
    CHECK_FALSE(n.Piece(nullptr, 0, piece));
  }
  SECTION("a piece at the wrong offset") {
    RawNode n(sink.port);
    REQUIRE(n.Piece(&shape_of, 0, piece));
    CHECK_FALSE(n.Piece(nullptr, 2 << 20, piece));
  }
  SECTION("a second tensor begun before the first ended") {
    RawNode n(sink.port);
    REQUIRE(n.Piece(&shape_of, 0, piece));
    CHECK_FALSE(n.Piece(&shape_of, 0, piece));
  }
  SECTION("more bytes than declared") {
    RawNode n(sink.port);
    const Tensor small(DType::kInt32, {1000});
    CHECK_FALSE(n.Piece(&small, 0, piece));
  }
  SECTION("a tensor larger than any message may be, before it is allocated") {
    RawNode n(sink.port);
    auto req = n.rendezvous.sendPieceRequest();
    auto v = req.initPiece().initHeader().initValue();
    v.setDtype(proto::DType::INT32);
    auto s = v.initShape(2);
    s.set(0, int64_t{1} << 20);
    s.set(1, int64_t{1} << 20);  // 4 TiB
    CHECK_THROWS(req.send().wait(n.client.getWaitScope()));
  }
  SECTION("a tensor begun and never finished") {
    RawNode n(sink.port);
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(n.Piece(&shape_of, 0, {}));
    // Nothing of 4 MiB arrives: after the grace second it is under the
    // minimum rate (the sink would wait 60 s for a silent peer).
    REQUIRE(sf::testing::WaitFor([&] { return sink.downs > 0; }, std::chrono::seconds(20)));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    std::lock_guard<std::mutex> l(sink.mu);
    CHECK(sink.why.find("streams arrives at under") != std::string::npos);
  }
  CHECK(sink.Count() == 0);
}

TEST_CASE("Services: mutated streamed-tensor headers never crash the decoder", "[rpc][fuzz]") {
  capnp::MallocMessageBuilder b;
  auto h = b.initRoot<proto::wire::SendTensor>();
  h.setStepId(3);
  h.setEdge("a:0->/job:worker/task:1/device:CPU:0");
  auto v = h.initValue();
  v.setDtype(proto::DType::FLOAT32);
  auto s = v.initShape(3);
  s.set(0, 64);
  s.set(1, 1024);
  s.set(2, 3);
  auto flat = capnp::messageToFlatArray(b);
  std::vector<capnp::word> words(flat.begin(), flat.end());
  std::mt19937_64 rng(20261201);
  int decoded = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<capnp::word> m = words;
    auto* bytes = reinterpret_cast<uint8_t*>(m.data());
    const size_t n = m.size() * sizeof(capnp::word);
    for (int k = 0, flips = 1 + static_cast<int>(rng() % 4); k < flips; ++k) bytes[rng() % n] = static_cast<uint8_t>(rng());
    SendTensor out;
    DType dtype = DType::kInvalid;
    Shape shape;
    uint64_t total = 0;
    Status st;
    try {
      capnp::FlatArrayMessageReader r(kj::ArrayPtr<const capnp::word>(m.data(), m.size()));
      st = DecodeStreamedHeader(r.getRoot<proto::wire::SendTensor>(), WireLimits{}, &out, &dtype, &shape, &total);
    } catch (const kj::Exception&) {
      ++refused;  // the message framing itself is broken: Cap'n Proto refuses it before us
      continue;
    }
    if (!st.ok()) {
      ++refused;
      continue;
    }
    ++decoded;
    // What decodes is self-consistent: the byte count is the shape's.
    uint64_t elems = 1;
    for (int64_t d : shape) {
      REQUIRE(d >= 0);
      elems *= static_cast<uint64_t>(d);
    }
    REQUIRE(total == elems * DTypeSize(dtype));
    REQUIRE(dtype != DType::kInvalid);
  }
  CHECK(decoded > 0);
  CHECK(refused > 0);
}

namespace {

// A channel that takes heartbeats and never answers them.
class MuteChannel final : public rp::Channel::Server {
 protected:
  kj::Promise<void> heartbeat(HeartbeatContext) override { return kj::NEVER_DONE; }
};

}  // namespace

TEST_CASE("Services: a peer that never answers our heartbeats is dropped", "[rpc][hostile]") {
  // It reads (so no write stalls) and is not silent to the sink's 60 s
  // timeout; only its missing answers can drop it, after the write deadline.
  TestNode sink(/*insecure=*/true, uint64_t{1} << 31, /*write_timeout_ms=*/1000);
  capnp::EzRpcClient client("127.0.0.1", sink.port);
  auto& ws = client.getWaitScope();
  auto hello = client.getMain<rp::Peer>().helloRequest();
  auto info = hello.initInfo();
  info.setVersion(kWireVersion);
  info.setRole("node");
  hello.initServices().setChannel(kj::heap<MuteChannel>());
  REQUIRE(hello.send().wait(ws).getStatus().getCode() == 0);
  const auto t0 = std::chrono::steady_clock::now();
  while (sink.downs == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15))
    client.getIoProvider().getTimer().afterDelay(50 * kj::MILLISECONDS).wait(ws);  // serves the sink's calls
  REQUIRE(sink.downs > 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(8));
  std::lock_guard<std::mutex> l(sink.mu);
  CHECK(sink.why.find("answered no heartbeat") != std::string::npos);
}
