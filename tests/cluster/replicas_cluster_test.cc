// Shard replicas over real node processes and etcd (shardflow node
// --replicas 2): every slot has a synced backup on another node; when a
// slot's holder is killed or hung, its backup takes over and the session
// runs the failed step again: no acknowledged update is lost or applied twice.
#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/shard_map.h"
#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "tests/support/sparse_model.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;
using sf::testing::RequireAppliedOnce;
using sf::testing::SparseModel;
using sf::testing::Step;

namespace {

int NodeOf(const examples::LocalCluster& c, const std::string& addr) {
  for (size_t i = 0; i < c.addresses().size(); ++i)
    if (c.addresses()[i] == addr) return static_cast<int>(i);
  FAIL(addr << " is not a node of the cluster");
  return -1;
}

std::unique_ptr<ClusterSession> Connect(const examples::LocalCluster& c, const SparseModel& m, int tasks) {
  ClusterOptions o;
  o.address = c.addresses()[0];
  o.tls_dir = c.tls_dir();
  o.tasks = tasks;
  auto s = ClusterSession::Connect(m.g, o);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  return std::move(s).value();
}

void Train(ClusterSession& s, const SparseModel& m, int from, int to) {
  for (int i = from; i < to; ++i) {
    auto r = Step(s, m, i);
    INFO("step " << i << ": " << r.status().ToString());
    REQUIRE(r.ok());
  }
}

// Three nodes with --replicas 2, every slot backed up, and a session of 3
// tasks that trained `steps` steps.
struct Replicated {
  examples::LocalCluster cluster;
  SparseModel m;
  std::unique_ptr<ClusterSession> s;
  explicit Replicated(int steps) {
    cluster.SetReplicas(2);
    REQUIRE(cluster.Start(3, 120).ok());
    REQUIRE(cluster.WaitBackups(3, 20000).ok());
    s = Connect(cluster, m, 3);
    REQUIRE(s->Run({}, std::vector<Output>{}, {m.init}).ok());
    Train(*s, m, 0, steps);
  }
  // A node holding one of the session's tasks, other than the node it first contacted.
  int Victim() {
    int victim = -1;
    for (const std::string& t : s->tasks())
      if (NodeOf(cluster, t) != 0) victim = NodeOf(cluster, t);
    REQUIRE(victim > 0);
    return victim;
  }
};

// Once every backup of the session's 3 slots is synced again, each holds
// what its holder holds, bit for bit (item 5 of issue 35).
void RequireIdenticalReplicas(const examples::LocalCluster& cluster, ClusterSession& s) {
  REQUIRE(cluster.WaitBackups(3, 30000).ok());
  auto map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
  REQUIRE(map.ok());
  auto cmp = s.CompareReplicas(*map);
  INFO(cmp.status().ToString());
  REQUIRE(cmp.ok());
  CHECK(cmp->slots == 3);
  CHECK(cmp->variables > 0);
  CHECK(cmp->unsynced.empty());
  for (const auto& d : cmp->differences) INFO(d);
  CHECK(cmp->differences.empty());
}

}  // namespace

TEST_CASE("Cluster: with replicas a killed holder's slots go to their backups, no update lost or doubled",
          "[cluster][replicas]") {
  Replicated r(10);
  auto& cluster = r.cluster;
  auto& m = r.m;
  auto& s = r.s;
  // Kill a holder other than the node the session first contacted.
  const int victim = r.Victim();
  const std::string victim_addr = cluster.addresses()[victim];
  // Killed while steps run: every step succeeds (one the kill failed runs
  // again on the backups).
  std::atomic<bool> killed{false};
  std::thread killer([&] {
    testing::PauseFor(std::chrono::milliseconds(30));
    cluster.Kill(victim);
    killed = true;
  });
  int step = 10, after = 0;
  for (; after < 10; ++step) {
    if (killed) ++after;
    Train(*s, m, step, step + 1);
  }
  killer.join();
  for (const std::string& t : s->tasks()) CHECK(t != victim_addr);
  for (const auto& c : s->Changes()) CHECK(c.restored_tasks.empty());
  // Nothing lost, nothing applied twice.
  {
    INFO("after the kill, " << step << " steps, " << s->retried_steps() << " run again");
    RequireAppliedOnce(*s, m, step, s->retried_steps());
  }
  // The survivors back each other up again.
  REQUIRE(cluster.WaitBackups(3, 20000).ok());
  Train(*s, m, step, step + 6);
  {
    INFO("after the backups were synced again, " << step + 6 << " steps, " << s->retried_steps() << " run again");
    RequireAppliedOnce(*s, m, step + 6, s->retried_steps());
  }
  RequireIdenticalReplicas(r.cluster, *r.s);
}

TEST_CASE("Cluster: with replicas a hung holder is replaced by its backup and acknowledges nothing after",
          "[cluster][replicas]") {
  Replicated r(8);
  auto& cluster = r.cluster;
  auto& m = r.m;
  auto& s = r.s;
  const int victim = r.Victim();
  const std::string victim_addr = cluster.addresses()[victim];
  ::kill(cluster.pid(victim), SIGSTOP);
  Train(*s, m, 8, 20);
  for (const std::string& t : s->tasks()) CHECK(t != victim_addr);
  ::kill(cluster.pid(victim), SIGCONT);
  Train(*s, m, 20, 26);
  RequireAppliedOnce(*s, m, 26, s->retried_steps());
  RequireIdenticalReplicas(r.cluster, *r.s);
}

TEST_CASE("Cluster: CompareReplicas finds a backup that does not hold its holder's state", "[cluster][replicas]") {
  Replicated r(4);
  RequireIdenticalReplicas(r.cluster, *r.s);
  auto map = ReadClusterMap(r.cluster.etcd_endpoint(), r.cluster.tls_dir());
  REQUIRE(map.ok());
  // Name as slot 0's backup the node that is neither its holder nor its
  // backup: it holds none of the slot's variables.
  for (const std::string& a : r.cluster.addresses())
    if (a != map->holder[0] && a != map->backup[0]) map->backup[0] = a;
  auto cmp = r.s->CompareReplicas(*map);
  REQUIRE(cmp.ok());
  REQUIRE(!cmp->differences.empty());
  CHECK(cmp->differences[0].find("slot 0") != std::string::npos);
}

TEST_CASE("Cluster: with replicas, losing a slot's holder and its backup at once falls back to the checkpoint, "
          "reported",
          "[cluster][replicas]") {
  testing::TempDir dir("sf_replicas_both_lost");
  examples::LocalCluster cluster;
  cluster.SetReplicas(2);
  REQUIRE(cluster.Start(4, 120).ok());
  REQUIRE(cluster.WaitBackups(3, 20000).ok());
  auto map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
  REQUIRE(map.ok());
  const std::string holder = map->holder[0], backup = map->backup[0];
  REQUIRE(!backup.empty());
  // The session contacts a node that survives.
  ClusterOptions o;
  for (const std::string& a : cluster.addresses())
    if (a != holder && a != backup) o.address = a;
  o.tls_dir = cluster.tls_dir();
  o.tasks = 3;
  o.checkpoint_dir = dir.path;
  SparseModel m;
  auto s = ClusterSession::Connect(m.g, o);
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
  Train(**s, m, 0, 5);
  REQUIRE((*s)->Save(dir.path, 5).ok());
  Train(**s, m, 5, 8);
  // Both copies of slot 0 at once: nothing to promote.
  cluster.Kill(NodeOf(cluster, holder));
  cluster.Kill(NodeOf(cluster, backup));
  // The elastic session restores slot 0 from the checkpoint and goes on.
  Train(**s, m, 8, 12);
  const auto changes = (*s)->Changes();
  bool reported = false;
  for (const auto& c : changes) {
    if (std::find(c.restored_tasks.begin(), c.restored_tasks.end(), 0) == c.restored_tasks.end()) continue;
    reported = true;
    CHECK(c.global_step == 5);
    CHECK(c.variables_restored > 0);
    // Slots with a surviving copy were not restored.
    auto dead = [&](const std::string& a) { return a == holder || a == backup; };
    for (int t : c.restored_tasks) CHECK((dead(map->holder[t]) && dead(map->backup[t])));
  }
  CHECK(reported);
  for (const std::string& t : (*s)->tasks()) CHECK((t != holder && t != backup));
}

TEST_CASE("Cluster: the placement leader killed while slots move to a joined node: the next leader finishes, "
          "no update lost or doubled",
          "[cluster][replicas]") {
  examples::LocalCluster cluster;
  cluster.SetReplicas(2);
  REQUIRE(cluster.Start(3, 120).ok());
  REQUIRE(cluster.WaitBackups(3, 20000).ok());
  SparseModel m;
  ClusterOptions o;
  o.address = cluster.addresses()[1];  // node 0, the first started, leads
  o.tls_dir = cluster.tls_dir();
  o.tasks = 3;
  auto made = ClusterSession::Connect(m.g, o);
  REQUIRE(made.ok());
  auto& s = *made;
  REQUIRE(s->Run({}, std::vector<Output>{}, {m.init}).ok());
  Train(*s, m, 0, 5);
  // A node joins: the leader starts copying slots there; it dies meanwhile.
  auto added = cluster.AddNode(120);
  REQUIRE(added.ok());
  const std::string leader = cluster.addresses()[0];
  int step = 5;
  Train(*s, m, step, step + 1);
  ++step;
  cluster.Kill(0);
  // Training goes on while the next leader promotes the dead node's backups
  // and finishes the moves onto the new node.
  REQUIRE(testing::WaitFor([&] {
    Train(*s, m, step, step + 1);
    ++step;
    auto map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
    if (!map.ok()) return false;
    std::set<std::string> holders;
    for (int t = 0; t < 3; ++t) {
      if (!map->moving_from[t].empty() || map->holder[t] == leader) return false;
      holders.insert(map->holder[t]);
    }
    return holders.size() == 3 && holders.count(*added);
  }, 60s));
  Train(*s, m, step, step + 3);
  step += 3;
  for (const auto& c : s->Changes()) CHECK(c.restored_tasks.empty());
  RequireAppliedOnce(*s, m, step, s->retried_steps());
  RequireIdenticalReplicas(cluster, *s);
}

TEST_CASE("Cluster: hash tables' backups take each step's changed rows and stay bit-identical, through a failover",
          "[cluster][replicas][hash_embedding]") {
  constexpr int64_t kDim = 8;
  Graph g;
  HashEmbeddingTableOptions to;
  to.num_shards = 3;
  to.seed = 3;
  to.min_count = 2;  // the admission filter's counts travel too
  auto table = NewHashEmbeddingTable(g, "feats", kDim, to);
  auto id_t = ops::Placeholder(g, DType::kInt64, {-1}, "ids");
  auto off_t = ops::Placeholder(g, DType::kInt64, {-1}, "offsets");
  auto emb = ops::EmbeddingLookupBag(g, table, id_t, off_t, "sum");
  auto loss = ops::Sum(g, emb * emb);
  auto train = AdagradOptimizer(0.1).Minimize(g, loss);
  REQUIRE(train.ok());
  const Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  examples::LocalCluster cluster;
  cluster.SetReplicas(2);
  REQUIRE(cluster.Start(3, 120).ok());
  REQUIRE(cluster.WaitBackups(3, 20000).ok());
  ClusterOptions o;
  o.address = cluster.addresses()[0];
  o.tls_dir = cluster.tls_dir();
  o.tasks = 3;
  auto s = ClusterSession::Connect(g, o);
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {init}).ok());
  std::mt19937_64 rng(9);
  auto steps = [&](int n) {
    for (int k = 0; k < n; ++k) {
      std::vector<int64_t> ids;
      for (int i = 0; i < 64; ++i) ids.push_back(static_cast<int64_t>(rng() % 3000) * 7919 - 1000000);
      FeedMap feeds = {{"ids", Tensor::FromVector(ids, {64})},
                       {"offsets", Tensor::FromVector(std::vector<int64_t>{0, 16, 32, 48}, {4})}};
      auto r = (*s)->Run(feeds, std::vector<Output>{}, {*train});
      INFO(r.status().ToString());
      REQUIRE(r.ok());
    }
  };
  steps(30);
  RequireIdenticalReplicas(cluster, **s);
  // A holder dies: its backups take over with every acknowledged row, and
  // the survivors' new backups (copied whole) follow the rows from there.
  int victim = -1;
  for (const std::string& t : (*s)->tasks())
    if (NodeOf(cluster, t) != 0) victim = NodeOf(cluster, t);
  REQUIRE(victim > 0);
  cluster.Kill(victim);
  steps(20);
  REQUIRE(cluster.WaitBackups(3, 30000).ok());
  steps(10);
  auto map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
  REQUIRE(map.ok());
  auto cmp = (*s)->CompareReplicas(*map);
  INFO(cmp.status().ToString());
  REQUIRE(cmp.ok());
  CHECK(cmp->variables >= 3);
  for (const auto& d : cmp->differences) INFO(d);
  CHECK(cmp->differences.empty());
}
