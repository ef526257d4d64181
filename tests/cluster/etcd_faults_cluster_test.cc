// The cluster's etcd failing under a training cluster of real node
// processes on 127.0.0.1: membership is off the step path, so steps go on
// while etcd restarts or hangs, and the members' registrations (leases,
// watches) come back by themselves.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "tests/support/sparse_model.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;
using sf::testing::Params;
using sf::testing::Reference;
using sf::testing::RequireClose;
using sf::testing::SparseModel;
using sf::testing::Step;

namespace {

size_t EtcdMembers(const examples::LocalCluster& c) {
  auto m = ListEtcdMembers(c.etcd_endpoint(), c.tls_dir());
  return m.ok() ? m->size() : 0;
}

size_t NodeMembers(const examples::LocalCluster& c, int i) {
  auto m = ListClusterMembers(c.addresses()[i], c.tls_dir());
  return m.ok() ? m->size() : 0;
}

std::unique_ptr<ClusterSession> Connect(const examples::LocalCluster& c, const SparseModel& m) {
  ClusterOptions o;
  o.address = c.addresses()[0];
  o.tls_dir = c.tls_dir();
  o.tasks = 4;
  auto s = ClusterSession::Connect(m.g, o);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  return std::move(s).value();
}

}  // namespace

TEST_CASE("Cluster: training goes on while etcd restarts, and membership follows etcd after it",
          "[cluster][etcd]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  REQUIRE(testing::WaitFor([&] { return NodeMembers(cluster, 0) == 2 && NodeMembers(cluster, 1) == 2; }, 20s));
  SparseModel m;
  auto s = Connect(cluster, m);
  REQUIRE(s->Run({}, std::vector<Output>{}, {m.init}).ok());
  int step = 0;
  for (; step < 5; ++step) REQUIRE(Step(*s, m, step).ok());
  REQUIRE(cluster.etcd()->Restart().ok());
  // No step fails, and no update is lost or applied twice.
  for (; step < 15; ++step) {
    auto r = Step(*s, m, step);
    INFO("step " << step << ": " << r.status().ToString());
    REQUIRE(r.ok());
  }
  RequireClose(Params(*s, m), Reference(m, step), 1e-5f);
  // The leases and the nodes' watches outlived the restart: both are still
  // members, and a node killed now is gone for etcd and for the survivor.
  REQUIRE(testing::WaitFor([&] { return EtcdMembers(cluster) == 2; }, 15s));
  CHECK(s->Changes().empty());
  cluster.Kill(1);
  CHECK(testing::WaitFor([&] { return EtcdMembers(cluster) == 1; }, 10s));
  CHECK(testing::WaitFor([&] { return NodeMembers(cluster, 0) == 1; }, 10s));
}

TEST_CASE("Cluster: a hung etcd stops no step, and the members register again once it answers",
          "[cluster][etcd]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  REQUIRE(testing::WaitFor([&] { return NodeMembers(cluster, 0) == 2 && NodeMembers(cluster, 1) == 2; }, 20s));
  SparseModel m;
  auto s = Connect(cluster, m);
  REQUIRE(s->Run({}, std::vector<Output>{}, {m.init}).ok());
  int step = 0;
  for (; step < 3; ++step) REQUIRE(Step(*s, m, step).ok());
  REQUIRE(cluster.etcd()->Pause().ok());
  // Steps for three lease TTLs: none needs etcd.
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until) {
    auto r = Step(*s, m, step);
    INFO("step " << step << " with etcd hung: " << r.status().ToString());
    REQUIRE(r.ok());
    ++step;
  }
  REQUIRE(cluster.etcd()->Resume().ok());
  // Their leases may have ended meanwhile: each registers again (a new life)
  // and both nodes list both members.
  CHECK(testing::WaitFor([&] { return EtcdMembers(cluster) == 2; }, 20s));
  CHECK(testing::WaitFor([&] { return NodeMembers(cluster, 0) == 2 && NodeMembers(cluster, 1) == 2; }, 20s));
  // And training goes on, every update kept once.
  for (int i = 0; i < 3; ++i, ++step) {
    auto r = Step(*s, m, step);
    INFO("step " << step << " after etcd came back: " << r.status().ToString());
    REQUIRE(r.ok());
  }
  RequireClose(Params(*s, m), Reference(m, step), 1e-5f);
}
