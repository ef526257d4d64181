// Membership no credential can rewrite (issue 36, item 6), on etcd's side:
// etcd's authentication and roles (cluster/cluster_auth.h), which
// LocalCluster's etcd turns on. Against a real etcd and node processes,
// bounded by deadlines: a session credential writes no cluster key; node
// A's own credential writes neither node B's member key nor its drain mark
// (nor drains it through a peer message); the operator's credential drains;
// joins, leaves, the election and the map go on under authentication; and
// what etcd 3.4 cannot confine (any node credential may write the map) is
// shown, not assumed.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "cluster/cluster_auth.h"
#include "cluster/etcd_client.h"
#include "cluster/member_table.h"
#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;

namespace {

const std::string kPrefix = "/shardflow/default/";

// A client of the cluster's etcd with credential `name` of its directory.
std::unique_ptr<cluster::EtcdClient> Client(const examples::LocalCluster& c, const std::string& name) {
  auto cred = name == "admin" ? cluster::LoadAdminCredential(c.tls_dir()) : net::LoadCredential(c.tls_dir(), name);
  INFO(cred.status().ToString());
  REQUIRE(cred.ok());
  auto client = cluster::ConnectEtcd(c.etcd_endpoint(), *cred, 5000);
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  return std::move(*client);
}

// Whether s is etcd refusing the request for its user's permissions.
bool Refused(const Status& s) {
  return s.code() == Code::kPermissionDenied && s.message().find("permission denied") != std::string::npos;
}

// A member of the cluster by name, as etcd lists it (name "" if none).
MemberInfo Member(const examples::LocalCluster& c, const std::string& name) {
  auto m = ListEtcdMembers(c.etcd_endpoint(), c.tls_dir());
  if (m.ok())
    for (const auto& x : *m)
      if (x.name == name) return x;
  return {};
}

// The lease of member `name`'s key, read as the operator; 0 when none.
int64_t LeaseOf(cluster::EtcdClient& admin, const std::string& name) {
  auto kv = admin.Get(cluster::MemberKey(kPrefix, name));
  return kv.ok() && kv->has_value() ? (*kv)->lease : 0;
}

// A transaction whose compare fails, so it writes nothing, but whose success
// branch puts key: etcd checks the permissions of both branches first, so it
// is refused exactly when the user may not write key.
Status MayWrite(cluster::EtcdClient& c, const std::string& key) {
  return c.Txn({cluster::EtcdCompare::Version(key, cluster::EtcdCompare::Op::kLess, 0)},
               {cluster::EtcdOp::Put(key, "x")}, {})
      .status();
}

}  // namespace

TEST_CASE("EtcdAuth: a session credential reads the members and the map but writes no cluster key",
          "[cluster][etcd][membership]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  auto session = Client(cluster, "session");
  auto members = session->Range(kPrefix + "members/");
  INFO(members.status().ToString());
  REQUIRE(members.ok());
  CHECK(members->kvs.size() == 2);
  REQUIRE(testing::WaitFor([&] {
    auto map = session->Get(kPrefix + "map");
    return map.ok() && map->has_value();
  }, 20s));
  const std::string victim = members->kvs[0].key;
  // A member key, the map, a drain mark, the election: each refused by etcd.
  CHECK(Refused(session->Put(victim, "v1 127.0.0.1:1 alive").status()));
  CHECK(Refused(session->Put(kPrefix + "members/intruder", "v1 127.0.0.1:1 alive").status()));
  CHECK(Refused(session->Delete(victim).status()));
  CHECK(Refused(session->Put(kPrefix + "map", "{}").status()));
  CHECK(Refused(MayWrite(*session, kPrefix + "map")));
  CHECK(Refused(session->Put(cluster::DrainKey(kPrefix, "node-x"), "v1").status()));
  CHECK(Refused(session->Put(kPrefix + "leader/1", "127.0.0.1:1").status()));
  // Ending a member's life is a write of its key: refused.
  CHECK(Refused(session->RevokeLease(members->kvs[0].lease)));
  // Keys outside the cluster's are not the session's either.
  CHECK(Refused(session->Put("/elsewhere", "x").status()));
  // Both members are untouched.
  auto after = session->Range(kPrefix + "members/");
  REQUIRE(after.ok());
  CHECK(after->kvs.size() == 2);
  CHECK(after->kvs[0].create_revision == members->kvs[0].create_revision);
  // `shardflow cluster members` still reads with it.
  auto listed = ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir());
  REQUIRE(listed.ok());
  CHECK(listed->size() == 2);
  // A credential issued after `cluster auth` has no NAME.etcd.crt and no
  // user yet: refused by etcd, with what to do.
  REQUIRE(IssueClusterCredential(cluster.tls_dir(), "session", "late").ok());
  auto late = ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir(), "default", "late");
  INFO(late.status().ToString());
  CHECK(late.status().code() == Code::kPermissionDenied);
  CHECK(late.status().message().find("cluster auth") != std::string::npos);
  REQUIRE(EnableClusterAuth(cluster.etcd_endpoint(), cluster.tls_dir()).ok());
  CHECK(ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir(), "default", "late").ok());
}

TEST_CASE("EtcdAuth: etcd 3.4 checks no permission on lease keepalives, so a session keeps another's lease alive",
          "[cluster][etcd]") {
  // What etcd 3.4 cannot express, measured: a lease the operator made, with
  // a key under it, outlives its TTL while a session credential refreshes it.
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  auto admin = Client(cluster, "admin");
  auto session = Client(cluster, "session");
  auto lease = admin->GrantLease(1);
  REQUIRE(lease.ok());
  const std::string key = kPrefix + "members/ghost";
  REQUIRE(admin->Put(key, "v1 127.0.0.1:1 alive", lease->id).ok());
  auto gone = [&] {
    auto kv = admin->Get(key);
    return kv.ok() && !kv->has_value();
  };
  {
    auto kept = session->KeepAlive(*lease, [](const Status&) {});
    REQUIRE(kept.ok());
    // Three TTLs: it would have ended in one.
    CHECK(!testing::WaitFor(gone, 3s));
    CHECK(!(*kept)->lost());
  }
  // Left alone, it ends within its TTL (and a little of etcd's lease check).
  CHECK(testing::WaitFor(gone, 10s));
  // Granting leases needs no permission either (harmless: a lease alone holds nothing).
  CHECK(session->GrantLease(1).ok());
}

TEST_CASE("EtcdAuth: node A's credential cannot overwrite node B's member key or drain mark",
          "[cluster][etcd][membership][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  for (const char* n : {"na", "nb"}) REQUIRE(IssueClusterCredential(cluster.tls_dir(), "node", n).ok());
  REQUIRE(EnableClusterAuth(cluster.etcd_endpoint(), cluster.tls_dir()).ok());
  cluster.SetNodeArgs({"--tls-name", "na"});
  auto a = cluster.AddNode(120);
  INFO(a.status().ToString());
  REQUIRE(a.ok());
  cluster.SetNodeArgs({"--tls-name", "nb"});
  auto b = cluster.AddNode(120);
  INFO(b.status().ToString());
  REQUIRE(b.ok());
  REQUIRE(testing::WaitFor([&] { return Member(cluster, "na").address == *a && Member(cluster, "nb").address == *b; },
                           20s));
  const MemberInfo before = Member(cluster, "nb");
  auto admin = Client(cluster, "admin");
  const int64_t b_lease = LeaseOf(*admin, "nb");
  REQUIRE(b_lease != 0);
  auto na = Client(cluster, "na");
  const std::string b_key = cluster::MemberKey(kPrefix, "nb");
  // B's entry: not rewritten (address, leaving), deleted, or its life ended.
  CHECK(Refused(na->Put(b_key, "v1 127.0.0.1:1 alive").status()));
  CHECK(Refused(na->Put(b_key, "v1 " + *b + " leaving").status()));
  CHECK(Refused(na->Delete(b_key).status()));
  CHECK(Refused(na->RevokeLease(b_lease)));
  // Nor a member under another name than its own.
  CHECK(Refused(na->Put(cluster::MemberKey(kPrefix, "nc"), "v1 127.0.0.1:1 alive").status()));
  // B's drain mark: not set.
  CHECK(Refused(na->Put(cluster::DrainKey(kPrefix, "nb"), "v1", b_lease).status()));
  CHECK(Refused(MayWrite(*na, cluster::DrainKey(kPrefix, "nb"))));
  // Nor B's candidacy for placement leader (withdrawing it, or leading in its name).
  CHECK(Refused(MayWrite(*na, kPrefix + "leader/nb")));
  CHECK(Refused(na->Delete(kPrefix + "leader/nb").status()));
  // Its own key, mark and candidacy are its own to write (checked without writing).
  CHECK(MayWrite(*na, cluster::MemberKey(kPrefix, "na")).ok());
  CHECK(MayWrite(*na, cluster::DrainKey(kPrefix, "na")).ok());
  CHECK(MayWrite(*na, kPrefix + "leader/na").ok());
  // Nor through a node: no node method drains (proto/peer.capnp), whatever the credential.
  // Nor through DrainMember with its credential.
  CHECK(Refused(DrainMember(cluster.etcd_endpoint(), cluster.tls_dir(), "nb", 0, "default", "na")));
  // B is the same life, alive.
  const MemberInfo after = Member(cluster, "nb");
  CHECK(after.incarnation == before.incarnation);
  CHECK(after.state == "alive");
  CHECK(after.address == *b);
  // The shared default credential names no one node: it may act as any
  // (docs/CLUSTER.md), as etcd shows.
  auto shared = Client(cluster, "node");
  CHECK(MayWrite(*shared, b_key).ok());
  CHECK(MayWrite(*shared, cluster::DrainKey(kPrefix, "nb")).ok());
  // What etcd 3.4 cannot confine: every node may lead, so every node
  // credential may write the map (the leader's writes are fenced by its
  // transaction on the election key, not by etcd's permissions).
  CHECK(MayWrite(*na, kPrefix + "map").ok());
  // Both B and A campaign, each under its own name.
  auto candidates = admin->Range(kPrefix + "leader/");
  REQUIRE(candidates.ok());
  int named = 0;
  for (const auto& kv : candidates->kvs) named += kv.key == kPrefix + "leader/na" || kv.key == kPrefix + "leader/nb";
  CHECK(named == 2);
}

TEST_CASE("EtcdAuth: under authentication nodes join, lead, write the map and leave, and the operator drains",
          "[cluster][etcd][membership][shard_map]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(3, 120).ok());  // joined, and the map spans all three (WaitMembers)
  auto map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
  INFO(map.status().ToString());
  REQUIRE(map.ok());
  CHECK(map->epoch > 0);  // written by the elected leader, as a node
  auto admin = Client(cluster, "admin");
  auto leader = admin->Range(kPrefix + "leader/");
  REQUIRE(leader.ok());
  CHECK(!leader->kvs.empty());
  // A node with a credential of its own joins too.
  REQUIRE(IssueClusterCredential(cluster.tls_dir(), "node", "nd").ok());
  REQUIRE(EnableClusterAuth(cluster.etcd_endpoint(), cluster.tls_dir()).ok());
  cluster.SetNodeArgs({"--tls-name", "nd"});
  auto d = cluster.AddNode(120);
  INFO(d.status().ToString());
  REQUIRE(d.ok());
  REQUIRE(cluster.WaitMembers(4, 30000).ok());
  // The operator drains it: it marks itself leaving, the map moves off it, it leaves.
  Status drained = DrainMember(cluster.etcd_endpoint(), cluster.tls_dir(), "nd", 30000);
  INFO(drained.ToString());
  CHECK(drained.ok());
  CHECK(cluster.WaitExit(3, 30000));
  // And a node of the shared credential, by its address.
  drained = DrainMember(cluster.etcd_endpoint(), cluster.tls_dir(), cluster.addresses()[2], 30000);
  INFO(drained.ToString());
  CHECK(drained.ok());
  CHECK(cluster.WaitExit(2, 30000));
  REQUIRE(testing::WaitFor([&] {
    auto m = ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir());
    return m.ok() && m->size() == 2;
  }, 20s));
  // The leader moved the map onto the two left.
  REQUIRE(testing::WaitFor([&] {
    auto m = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
    if (!m.ok()) return false;
    for (size_t s = 0; s < m->holder.size(); ++s)
      if (m->holder[s] != cluster.addresses()[0] && m->holder[s] != cluster.addresses()[1]) return false;
    return true;
  }, 30s));
  // A member etcd does not list is named.
  CHECK(DrainMember(cluster.etcd_endpoint(), cluster.tls_dir(), "nobody", 0).code() == Code::kNotFound);
}
