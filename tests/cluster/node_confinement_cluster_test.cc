// A session reaches nothing beyond a node's own directories or its cluster
// (issue 36, item 2), on node processes: a hash table's cold tier outside
// --data-dir is refused by name and creates no file, whether a graph's
// attribute or an assigned shard state names it; a relative one lands under
// --data-dir; and a registration naming a task address that is not a member
// is refused without a dial.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "examples/common/local_cluster.h"
#include "kernels/hash_embedding.h"
#include "net/peer_rpc.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/graph_io.h"
#include "shardflow/ops.h"
#include "tests/support/raw_socket.h"
#include "tests/support/temp_dir.h"

using namespace sf;

namespace {

bool Contains(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

// A session on the cluster's first node that initialises a hash table whose
// cold tier is cold_dir and looks two ids up; the first error.
Status UseColdTier(const examples::LocalCluster& cluster, const std::string& cold_dir) {
  Graph g;
  HashEmbeddingTableOptions to;
  to.num_shards = 2;
  to.ram_budget_bytes = 4096;
  to.cold_dir = cold_dir;
  auto table = NewHashEmbeddingTable(g, "cold_t", 4, to);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1}, "ids");
  auto offsets = ops::Placeholder(g, DType::kInt64, {-1}, "offsets");
  auto emb = ops::EmbeddingLookupBag(g, table, ids, offsets, "sum");
  const Operation init = ops::GlobalVariablesInitializer(g);
  if (!g.status().ok()) return g.status();
  ClusterOptions o;
  o.address = cluster.addresses()[0];
  o.tls_dir = cluster.tls_dir();
  SF_ASSIGN_OR_RETURN(auto s, ClusterSession::Connect(g, o));
  SF_RETURN_IF_ERROR(s->Run({}, std::vector<Output>{}, {init}).status());
  FeedMap feeds = {{"ids", Tensor::FromVector(std::vector<int64_t>{3, 1LL << 50}, {2})},
                   {"offsets", Tensor::FromVector(std::vector<int64_t>{0}, {1})}};
  return s->Run(feeds, std::vector<Output>{emb}).status();
}

// A raw session endpoint of the cluster.
std::unique_ptr<net::Endpoint> SessionEndpoint(const examples::LocalCluster& cluster) {
  net::EndpointOptions o;
  o.role = net::Role::kSession;
  o.tls_dir = cluster.tls_dir();
  o.log = false;
  auto e = net::Endpoint::Create(o, nullptr, nullptr);
  REQUIRE(e.ok());
  return std::move(*e);
}

}  // namespace

TEST_CASE("Confinement: a cold tier outside the node's --data-dir is refused by name and creates no file",
          "[cluster][hostile][paths]") {
  testing::TempDir data("sf_node_data");
  testing::TempDir outside("sf_node_outside");
  const std::string outside_name = std::filesystem::path(outside.path).filename().string();
  {
    examples::LocalCluster cluster;
    cluster.SetNodeArgs({"--data-dir", data.path});
    REQUIRE(cluster.Start(1, 120).ok());
    // Absolute, in the graph's attribute.
    const std::string absolute = outside.path + "/cold";
    Status abs = UseColdTier(cluster, absolute);
    INFO(abs.ToString());
    CHECK(abs.code() == Code::kInvalidArgument);
    CHECK(Contains(abs, absolute));
    CHECK(Contains(abs, "absolute"));
    CHECK(Contains(abs, "cold_dir"));
    // Out through "..".
    Status up = UseColdTier(cluster, "cold/../../" + outside_name);
    INFO(up.ToString());
    CHECK(up.code() == Code::kInvalidArgument);
    CHECK(Contains(up, "'..'"));
    // A shard state assigned by name carries its cold_dir too: refused where
    // the cold tier is opened, whatever brought it.
    HashShardConfig c;
    c.table = "stolen_t";
    c.dim = 4;
    c.ram_budget_bytes = 4096;
    c.cold_dir = absolute;
    auto state = HashEmbeddingShard(c).Serialize();
    REQUIRE(state.ok());
    auto e = SessionEndpoint(cluster);
    auto conn = e->Connect(cluster.addresses()[0]);
    REQUIRE(conn.ok());
    Status assigned = net::CallStatus(*conn, net::AssignVariables{{"stolen_t/part_0"}, {*state}}, 30000);
    INFO(assigned.ToString());
    CHECK(assigned.code() == Code::kInvalidArgument);
    CHECK(Contains(assigned, absolute));
    CHECK(std::filesystem::is_empty(outside.path));
    // Relative: under --data-dir.
    Status ok = UseColdTier(cluster, "tiers/cold");
    INFO(ok.ToString());
    CHECK(ok.ok());
    CHECK(std::filesystem::exists(data.path + "/tiers/cold"));
    CHECK(std::filesystem::is_empty(outside.path));
  }
  {
    examples::LocalCluster cluster;  // no --data-dir: no cold tier at all
    REQUIRE(cluster.Start(1, 120).ok());
    Status none = UseColdTier(cluster, "tiers/cold");
    INFO(none.ToString());
    CHECK(none.code() == Code::kFailedPrecondition);
    CHECK(Contains(none, "--data-dir"));
    CHECK(std::filesystem::is_empty(outside.path));
  }
}

TEST_CASE("Confinement: a registration naming a non-member address is refused and nothing is dialed",
          "[cluster][hostile][membership]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  const std::string a0 = cluster.addresses()[0];
  // Accepts connections and never answers: a dial would show in its backlog.
  std::string hole_addr;
  const int hole = testing::RawListen(&hole_addr);
  REQUIRE(hole >= 0);
  Graph g;
  Output y = ops::Neg(g, ops::Const(g, Tensor::FromVector<float>({1, 2}, {2})));
  REQUIRE(g.status().ok());
  net::RegisterPartition reg;
  reg.session_id = 11;
  reg.handle = 1;
  reg.device = "/job:worker/task:0/device:CPU:0";
  reg.tasks = {{"task0", a0}, {"task1", hole_addr}};
  reg.graph_def = GraphToBytes(g).value();
  reg.fetches = {{g.node(y.node).name, 0}};
  auto e = SessionEndpoint(cluster);
  auto conn = e->Connect(a0);
  REQUIRE(conn.ok());
  Status s = net::CallStatus(*conn, reg, 30000);
  INFO(s.ToString());
  CHECK(s.code() == Code::kPermissionDenied);
  CHECK(Contains(s, hole_addr));
  CHECK(Contains(s, "not a member"));
  // Nothing connected to the hole.
  ::fcntl(hole, F_SETFL, O_NONBLOCK);
  const int accepted = ::accept(hole, nullptr, nullptr);
  CHECK(accepted < 0);
  if (accepted >= 0) ::close(accepted);
  ::close(hole);
  // The same registration naming members only is accepted.
  reg.tasks = {{"task0", a0}};
  Status member = net::CallStatus(*conn, reg, 30000);
  INFO(member.ToString());
  CHECK(member.ok());
}
