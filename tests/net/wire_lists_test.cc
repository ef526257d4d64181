// Long lists on the wire (issue 36, item 4): a list is read once when a
// message is decoded, so what Cap'n Proto charges to its traversal limit
// grows with the message, not with the list's length times its reads.
// Through the frame decoder and through a real RPC connection.
#include <catch2/catch.hpp>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "net/peer_rpc.h"
#include "net/wire.h"
#include "proto/messages.capnp.h"
#include "tests/support/test_credentials.h"

using namespace sf;
using namespace sf::net;

namespace {

// n distinct variable names of about 12 bytes.
std::vector<std::string> Names(size_t n) {
  std::vector<std::string> v;
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) v.push_back("layer/w_" + std::to_string(i));
  return v;
}

// A node endpoint that answers a ReadVariables with every name and a value,
// and a registration with a StatusReply whose message is its count of targets.
struct CountingNode : Handler {
  std::unique_ptr<Endpoint> e;
  std::string address;
  // Answered as a node answers a read: every name with a value.
  void ServeReadVariables(const ConnectionPtr&, ReadVariables v, Answer<VariableValues> done) override {
    VariableValues out{v.names, {}};
    for (size_t i = 0; i < v.names.size(); ++i) out.values.push_back(Tensor::Scalar<float>(1.0f * i));
    done(std::move(out));
  }
  void ServeRegister(const ConnectionPtr&, RegisterPartition r, Answer<StatusReply> done) override {
    done(Internal(std::to_string(r.targets.size())));
  }
  ~CountingNode() override { e.reset(); }
  CountingNode() {
    EndpointOptions o;
    o.role = Role::kNode;
    o.tls_dir = testing::TestTlsDir();
    o.node_name = "counting";
    o.log = false;
    auto r = Endpoint::Create(o, this, nullptr);
    REQUIRE(r.ok());
    e = std::move(*r);
    auto port = e->Listen("127.0.0.1", 0);
    REQUIRE(port.ok());
    address = "127.0.0.1:" + std::to_string(*port);
  }
};

}  // namespace

TEST_CASE("Wire: a ReadVariables naming 100,000 variables decodes, its list read once", "[wire][limits]") {
  for (size_t n : {size_t{17000}, size_t{100000}}) {
    ReadVariables v{Names(n)};
    auto bytes = EncodeToString(Message{7, v});
    REQUIRE(bytes.ok());
    auto back = DecodeFrameString(*bytes, WireLimits{});
    INFO(n << ": " << back.status().ToString());
    REQUIRE(back.ok());
    CHECK(std::get<ReadVariables>(back->body).names.size() == n);
  }
}

TEST_CASE("Wire: a ReadVariables naming 100,000 variables reaches a node over RPC", "[wire][limits][rpc]") {
  CountingNode node;
  EndpointOptions o;
  o.role = Role::kSession;
  o.tls_dir = testing::TestTlsDir();
  o.log = false;
  auto client = Endpoint::Create(o, nullptr, nullptr);
  REQUIRE(client.ok());
  auto c = (*client)->Connect(node.address);
  REQUIRE(c.ok());
  for (size_t n : {size_t{17000}, size_t{100000}}) {
    auto v = Call(*c, ReadVariables{Names(n)}, 30000);
    INFO(n << ": " << v.status().ToString());
    REQUIRE(v.ok());
    REQUIRE(v->names.size() == n);
    REQUIRE(v->values.size() == n);
    CHECK(v->values[n - 1].scalar_as<float>() == 1.0f * (n - 1));
  }
}

TEST_CASE("Wire: a registration is decoded off the I/O thread and answered in order", "[wire][limits][rpc]") {
  CountingNode node;
  EndpointOptions o;
  o.role = Role::kSession;
  o.tls_dir = testing::TestTlsDir();
  o.log = false;
  auto client = Endpoint::Create(o, nullptr, nullptr);
  REQUIRE(client.ok());
  auto c = (*client)->Connect(node.address);
  REQUIRE(c.ok());
  for (size_t n : {size_t{0}, size_t{3}, size_t{1} << 20}) {
    RegisterPartition r;
    r.session_id = 1;
    r.handle = n;
    r.targets = Names(n);
    auto reply = Call(*c, std::move(r), 60000);
    // The node's answer is an error naming the count.
    INFO(n << ": " << reply.status().ToString());
    CHECK(reply.status().code() == Code::kInternal);
    CHECK(reply.status().message() == std::to_string(n));
  }
}

TEST_CASE("Wire: a registration naming more than its bound is refused before its lists are read",
          "[wire][limits]") {
  // Built by hand: the encoder refuses it. 2^23 empty targets (null
  // pointers, 64 MiB) and 5000 tasks, each past its bound.
  for (int which = 0; which < 2; ++which) {
    capnp::MallocMessageBuilder b;
    auto env = b.initRoot<proto::wire::Envelope>();
    env.setVersion(kWireVersion);
    env.setRequestId(1);
    auto r = env.getBody().initRegisterPartition();
    r.setDevice("/job:worker/task:0/device:CPU:0");
    if (which == 0) r.initTargets(kMaxRegisteredNodes * 2);
    else r.initTasks(kMaxRegisteredTasks + 904);
    auto words = capnp::messageToFlatArray(b);
    auto bytes = words.asBytes();
    std::string frame(kFrameMagic, sizeof(kFrameMagic));
    const uint32_t n = static_cast<uint32_t>(bytes.size());
    frame.append(reinterpret_cast<const char*>(&n), 4);
    frame.append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
    const auto t0 = std::chrono::steady_clock::now();
    auto m = DecodeFrameString(frame, WireLimits{});
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(m.status().ToString());
    REQUIRE(!m.ok());
    CHECK(m.status().code() == Code::kInvalidArgument);
    CHECK(m.status().message().find(which == 0 ? std::to_string(kMaxRegisteredNodes)
                                               : std::to_string(kMaxRegisteredTasks)) != std::string::npos);
    CHECK(secs < 0.5);  // no list walked (2^23 elements take seconds)
  }
}
