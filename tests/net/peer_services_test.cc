// The services a node hands a peer at hello (net/peer.capnp), seen from a
// hand-made Cap'n Proto client that bypasses net::Connection: a session
// gets no capability for membership, tensors or collectives at all, a node
// gets every one, and each typed method works through its capability. And
// net::Connection refuses, naming the service, what the peer did not offer.
#include <catch2/catch.hpp>

#include <capnp/ez-rpc.h>
#include <capnp/message.h>

#include <atomic>
#include <string>

#include "net/credentials.h"
#include "net/peer.capnp.h"
#include "net/peer_rpc.h"
#include "net/wire_envelope.h"
#include "tests/support/test_credentials.h"

using namespace sf;
using namespace sf::net;
namespace rp = sf::proto::rpc;

namespace {

// A node endpoint that answers Echo with Echo and counts what it is given.
struct EchoNode {
  std::unique_ptr<Endpoint> e;
  uint16_t port = 0;
  std::atomic<int> messages{0};
  explicit EchoNode(bool insecure) {
    EndpointOptions o;
    o.role = Role::kNode;
    o.insecure = insecure;
    o.tls_dir = testing::TestTlsDir();
    o.node_name = "node";
    o.log = false;
    auto r = Endpoint::Create(
        o,
        [this](const ConnectionPtr& c, Message m) {
          ++messages;
          if (auto* e = std::get_if<Echo>(&m.body)) c->Send(Message{m.request_id, Echo{e->payload}});
        },
        nullptr);
    REQUIRE(r.ok());
    e = std::move(*r);
    auto p = e->Listen("127.0.0.1", 0);
    REQUIRE(p.ok());
    port = *p;
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
  EchoNode node(/*insecure=*/true);
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
    CHECK(s.hasMembership() == is_node);
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
  EchoNode node(/*insecure=*/true);
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
    CHECK_FALSE(r.getServices().hasMembership());
  }
}

TEST_CASE("Services: a connection refuses what the peer did not offer, naming the service", "[rpc]") {
  EchoNode node(/*insecure=*/false);
  EndpointOptions o;
  o.role = Role::kSession;
  o.tls_dir = testing::TestTlsDir();
  o.log = false;
  auto session = Endpoint::Create(o, nullptr, nullptr);
  REQUIRE(session.ok());
  auto c = (*session)->Connect("127.0.0.1:" + std::to_string(node.port));
  REQUIRE(c.ok());
  Status s = (*c)->Send(Message{0, SendTensor{1, "edge", "", 0, false, Tensor::Scalar<float>(1.f)}});
  CHECK(s.code() == Code::kPermissionDenied);
  CHECK(s.message().find("rendezvous") != std::string::npos);
  auto m = Call(*c, Membership{}, 5000);
  CHECK(m.status().code() == Code::kPermissionDenied);
  CHECK(m.status().message().find("membership") != std::string::npos);
  // The wrong form for a kind is an error too, before anything is sent.
  auto wrong = Call(*c, CleanupStep{1, 0}, 5000);
  CHECK(wrong.status().code() == Code::kInvalidArgument);
  CHECK((*c)->Send(Message{0, Echo{}}).code() == Code::kInvalidArgument);
  // What the session may use still works, and the node saw none of the refused.
  REQUIRE(Call(*c, Echo{Tensor::Scalar<float>(2.f)}, 5000).ok());
  CHECK(node.messages == 1);
}
