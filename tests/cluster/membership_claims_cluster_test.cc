// Membership no credential can rewrite (issue 36, item 6), as it stands on
// node processes with etcd: a node credential that claims another member's
// name and address in its hello, then goes away, ends nobody's life (a node
// reports to etcd only the members it dialed itself), and no membership
// message changes etcd's list; a node with a credential of its own
// registers only under its certificate's name. Bounded by deadlines.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "examples/common/local_cluster.h"
#include "net/peer_rpc.h"
#include "shardflow/cluster.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;

namespace {

// The etcd lives of the cluster's members, by address.
std::vector<std::pair<std::string, uint64_t>> Lives(const examples::LocalCluster& cluster) {
  std::vector<std::pair<std::string, uint64_t>> out;
  auto m = ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir());
  if (m.ok())
    for (const auto& x : *m) out.emplace_back(x.address, x.incarnation);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("Membership: a peer claiming another member's name and address ends no life when it goes",
          "[cluster][membership][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  const std::string a0 = cluster.addresses()[0], a1 = cluster.addresses()[1];
  const auto before = Lives(cluster);
  REQUIRE(before.size() == 2);
  auto members = ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir());
  REQUIRE(members.ok());
  std::string name1;
  for (const auto& m : *members)
    if (m.address == a1) name1 = m.name;
  REQUIRE(!name1.empty());
  for (int round = 0; round < 3; ++round) {
    // A node credential saying it is member 1 (its name and listen address).
    net::EndpointOptions o;
    o.role = net::Role::kNode;
    o.tls_dir = cluster.tls_dir();
    o.node_name = name1;
    o.listen_address = a1;
    o.log = false;
    auto e = net::Endpoint::Create(o, nullptr, nullptr);
    REQUIRE(e.ok());
    auto c = (*e)->Connect(a0);
    REQUIRE(c.ok());
    REQUIRE(net::Call(*c, net::ListMembers{}, 10000).ok());
    // No message drops member 1: a view is no request, and nodes take no views.
    net::Membership leaving;
    leaving.leaving.push_back({name1, a1, before[0].first == a1 ? before[0].second : before[1].second});
    CHECK(net::detail::CallBody(*c, leaving, 10000).status().code() == Code::kInvalidArgument);
    CHECK((*c)->Send(net::Message{0, leaving}).code() == Code::kPermissionDenied);
    (*c)->Close();
    (*e)->Shutdown();
  }
  // A report of member 1 down would reach etcd within milliseconds; a
  // second is the point: nothing may happen in it.
  testing::PauseFor(1000ms);
  CHECK(Lives(cluster) == before);
  // And both nodes still list both members.
  for (const std::string& at : {a0, a1}) {
    auto m = ListClusterMembers(at, cluster.tls_dir());
    REQUIRE(m.ok());
    CHECK(m->size() == 2);
  }
}

TEST_CASE("Membership: a node with a credential of its own registers only under its certificate's name",
          "[cluster][membership]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  REQUIRE(IssueClusterCredential(cluster.tls_dir(), "node", "n7").ok());
  // Its etcd user, as the operator makes it after issuing a credential.
  REQUIRE(EnableClusterAuth(cluster.etcd_endpoint(), cluster.tls_dir()).ok());
  NodeOptions no;
  no.tls_dir = cluster.tls_dir();
  no.tls_name = "n7";
  no.etcd = cluster.etcd_endpoint();
  no.lease_ttl_s = 1;
  // Another name than its certificate's: refused, naming both, before etcd hears of it.
  no.name = "node-0";
  auto other = ClusterNode::Start(no);
  REQUIRE(!other.ok());
  CHECK(other.status().code() == Code::kInvalidArgument);
  CHECK(other.status().message().find("node-0") != std::string::npos);
  CHECK(other.status().message().find("n7") != std::string::npos);
  // No --name: the certificate's.
  no.name.clear();
  auto own = ClusterNode::Start(no);
  INFO(own.status().ToString());
  REQUIRE(own.ok());
  CHECK((*own)->name() == "n7");
  std::vector<MemberInfo> members;
  REQUIRE(testing::WaitFor([&] {
    auto m = ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir());
    if (m.ok()) members = *m;
    return members.size() == 2;
  }, 20s));
  int named = 0;
  for (const auto& m : members) named += m.name == "n7" && m.address == (*own)->address();
  CHECK(named == 1);
  (*own)->Stop();
}
