// The caps on authenticated connections between in-process endpoints
// (net/peer_admission.cc): a new peer past a cap takes the place of the
// least recently used connection of its credential, or of the credential
// holding the most, and is never the one refused.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "net/peer_rpc.h"
#include "tests/support/test_credentials.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace sf::net;
using namespace std::chrono_literals;

namespace {

EndpointOptions Opts(Role role) {
  EndpointOptions o;
  o.role = role;
  o.tls_dir = testing::TestTlsDir();
  o.log = false;
  return o;
}

// A listening node endpoint answering Echo, with the caps of `o`.
struct Server : Handler {
  std::unique_ptr<Endpoint> e;
  std::string address;
  void ServeEcho(const ConnectionPtr&, Echo m, Answer<Echo> done) override { done(std::move(m)); }
  ~Server() override { e.reset(); }
  explicit Server(EndpointOptions o) {
    auto r = Endpoint::Create(o, this, nullptr);
    REQUIRE(r.ok());
    e = std::move(*r);
    auto port = e->Listen("127.0.0.1", 0);
    REQUIRE(port.ok());
    address = "127.0.0.1:" + std::to_string(*port);
  }
};

std::unique_ptr<Endpoint> Client(Role role, const std::string& from = "") {
  EndpointOptions o = Opts(role);
  o.local_address = from;
  auto r = Endpoint::Create(o, nullptr, nullptr);
  REQUIRE(r.ok());
  return std::move(*r);
}

bool Echoes(const ConnectionPtr& c) { return Call(c, Echo{Tensor::FromVector<float>({1}, {1})}, 5000).ok(); }

}  // namespace

TEST_CASE("Admission: past a credential's cap its least recently used connection makes room", "[rpc][hostile]") {
  EndpointOptions o = Opts(Role::kNode);
  o.max_connections_per_credential = 3;
  Server s(o);
  auto c = Client(Role::kSession);
  std::vector<ConnectionPtr> conns;
  for (int i = 0; i < 3; ++i) {
    auto k = c->Connect(s.address);
    REQUIRE(k.ok());
    conns.push_back(*k);
  }
  // The first is used last, so the second is the least recently used.
  REQUIRE(Echoes(conns[2]));
  REQUIRE(Echoes(conns[0]));
  auto fourth = c->Connect(s.address);
  INFO(fourth.status().ToString());
  REQUIRE(fourth.ok());
  CHECK(Echoes(*fourth));
  REQUIRE(testing::WaitFor([&] { return !conns[1]->is_up(); }, 10s));
  CHECK(conns[0]->is_up());
  CHECK(conns[2]->is_up());
  // Another credential is not counted against this one's cap.
  auto node = Client(Role::kNode);
  auto n = node->Connect(s.address);
  REQUIRE(n.ok());
  CHECK(Echoes(*n));
  CHECK(conns[0]->is_up());
}

TEST_CASE("Admission: past the total cap the biggest holder's least recently used connection makes room",
          "[rpc][hostile]") {
  EndpointOptions o = Opts(Role::kNode);
  o.max_connections = 4;
  Server s(o);
  // The session credential holds all four places, from two addresses.
  auto a = Client(Role::kSession, "127.0.0.2");
  auto b = Client(Role::kSession, "127.0.0.3");
  std::vector<ConnectionPtr> held;
  for (int i = 0; i < 4; ++i) {
    auto k = (i % 2 ? b : a)->Connect(s.address);
    REQUIRE(k.ok());
    held.push_back(*k);
  }
  for (int i = 3; i >= 1; --i) REQUIRE(Echoes(held[i]));  // held[0] is the least recently used
  auto node = Client(Role::kNode);
  auto n = node->Connect(s.address);
  INFO(n.status().ToString());
  REQUIRE(n.ok());
  CHECK(Echoes(*n));
  REQUIRE(testing::WaitFor([&] { return !held[0]->is_up(); }, 10s));
  for (int i = 1; i < 4; ++i) CHECK(held[i]->is_up());
}
