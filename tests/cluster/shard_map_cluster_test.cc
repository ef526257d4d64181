// The shard map over real node processes and etcd: the placement leader
// spreads the slots, sessions follow the map (several sessions sharing
// variables alike), the leader moves state when members join and drain,
// and a step placed by a stale map is refused by the old holder and run
// again on the new one by the session, every update applied once.
#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <set>
#include <string>
#include <vector>

#include "cluster/shard_map.h"
#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "shardflow/ops.h"
#include "tests/support/sparse_model.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;
using sf::testing::Params;
using sf::testing::SparseModel;
using sf::testing::Step;

namespace {


std::unique_ptr<ClusterSession> Connect(const examples::LocalCluster& c, const SparseModel& m, int tasks,
                                        bool elastic = true, int node = 0) {
  ClusterOptions o;
  o.address = c.addresses()[node];
  o.tls_dir = c.tls_dir();
  o.tasks = tasks;
  o.elastic = elastic;
  auto s = ClusterSession::Connect(m.g, o);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  return std::move(s).value();
}

ShardMapInfo Map(const examples::LocalCluster& c) {
  auto m = ReadClusterMap(c.etcd_endpoint(), c.tls_dir());
  INFO(m.status().ToString());
  REQUIRE(m.ok());
  return *m;
}

void TrainOne(ClusterSession& s, const SparseModel& m, int step) {
  auto r = Step(s, m, step);
  INFO("step " << step << ": " << r.status().ToString());
  REQUIRE(r.ok());
}

}  // namespace

TEST_CASE("Cluster: the placement leader spreads the shard map over the members, every prefix evenly",
          "[cluster][shard_map]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(3, 120).ok());
  const ShardMapInfo m = Map(cluster);
  CHECK(m.epoch > 0);
  REQUIRE(m.holder.size() == 64);
  // Slots 0..2 on three different nodes: a session of 3 tasks spans them all.
  CHECK(std::set<std::string>(m.holder.begin(), m.holder.begin() + 3).size() == 3);
  for (const auto& f : m.moving_from) CHECK(f.empty());
  // A session places by it.
  SparseModel sm;
  auto s = Connect(cluster, sm, 3);
  CHECK(s->tasks() == std::vector<std::string>(m.holder.begin(), m.holder.begin() + 3));
  // More tasks than slots is refused by name.
  ClusterOptions o;
  o.address = cluster.addresses()[0];
  o.tls_dir = cluster.tls_dir();
  o.tasks = 65;
  auto too_many = ClusterSession::Connect(sm.g, o);
  REQUIRE(!too_many.ok());
  CHECK(too_many.status().code() == Code::kInvalidArgument);
  CHECK(too_many.status().message().find("--map-slots") != std::string::npos);
  // Steps may not run again later than shards remember their updates.
  o.tasks = 3;
  o.step_retry_ms = 70000;
  auto too_late = ClusterSession::Connect(sm.g, o);
  REQUIRE(!too_late.ok());
  CHECK(too_late.status().code() == Code::kInvalidArgument);
  CHECK(too_late.status().message().find("step_retry_ms") != std::string::npos);
}

TEST_CASE("Cluster: two workers share variables through one map while a node joins and another drains",
          "[cluster][shard_map]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  SparseModel m;
  // Two sessions (between-graph replication), contacting different nodes.
  auto a = Connect(cluster, m, 4, true, 0);
  auto b = Connect(cluster, m, 4, true, 1);
  REQUIRE(a->Run({}, std::vector<Output>{}, {m.init}).ok());
  CHECK(a->tasks() == b->tasks());
  int step = 0;
  auto train = [&](int n) {
    for (int i = 0; i < n; ++i, ++step) TrainOne(step % 2 ? *b : *a, m, step);
  };
  train(6);
  auto added = cluster.AddNode(120);
  REQUIRE(added.ok());
  REQUIRE(cluster.WaitMembers(3, 20000).ok());
  // Slots move to the new node once copied there (the old holders serve
  // them meanwhile): training goes on through the copies and the swaps.
  REQUIRE(testing::WaitFor([&] {
    train(1);
    const ShardMapInfo map = Map(cluster);
    return std::count(map.holder.begin(), map.holder.begin() + 4, *added) > 0;
  }, 20s));
  train(2);
  // Both follow the same map: the new node serves some of their tasks.
  const std::vector<std::string> after_join = a->tasks();
  CHECK(after_join == b->tasks());
  CHECK(std::count(after_join.begin(), after_join.end(), *added) > 0);
  REQUIRE(DrainMember(cluster.etcd_endpoint(), cluster.tls_dir(), cluster.addresses()[1], 0).ok());
  REQUIRE(testing::WaitFor([&] {
    const ShardMapInfo map = Map(cluster);
    return std::count(map.holder.begin(), map.holder.end(), cluster.addresses()[1]) == 0;
  }, 20s));
  train(6);
  for (const std::string& t : a->tasks()) CHECK(t != cluster.addresses()[1]);
  CHECK(a->tasks() == b->tasks());
  // No step failed, and every update was applied once.
  sf::testing::RequireAppliedOnce(*a, m, step, a->retried_steps() + b->retried_steps());
  for (const auto& c : a->Changes()) CHECK(c.restored_tasks.empty());
}

TEST_CASE("Cluster: a step placed by a stale map is refused by the old holder and runs again on the new one, "
          "every update once",
          "[cluster][shard_map]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  SparseModel m;
  // Not elastic: it does not follow the map before a step on its own.
  auto s = Connect(cluster, m, 4, /*elastic=*/false);
  REQUIRE(s->Run({}, std::vector<Output>{}, {m.init}).ok());
  int step = 0;
  for (; step < 4; ++step) TrainOne(*s, m, step);
  const std::vector<std::string> before = s->tasks();
  auto added = cluster.AddNode(120);
  REQUIRE(added.ok());
  REQUIRE(cluster.WaitMembers(3, 20000).ok());
  // The next step meets a slot its old holder no longer serves: refused
  // there, the session follows the new map and runs the step again; the
  // parts that had run apply nothing twice.
  CHECK(s->retried_steps() == 0);
  for (; step < 10; ++step) TrainOne(*s, m, step);
  CHECK(s->retried_steps() >= 1);
  const std::vector<std::string> after = s->tasks();
  CHECK(after != before);
  CHECK(std::count(after.begin(), after.end(), *added) > 0);
  CHECK(!s->Changes().empty());
  sf::testing::RequireAppliedOnce(*s, m, step, s->retried_steps());
}

TEST_CASE("Cluster: two sessions racing a drain apply every update once", "[cluster][shard_map]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(3, 120).ok());
  SparseModel m;
  auto a = Connect(cluster, m, 6, true, 0);
  auto b = Connect(cluster, m, 6, true, 2);
  REQUIRE(a->Run({}, std::vector<Output>{}, {m.init}).ok());
  // Both train at once, on their own threads, while node 1 drains: at
  // least kEach steps each, and on until the node left (it leaves once its
  // slots were handed over and the sessions followed, at their next step).
  constexpr int kEach = 40;
  std::atomic<int> failed{0}, done{0};
  std::atomic<bool> left{false};
  auto train = [&](ClusterSession* s, int first) {
    for (int i = 0; i < kEach || (!left && i < 100 * kEach); ++i) {
      if (!Step(*s, m, first + i).ok()) ++failed;
      else ++done;
    }
  };
  std::thread ta(train, a.get(), 0), tb(train, b.get(), 1000);
  REQUIRE(DrainMember(cluster.etcd_endpoint(), cluster.tls_dir(), cluster.addresses()[1], 0).ok());
  const bool exited = cluster.WaitExit(1, 30000);
  left = true;
  ta.join();
  tb.join();
  CHECK(exited);
  CHECK(failed == 0);
  for (const std::string& t : a->tasks()) CHECK(t != cluster.addresses()[1]);
  // The counter every step adds one to: no update lost or applied twice.
  CHECK(Params(*a, m).back() == static_cast<float>(done.load()));
}

TEST_CASE("Cluster: a node stopped past its lease serves no partition placed before, once resumed",
          "[cluster][shard_map]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(3, 120).ok());
  SparseModel m;
  // A session whose connections outlive the stop (a long peer timeout), not
  // elastic: it keeps its registrations from before.
  ClusterOptions o;
  o.address = cluster.addresses()[0];
  o.tls_dir = cluster.tls_dir();
  o.tasks = 3;
  o.elastic = false;
  o.peer_timeout_ms = 30000;
  o.step_retry_ms = 0;  // the refusal itself is what this test looks at
  auto s = ClusterSession::Connect(m.g, o);
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
  for (int i = 0; i < 3; ++i) TrainOne(**s, m, i);
  const std::string victim = cluster.addresses()[1];
  const std::vector<std::string> before = (*s)->tasks();
  REQUIRE(std::count(before.begin(), before.end(), victim) > 0);
  ::kill(cluster.pid(1), SIGSTOP);
  // Its lease ends and the leader moves its slots away (nothing to copy: lost).
  REQUIRE(testing::WaitFor([&] {
    auto map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
    return map.ok() && std::count(map->holder.begin(), map->holder.end(), victim) == 0;
  }, 20s));
  testing::PauseFor(std::chrono::milliseconds(3500));  // past the node's stall threshold
  ::kill(cluster.pid(1), SIGCONT);
  // The first step after the resume reaches the node with a placement of the
  // old map: refused (the node stalled past its lease), never served.
  auto r = Step(**s, m, 3);
  INFO(r.status().ToString());
  REQUIRE(!r.ok());
  CHECK(r.status().code() == Code::kAborted);
  CHECK(r.status().message().find(std::string(cluster::kStaleEpoch)) != std::string::npos);
}

TEST_CASE("Cluster: a slot moved away leaves no copy behind that a later move of another slot carries",
          "[cluster][shard_map]") {
  // One copy of each slot (no backups), so the only state a move carries is
  // the moving slot's own: w on task 0, b on task 1, each step adds 1 to both.
  examples::LocalCluster cluster;
  cluster.SetReplicas(1);
  REQUIRE(cluster.Start(1, 120).ok());
  Graph g;
  Output w, b;
  Operation step_op;
  {
    auto d = g.DeviceScope("/job:worker/task:0");
    w = ops::Variable(g, "w", ops::Zeros(g, DType::kFloat32, {1}));
  }
  {
    auto d = g.DeviceScope("/job:worker/task:1");
    b = ops::Variable(g, "b", ops::Zeros(g, DType::kFloat32, {1}));
  }
  const Operation init = ops::GlobalVariablesInitializer(g);
  {
    const Output one = ops::Const(g, std::vector<float>{1.f}, Shape{1});
    step_op = ops::NoOp(g, {ops::AssignAdd(g, ops::VariableHandle(w), one).node,
                            ops::AssignAdd(g, ops::VariableHandle(b), one).node});
  }
  REQUIRE(g.status().ok());
  ClusterOptions o;
  o.address = cluster.addresses()[0];
  o.tls_dir = cluster.tls_dir();
  o.tasks = 2;
  auto s = ClusterSession::Connect(g, o);
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {init}).ok());
  int steps = 0;
  auto train = [&](int n) {
    for (int i = 0; i < n; ++i, ++steps) REQUIRE((*s)->Run({}, std::vector<Output>{}, {step_op}).ok());
  };
  train(4);
  // A run on one task alone (a read of w): its partition is registered with
  // the whole graph (b's handle in it, as a node the run does not run).
  REQUIRE((*s)->Run({}, std::vector<Output>{w}).ok());
  // The first node held both slots: one moves to the new node, and the
  // first keeps the copy it had (stale once the new holder trains it).
  auto added = cluster.AddNode(120);
  REQUIRE(added.ok());
  REQUIRE(cluster.WaitMembers(2, 20000).ok());
  REQUIRE(testing::WaitFor([&] {
    train(1);
    const ShardMapInfo map = Map(cluster);
    return map.holder[0] == *added || map.holder[1] == *added;
  }, 20s));
  train(4);
  // Draining the first node moves its other slot to the new node: what it
  // copies must be that slot's state alone, never its stale copy of the
  // slot that left first (it would overwrite that slot's newer updates).
  REQUIRE(DrainMember(cluster.etcd_endpoint(), cluster.tls_dir(), cluster.addresses()[0], 0).ok());
  REQUIRE(testing::WaitFor([&] {
    const ShardMapInfo map = Map(cluster);
    return map.holder[0] == *added && map.holder[1] == *added;
  }, 20s));
  train(3);
  auto got = (*s)->Run({}, std::vector<Output>{w, b});
  INFO(got.status().ToString());
  REQUIRE(got.ok());
  CHECK((*got)[0].data<float>()[0] == static_cast<float>(steps));
  CHECK((*got)[1].data<float>()[0] == static_cast<float>(steps));
}
