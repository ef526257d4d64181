// The cluster's etcd failing under a training cluster of real node
// processes on 127.0.0.1: membership is off the step path, so steps go on
// while etcd restarts or hangs, and the members' registrations (leases,
// watches) come back by themselves.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <chrono>
#include <thread>
#include <unistd.h>
#include <cstdlib>
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

// Starts two nodes (living lifetime_s), waits until both list both, and
// connects an initialised session of m over four tasks.
std::unique_ptr<ClusterSession> StartTraining(examples::LocalCluster& cluster, const SparseModel& m, double lifetime_s) {
  REQUIRE(cluster.Start(2, lifetime_s).ok());
  REQUIRE(testing::WaitFor([&] { return NodeMembers(cluster, 0) == 2 && NodeMembers(cluster, 1) == 2; }, 20s));
  auto s = Connect(cluster, m);
  REQUIRE(s->Run({}, std::vector<Output>{}, {m.init}).ok());
  return s;
}

// Runs training steps *step .. *step + n - 1 (advancing *step); each must
// succeed, and a failure names the step and `when`.
void TrainSteps(ClusterSession& s, const SparseModel& m, int* step, int n, const char* when) {
  for (int i = 0; i < n; ++i, ++*step) {
    auto r = Step(s, m, *step);
    INFO("step " << *step << " " << when << ": " << r.status().ToString());
    REQUIRE(r.ok());
  }
}

}  // namespace

TEST_CASE("Cluster: training goes on while etcd restarts, and membership follows etcd after it",
          "[cluster][etcd]") {
  examples::LocalCluster cluster;
  SparseModel m;
  auto s = StartTraining(cluster, m, 120);
  int step = 0;
  TrainSteps(*s, m, &step, 5, "before etcd restarts");
  REQUIRE(cluster.etcd()->Restart().ok());
  // No step fails, and no update is lost or applied twice.
  TrainSteps(*s, m, &step, 10, "after etcd restarted");
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
  SparseModel m;
  auto s = StartTraining(cluster, m, 120);
  int step = 0;
  TrainSteps(*s, m, &step, 3, "before etcd hangs");
  REQUIRE(cluster.etcd()->Pause().ok());
  // Steps for three lease TTLs: none needs etcd.
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until) TrainSteps(*s, m, &step, 1, "with etcd hung");
  REQUIRE(cluster.etcd()->Resume().ok());
  // Their leases may have ended meanwhile: each registers again (a new life)
  // and both nodes list both members.
  CHECK(testing::WaitFor([&] { return EtcdMembers(cluster) == 2; }, 20s));
  CHECK(testing::WaitFor([&] { return NodeMembers(cluster, 0) == 2 && NodeMembers(cluster, 1) == 2; }, 20s));
  // And training goes on, every update kept once.
  TrainSteps(*s, m, &step, 3, "after etcd came back");
  RequireClose(Params(*s, m), Reference(m, step), 1e-5f);
}

// Not in the suite (hidden tag): many short steps back to back, for hunting
// rare hangs of the step path. Run: build/bin/test_cluster "[stress]".
TEST_CASE("Cluster: thousands of short steps back to back, none hangs", "[.][stress]") {
  examples::LocalCluster cluster;
  if (std::getenv("SF_STRESS_LOG")) cluster.SetNodeArgs({"--log"});
  SparseModel m;
  auto s = StartTraining(cluster, m, 300);
  const char* secs = std::getenv("SF_STRESS_SECONDS");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(secs ? std::atoi(secs) : 20);
  // SF_STRESS_PAUSE_ETCD=1: etcd hangs for 2 s of every 4 meanwhile.
  const bool pause_etcd = std::getenv("SF_STRESS_PAUSE_ETCD") != nullptr;
  // SF_STRESS_DUMP=DIR: a step running past 8 s gets every node's threads
  // (and this process's) dumped there by gdb, once.
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  std::optional<std::chrono::steady_clock::time_point> step_started;  // GUARDED_BY(watch_mu)
  bool done = false;                                                   // GUARDED_BY(watch_mu)
  auto mark = [&](std::optional<std::chrono::steady_clock::time_point> started, bool finished) {
    std::lock_guard<std::mutex> l(watch_mu);
    step_started = started;
    done = done || finished;
    watch_cv.notify_all();
  };
  std::thread watchdog;
  if (const char* dump = std::getenv("SF_STRESS_DUMP")) {
    watchdog = std::thread([&, dir = std::string(dump)] {
      std::unique_lock<std::mutex> l(watch_mu);
      for (;;) {
        // Until a step starts, then until it ends or has run 8 s.
        watch_cv.wait(l, [&] { return done || step_started.has_value(); });
        if (done) return;
        const auto started = *step_started;
        if (watch_cv.wait_until(l, started + 8s, [&] { return done || step_started != started; })) continue;
        l.unlock();
        for (int i = 0; i < 2; ++i)
          std::system(("gdb -p " + std::to_string(cluster.pid(i)) + " -batch -ex 'thread apply all bt' > " + dir +
                       "/node" + std::to_string(i) + ".txt 2>&1").c_str());
        std::system(("gdb -p " + std::to_string(::getpid()) + " -batch -ex 'thread apply all bt' > " + dir +
                     "/test.txt 2>&1").c_str());
        return;
      }
    });
  }
  int step = 0;
  bool paused = false;
  auto flipped = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < until) {
    if (pause_etcd && std::chrono::steady_clock::now() - flipped > 2s) {
      REQUIRE((paused ? cluster.etcd()->Resume() : cluster.etcd()->Pause()).ok());
      paused = !paused;
      flipped = std::chrono::steady_clock::now();
    }
    const auto t0 = std::chrono::steady_clock::now();
    mark(t0, false);
    auto r = Step(*s, m, step);
    const bool stop = !r.ok() || std::chrono::steady_clock::now() - t0 > 5s;
    mark(std::nullopt, stop);
    if (stop && watchdog.joinable()) watchdog.join();  // before a REQUIRE below may leave
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO("step " << step << ": " << r.status().ToString() << " in " << took << " s");
    if (!r.ok() || took >= 5.0) {
      const auto changes = s->Changes();
      std::string last;
      for (size_t i = changes.size() > 3 ? changes.size() - 3 : 0; i < changes.size(); ++i) {
        const auto& c = changes[i];
        last += "\n  change " + std::to_string(i) + ": moved " + std::to_string(c.moved_tasks.size()) + " restored " +
                std::to_string(c.restored_tasks.size()) + " lost " + std::to_string(c.lost.size()) + " added " +
                std::to_string(c.added.size()) + " drained " + std::to_string(c.drained.size());
      }
      std::string tasks;
      for (const auto& t : s->tasks()) tasks += " " + t;
      UNSCOPED_INFO(changes.size() << " changes so far; the last:" << last << "\n  tasks now:" << tasks);
    }
    REQUIRE(r.ok());
    REQUIRE(took < 5.0);
    ++step;
  }
  mark(std::nullopt, true);
  if (watchdog.joinable()) watchdog.join();
  if (paused) REQUIRE(cluster.etcd()->Resume().ok());
  RequireClose(Params(*s, m), Reference(m, step), 1e-4f);
}
