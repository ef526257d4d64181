// Namespaces, quotas and drops (issue 36, items 1 and 3), on node processes:
// a session credential's namespace sees, reads, assigns and creates only its
// own variables and queues; a name or directory spelling another namespace's
// is refused; each namespace is held to its quotas while the others are not;
// and dropping a namespace closes its sessions and gives its memory back.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "examples/common/local_cluster.h"
#include "graph/namespaces.h"
#include "kernels/hash_embedding.h"
#include "net/credentials.h"
#include "net/peer_rpc.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/queue_ops.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

using namespace sf;

namespace {

bool Contains(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

// A raw session endpoint of the cluster holding credential `name`.
std::unique_ptr<net::Endpoint> Endpoint(const examples::LocalCluster& cluster, const std::string& name) {
  net::EndpointOptions o;
  o.role = net::Role::kSession;
  o.tls_dir = cluster.tls_dir();
  o.tls_name = name;
  o.log = false;
  auto e = net::Endpoint::Create(o, nullptr, nullptr);
  REQUIRE(e.ok());
  return std::move(*e);
}

// Reads `names` (every variable the credential sees when empty) through conn.
net::VariableValues Read(const net::ConnectionPtr& conn, std::vector<std::string> names) {
  auto v = net::Call(conn, net::ReadVariables{std::move(names)}, 30000);
  INFO(v.status().ToString());
  REQUIRE(v.ok());
  return std::move(*v);
}

float FirstFloat(const Tensor& t) { return t.data<float>()[0]; }

// A node's resident memory now (VmRSS), in bytes; 0 when it cannot be read.
int64_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  int64_t kb = 0;
  while (in >> key) {
    if (key == "VmRSS:") {
      in >> kb;
      return kb * 1024;
    }
    std::getline(in, key);
  }
  return 0;
}

// A session of credential `cred` on the cluster's first node that makes a
// float variable `name` of `elems` elements, assigns it `value` and reads it.
Result<float> TrainVariable(const examples::LocalCluster& cluster, const std::string& cred, const std::string& name,
                            int64_t elems, float value) {
  Graph g;
  auto h = ops::VarHandle(g, name, DType::kFloat32, PartialShape({elems}));
  auto assign = ops::Assign(g, h, ops::Const(g, std::vector<float>(elems, value), {elems}));
  auto first = ops::Slice(g, ops::ReadVariable(g, h, DType::kFloat32), {0}, {1});
  if (!g.status().ok()) return g.status();
  ClusterOptions o;
  o.address = cluster.addresses()[0];
  o.tls_dir = cluster.tls_dir();
  o.tls_name = cred;
  SF_ASSIGN_OR_RETURN(auto s, ClusterSession::Connect(g, o));
  SF_RETURN_IF_ERROR(s->Run({}, std::vector<Output>{assign}).status());
  SF_ASSIGN_OR_RETURN(auto out, s->Run({}, std::vector<Output>{first}));
  return FirstFloat(out[0]);
}

}  // namespace

TEST_CASE("Namespaces: a session reads, assigns and creates only its own namespace's variables",
          "[cluster][hostile][namespaces]") {
  examples::LocalCluster cluster;
  cluster.SetReplicas(1);
  REQUIRE(cluster.Start(1, 120).ok());
  REQUIRE(net::IssueCredential(cluster.tls_dir(), net::Role::kSession, "job_a", {}, "team_a").ok());
  REQUIRE(net::IssueCredential(cluster.tls_dir(), net::Role::kSession, "job_b", {}, "team_b").ok());
  auto loaded = net::LoadCredential(cluster.tls_dir(), "job_a");
  REQUIRE(loaded.ok());
  CHECK(loaded->ns == "team_a");
  // A node serves every namespace: a node credential carries none.
  CHECK(net::IssueCredential(cluster.tls_dir(), net::Role::kNode, "n2", {}, "team_a").code() ==
        Code::kInvalidArgument);

  // The same name in three namespaces is three variables (no squatting).
  auto a = TrainVariable(cluster, "job_a", "w", 4, 1.0f);
  INFO(a.status().ToString());
  REQUIRE(a.ok());
  CHECK(*a == 1.0f);
  auto b = TrainVariable(cluster, "job_b", "w", 8, 2.0f);  // another shape: would clash in one namespace
  INFO(b.status().ToString());
  REQUIRE(b.ok());
  CHECK(*b == 2.0f);
  auto d = TrainVariable(cluster, "session", "w", 2, 3.0f);  // the default namespace
  INFO(d.status().ToString());
  REQUIRE(d.ok());
  CHECK(*d == 3.0f);

  auto ea = Endpoint(cluster, "job_a");
  auto ca = ea->Connect(cluster.addresses()[0]);
  REQUIRE(ca.ok());
  auto eb = Endpoint(cluster, "job_b");
  auto cb = eb->Connect(cluster.addresses()[0]);
  REQUIRE(cb.ok());

  // "Every variable" is every variable of the asker's namespace, named as it knows them.
  net::VariableValues all_a = Read(*ca, {});
  REQUIRE(all_a.names == std::vector<std::string>{"w"});
  CHECK(all_a.values[0].num_elements() == 4);
  CHECK(FirstFloat(all_a.values[0]) == 1.0f);
  net::VariableValues all_b = Read(*cb, {});
  REQUIRE(all_b.names == std::vector<std::string>{"w"});
  CHECK(all_b.values[0].num_elements() == 8);

  // Another namespace's stored name cannot be spelled.
  for (const std::string& n : {std::string("@team_a/w"), ScopedName("team_a", "w")}) {
    auto r = net::Call(*cb, net::ReadVariables{{n}}, 30000);
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(Contains(r.status(), "reserved for namespaces"));
    Status assigned = net::CallStatus(*cb, net::AssignVariables{{n}, {Tensor::Scalar<float>(9.0f)}}, 30000);
    CHECK(assigned.code() == Code::kInvalidArgument);
  }
  // B's assign of "w" is B's own: A's value stays.
  REQUIRE(net::CallStatus(*cb, net::AssignVariables{{"w"}, {Tensor::FromVector(std::vector<float>(8, 7.0f), {8})}},
                          30000)
              .ok());
  CHECK(FirstFloat(Read(*ca, {"w"}).values[0]) == 1.0f);
  CHECK(FirstFloat(Read(*cb, {"w"}).values[0]) == 7.0f);
  // B creating a variable by assign creates it in B only.
  REQUIRE(net::CallStatus(*cb, net::AssignVariables{{"only_b"}, {Tensor::Scalar<float>(5.0f)}}, 30000).ok());
  CHECK(Read(*ca, {"only_b"}).names.empty());
  CHECK(Read(*cb, {}).names.size() == 2);

  // A graph naming a reserved name or directory is refused by name.
  {
    Graph g;
    auto read = ops::ReadVariable(g, ops::VarHandle(g, "@team_a/w", DType::kFloat32, PartialShape({2})), DType::kFloat32);
    REQUIRE(g.status().ok());
    ClusterOptions o;
    o.address = cluster.addresses()[0];
    o.tls_dir = cluster.tls_dir();
    o.tls_name = "job_b";
    auto s = ClusterSession::Connect(g, o);
    Status st = s.ok() ? (*s)->Run({}, std::vector<Output>{read}).status() : s.status();
    INFO(st.ToString());
    CHECK(st.code() == Code::kInvalidArgument);
    CHECK(Contains(st, "reserved for namespaces"));
  }

  // A session lists only its own namespace.
  auto listed = net::Call(*cb, net::ListNamespaces{}, 30000);
  REQUIRE(listed.ok());
  const net::Namespaces* ns = &*listed;
  REQUIRE(ns->namespaces.size() == 1);
  CHECK(ns->namespaces[0].ns == "team_b");
  CHECK(ns->namespaces[0].variables == 2);
  // And may not drop another.
  Status other = net::Call(*cb, net::DropNamespace{"team_a"}, 30000).status();
  CHECK(other.code() == Code::kPermissionDenied);
  CHECK(FirstFloat(Read(*ca, {"w"}).values[0]) == 1.0f);
}

TEST_CASE("Namespaces: quotas refuse one namespace past them and leave the others alone; a drop returns memory",
          "[cluster][hostile][namespaces]") {
  examples::LocalCluster cluster;
  cluster.SetReplicas(1);
  cluster.SetNodeArgs({"--ns-max-variables", "16", "--ns-max-bytes", std::to_string(int64_t{300} << 20),
                       "--ns-max-queues", "2"});
  REQUIRE(cluster.Start(1, 120).ok());
  REQUIRE(net::IssueCredential(cluster.tls_dir(), net::Role::kSession, "job_a", {}, "team_a").ok());
  REQUIRE(net::IssueCredential(cluster.tls_dir(), net::Role::kSession, "job_b", {}, "team_b").ok());
  auto ea = Endpoint(cluster, "job_a");
  auto ca = ea->Connect(cluster.addresses()[0]);
  REQUIRE(ca.ok());
  auto eb = Endpoint(cluster, "job_b");
  auto cb = eb->Connect(cluster.addresses()[0]);
  REQUIRE(cb.ok());

  // Variables: 16 fit, the 17th is refused naming the quota.
  for (int i = 0; i < 16; ++i)
    REQUIRE(net::CallStatus(*ca, net::AssignVariables{{"v" + std::to_string(i)}, {Tensor::Scalar<float>(1.0f)}},
                            30000)
                .ok());
  Status over = net::CallStatus(*ca, net::AssignVariables{{"v16"}, {Tensor::Scalar<float>(1.0f)}}, 30000);
  INFO(over.ToString());
  CHECK(over.code() == Code::kResourceExhausted);
  CHECK(Contains(over, "team_a"));
  CHECK(Contains(over, "--ns-max-variables 16"));
  // Another namespace is not affected.
  REQUIRE(net::CallStatus(*cb, net::AssignVariables{{"v16"}, {Tensor::Scalar<float>(1.0f)}}, 30000).ok());

  // Bytes: B holds 256 MiB; another 64 MiB passes its 300 MiB and is refused.
  const int64_t big = int64_t{64} << 20;  // floats
  const int64_t before = RssBytes(cluster.pid(0));
  REQUIRE(net::CallStatus(*cb, net::AssignVariables{{"big"}, {Tensor::FromVector(std::vector<float>(big, 1.0f), {big})}},
                          120000)
              .ok());
  Status bytes = net::CallStatus(
      *cb, net::AssignVariables{{"big2"}, {Tensor::FromVector(std::vector<float>(big / 4, 1.0f), {big / 4})}}, 120000);
  INFO(bytes.ToString());
  CHECK(bytes.code() == Code::kResourceExhausted);
  CHECK(Contains(bytes, "--ns-max-bytes"));
  const int64_t holding = RssBytes(cluster.pid(0));
  CHECK(holding - before > (int64_t{200} << 20));

  // Queues: two fit, a third in one graph is refused naming the quota.
  {
    Graph g;
    std::vector<Output> sizes;
    for (int i = 0; i < 3; ++i) {
      ops::QueueOptions qo;
      qo.shared_name = "q" + std::to_string(i);
      qo.capacity = 4;
      auto q = ops::FIFOQueue(g, {DType::kFloat32}, qo);
      sizes.push_back(ops::QueueSize(g, q));
    }
    REQUIRE(g.status().ok());
    ClusterOptions o;
    o.address = cluster.addresses()[0];
    o.tls_dir = cluster.tls_dir();
    o.tls_name = "job_a";
    auto s = ClusterSession::Connect(g, o);
    Status st = s.ok() ? (*s)->Run({}, sizes).status() : s.status();
    INFO(st.ToString());
    CHECK(st.code() == Code::kResourceExhausted);
    CHECK(Contains(st, "--ns-max-queues 2"));
  }

  // The operator lists and drops B across the cluster: B's memory comes back,
  // A's state stays, and B may start again from nothing.
  auto list = ListClusterNamespaces(cluster.etcd_endpoint(), cluster.tls_dir(), "default", "node");
  INFO(list.status().ToString());
  REQUIRE(list.ok());
  bool saw_b = false;
  for (const NamespaceInfo& i : *list)
    if (i.name == "team_b") {
      saw_b = true;
      CHECK(i.variables == 2);
      CHECK(i.bytes >= big * 4);
      CHECK(i.nodes == 1);
    }
  CHECK(saw_b);
  // B's job left (its connection's buffers go with it); its state stays until dropped.
  (*cb)->Close();
  auto dropped = DropClusterNamespace(cluster.etcd_endpoint(), cluster.tls_dir(), "team_b", "default", "node");
  INFO(dropped.status().ToString());
  REQUIRE(dropped.ok());
  CHECK(dropped->variables == 2);
  int64_t after = 0;
  testing::WaitFor([&] { return (after = RssBytes(cluster.pid(0))) - before < (int64_t{100} << 20); },
                   std::chrono::seconds(20), std::chrono::milliseconds(100));
  INFO("RSS before " << before << ", holding " << holding << ", after drop " << after);
  CHECK(after - before < (int64_t{100} << 20));
  CHECK(Read(*ca, {}).names.size() == 16);
  auto eb2 = Endpoint(cluster, "job_b");
  auto cb2 = eb2->Connect(cluster.addresses()[0]);
  REQUIRE(cb2.ok());
  CHECK(Read(*cb2, {}).names.empty());
  REQUIRE(net::CallStatus(*cb2, net::AssignVariables{{"big"}, {Tensor::FromVector(std::vector<float>(big, 2.0f), {big})}},
                          120000)
              .ok());
}

TEST_CASE("Namespaces: a cold tier lies in its namespace's directory, and no state can name another's",
          "[cluster][hostile][namespaces][paths]") {
  testing::TempDir data("sf_ns_data");
  examples::LocalCluster cluster;
  cluster.SetReplicas(1);
  cluster.SetNodeArgs({"--data-dir", data.path});
  REQUIRE(cluster.Start(1, 120).ok());
  REQUIRE(net::IssueCredential(cluster.tls_dir(), net::Role::kSession, "job_b", {}, "team_b").ok());
  // B's graph names "tiers/cold": it lands under B's directory.
  {
    Graph g;
    HashEmbeddingTableOptions to;
    to.num_shards = 1;
    to.ram_budget_bytes = 4096;
    to.cold_dir = "tiers/cold";
    auto table = NewHashEmbeddingTable(g, "t", 4, to);
    auto ids = ops::Placeholder(g, DType::kInt64, {-1}, "ids");
    auto offsets = ops::Placeholder(g, DType::kInt64, {-1}, "offsets");
    auto emb = ops::EmbeddingLookupBag(g, table, ids, offsets, "sum");
    const Operation init = ops::GlobalVariablesInitializer(g);
    REQUIRE(g.status().ok());
    ClusterOptions o;
    o.address = cluster.addresses()[0];
    o.tls_dir = cluster.tls_dir();
    o.tls_name = "job_b";
    auto s = ClusterSession::Connect(g, o);
    REQUIRE(s.ok());
    REQUIRE((*s)->Run({}, std::vector<Output>{}, {init}).ok());
    FeedMap feeds = {{"ids", Tensor::FromVector(std::vector<int64_t>{3, 1LL << 50}, {2})},
                     {"offsets", Tensor::FromVector(std::vector<int64_t>{0}, {1})}};
    REQUIRE((*s)->Run(feeds, std::vector<Output>{emb}).ok());
    CHECK(std::filesystem::exists(data.path + "/@team_b/tiers/cold"));
    CHECK_FALSE(std::filesystem::exists(data.path + "/tiers"));
  }
  // A's directory, made by A; B assigning a shard state that names it (or an
  // unscoped one) is refused, and A's files stay as they were (opening a
  // cold tier empties it).
  std::filesystem::create_directories(data.path + "/@team_a/cold");
  std::ofstream(data.path + "/@team_a/cold/keep") << "a's rows";
  auto eb = Endpoint(cluster, "job_b");
  auto cb = eb->Connect(cluster.addresses()[0]);
  REQUIRE(cb.ok());
  for (const std::string& dir : {std::string("@team_a/cold"), std::string("cold"), std::string("@team_b")}) {
    HashShardConfig c;
    c.table = "stolen";
    c.dim = 4;
    c.ram_budget_bytes = 4096;
    c.cold_dir = dir;
    auto state = HashEmbeddingShard(c).Serialize();
    REQUIRE(state.ok());
    Status assigned = net::CallStatus(*cb, net::AssignVariables{{"stolen/part_0"}, {*state}}, 30000);
    INFO(dir << ": " << assigned.ToString());
    CHECK(assigned.code() == Code::kInvalidArgument);
  }
  CHECK(std::filesystem::exists(data.path + "/@team_a/cold/keep"));
}

TEST_CASE("Namespaces: a hash table's rows count against its namespace's bytes", "[cluster][hostile][namespaces]") {
  examples::LocalCluster cluster;
  cluster.SetReplicas(1);
  cluster.SetNodeArgs({"--ns-max-bytes", std::to_string(int64_t{8} << 20)});
  REQUIRE(cluster.Start(1, 120).ok());
  REQUIRE(net::IssueCredential(cluster.tls_dir(), net::Role::kSession, "job_a", {}, "team_a").ok());
  REQUIRE(net::IssueCredential(cluster.tls_dir(), net::Role::kSession, "job_b", {}, "team_b").ok());
  // Looks up `n` fresh ids per step, `steps` times, in a table of credential
  // cred; the first error.
  auto grow = [&](const std::string& cred, int64_t n, int steps) -> Status {
    Graph g;
    HashEmbeddingTableOptions to;
    to.num_shards = 1;
    auto table = NewHashEmbeddingTable(g, "t", 64, to);
    auto ids = ops::Placeholder(g, DType::kInt64, {-1}, "ids");
    auto offsets = ops::Placeholder(g, DType::kInt64, {-1}, "offsets");
    auto emb = ops::EmbeddingLookupBag(g, table, ids, offsets, "sum");
    const Operation init = ops::GlobalVariablesInitializer(g);
    SF_RETURN_IF_ERROR(g.status());
    ClusterOptions o;
    o.address = cluster.addresses()[0];
    o.tls_dir = cluster.tls_dir();
    o.tls_name = cred;
    SF_ASSIGN_OR_RETURN(auto s, ClusterSession::Connect(g, o));
    SF_RETURN_IF_ERROR(s->Run({}, std::vector<Output>{}, {init}).status());
    for (int k = 0; k < steps; ++k) {
      std::vector<int64_t> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = k * n + i + 1;
      FeedMap feeds = {{"ids", Tensor::FromVector(v, {n})},
                       {"offsets", Tensor::FromVector(std::vector<int64_t>{0}, {1})}};
      SF_RETURN_IF_ERROR(s->Run(feeds, std::vector<Output>{emb}).status());
    }
    return Status::OK();
  };
  // 64 floats a row: 8 MiB holds some 30,000 rows, not 200,000.
  Status a = grow("job_a", 20000, 10);
  INFO(a.ToString());
  CHECK(a.code() == Code::kResourceExhausted);
  CHECK(Contains(a, "team_a"));
  CHECK(Contains(a, "--ns-max-bytes"));
  // Another namespace still has its own 8 MiB.
  Status b = grow("job_b", 5000, 2);
  INFO(b.ToString());
  CHECK(b.ok());
}

TEST_CASE("Namespaces: a namespace no session used for --ns-expiry-s is dropped; one in use stays",
          "[cluster][namespaces]") {
  examples::LocalCluster cluster;
  cluster.SetReplicas(1);
  cluster.SetNodeArgs({"--ns-expiry-s", "2"});
  REQUIRE(cluster.Start(1, 120).ok());
  REQUIRE(net::IssueCredential(cluster.tls_dir(), net::Role::kSession, "job_a", {}, "team_a").ok());
  REQUIRE(net::IssueCredential(cluster.tls_dir(), net::Role::kSession, "job_b", {}, "team_b").ok());
  // B keeps a session open (its partitions registered) and does nothing.
  Graph g;
  auto h = ops::VarHandle(g, "kept", DType::kFloat32, PartialShape({2}));
  auto assign = ops::Assign(g, h, ops::Const(g, std::vector<float>{1.0f, 2.0f}, {2}));
  REQUIRE(g.status().ok());
  ClusterOptions o;
  o.address = cluster.addresses()[0];
  o.tls_dir = cluster.tls_dir();
  o.tls_name = "job_b";
  auto b = ClusterSession::Connect(g, o);
  REQUIRE(b.ok());
  REQUIRE((*b)->Run({}, std::vector<Output>{assign}).ok());
  {
    auto ea = Endpoint(cluster, "job_a");
    auto ca = ea->Connect(cluster.addresses()[0]);
    REQUIRE(ca.ok());
    REQUIRE(net::CallStatus(*ca, net::AssignVariables{{"w"}, {Tensor::Scalar<float>(1.0f)}}, 30000).ok());
    (*ca)->Close();
  }
  auto names = [&] {
    std::set<std::string> out;
    auto l = ListClusterNamespaces(cluster.etcd_endpoint(), cluster.tls_dir(), "default", "node");
    REQUIRE(l.ok());
    for (const NamespaceInfo& i : *l) out.insert(i.name);
    return out;
  };
  CHECK(names().count("team_a") == 1);
  const auto start = std::chrono::steady_clock::now();
  testing::WaitFor([&] { return names().count("team_a") == 0; }, std::chrono::seconds(20),
                   std::chrono::milliseconds(200));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("team_a went after " << waited << " s");
  CHECK(names().count("team_a") == 0);
  CHECK(waited >= 1.0);
  // B's session is open: its namespace stays, with its value.
  CHECK(names().count("team_b") == 1);
  auto read = (*b)->Run({}, std::vector<Output>{ops::ReadVariable(g, h, DType::kFloat32)});
  INFO(read.status().ToString());
  REQUIRE(read.ok());
  CHECK((*read)[0].data<float>()[1] == 2.0f);
}
