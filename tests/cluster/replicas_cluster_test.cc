// Shard replicas over real node processes and etcd (shardflow node
// --replicas 2): every slot has a synced backup on another node; when a
// slot's holder is killed or hung, its backup takes over and the session
// runs the failed step again: no acknowledged update is lost or applied twice.
#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cluster/shard_map.h"
#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "tests/support/sparse_model.h"
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
  INFO("after the backups were synced again, " << step + 6 << " steps, " << s->retried_steps() << " run again");
  RequireAppliedOnce(*s, m, step + 6, s->retried_steps());
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
}
