// Requests whose cost grows with their size (issue 36, item 4), sent by a
// session credential to node processes while another session trains
// through the same node: a registration of 134 MB (2^22 target names) and
// a graph of 100,000 loop merges. Neither runs on the node's I/O thread, so
// the node answers other peers meanwhile, no member drops it (its life in
// etcd is the same), and the training session loses no step. Bounded by
// deadlines.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/local_cluster.h"
#include "net/peer_rpc.h"
#include "shardflow/cluster.h"
#include "shardflow/control_flow.h"
#include "shardflow/graph_io.h"
#include "shardflow/ops.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// A session that trains through the node at `address` until stopped: each
// step adds 1 to a variable on task 0 with a value computed on task 1, so
// every step crosses two nodes. Counts the steps that succeeded and failed.
struct Trainer {
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::string first_error;  // written by the trainer thread before it ends
  float final_value = -1;
  std::thread thread;

  void Start(const examples::LocalCluster& cluster, const std::string& address) {
    thread = std::thread([this, &cluster, address] {
      Graph g;
      Output v, one;
      {
        auto s = g.DeviceScope("/job:worker/task:0");
        v = ops::Variable(g, "costs_counter", ops::Const(g, Tensor::Scalar<float>(0)));
      }
      {
        auto s = g.DeviceScope("/job:worker/task:1");
        one = ops::Add(g, ops::Const(g, Tensor::Scalar<float>(0.5f)), ops::Const(g, Tensor::Scalar<float>(0.5f)));
      }
      const Operation init = ops::GlobalVariablesInitializer(g);
      const Output add = ops::AssignAdd(g, ops::VariableHandle(v), one);
      ClusterOptions o;
      o.address = address;
      o.tls_dir = cluster.tls_dir();
      o.tasks = 2;
      auto session = ClusterSession::Connect(g, o);
      if (!session.ok()) {
        first_error = session.status().ToString();
        ++failed;
        return;
      }
      if (auto i = (*session)->Run({}, std::vector<Output>{}, {init}); !i.ok()) {
        first_error = "init: " + i.status().ToString();
        ++failed;
        return;
      }
      while (!stop.load()) {
        auto r = (*session)->Run({}, std::vector<Output>{add});
        if (r.ok()) {
          ++ok;
          continue;
        }
        if (failed++ == 0) first_error = r.status().ToString();
      }
      auto last = (*session)->Run({}, std::vector<Output>{v});
      if (last.ok()) final_value = (*last)[0].scalar_as<float>();
    });
  }
  void Stop() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

// The etcd lives of the cluster's members, by address.
std::vector<std::pair<std::string, uint64_t>> Lives(const examples::LocalCluster& cluster) {
  std::vector<std::pair<std::string, uint64_t>> out;
  auto m = ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir());
  if (m.ok())
    for (const auto& x : *m) out.emplace_back(x.address, x.incarnation);
  std::sort(out.begin(), out.end());
  return out;
}

// Asks the node for its members every few milliseconds over a connection of
// its own until stopped; the longest answer, in seconds (a stalled I/O
// thread shows here first).
struct Prober {
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  double longest_s = 0;
  std::thread thread;
  void Start(const net::ConnectionPtr& c) {
    thread = std::thread([this, c] {
      while (!stop.load()) {
        const auto t0 = Clock::now();
        if (!net::Call(c, net::ListMembers{}, 5000).ok()) ++failures;
        longest_s = std::max(longest_s, Seconds(t0));
        testing::PauseFor(5ms);  // the probe's pace (the point: a sample every few ms), not a wait for an outcome
      }
    });
  }
  void Stop() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

// A raw session endpoint of the cluster (no Cluster Session in between).
std::unique_ptr<net::Endpoint> SessionEndpoint(const examples::LocalCluster& cluster) {
  net::EndpointOptions o;
  o.role = net::Role::kSession;
  o.tls_dir = cluster.tls_dir();
  o.log = false;
  auto e = net::Endpoint::Create(o, nullptr, nullptr);
  REQUIRE(e.ok());
  return std::move(*e);
}

// One WhileLoop over n counters (n Merges with their back edges), its last
// value named "last".
std::string LoopGraphBytes(int n) {
  Graph g;
  auto scope = g.DeviceScope("/job:worker/task:0");
  std::vector<Output> init;
  for (int i = 0; i < n; ++i) init.push_back(ops::Const(g, int32_t{0}));
  auto loop = WhileLoop(
      g, [](Graph& g, const std::vector<Output>& v) { return ops::Less(g, v[0], ops::Const(g, int32_t{2})); },
      [](Graph& g, const std::vector<Output>& v) {
        std::vector<Output> next;
        const Output one = ops::Const(g, int32_t{1});
        for (const Output& x : v) next.push_back(ops::Add(g, x, one));
        return next;
      },
      init);
  REQUIRE(loop.ok());
  ops::Identity(g, (*loop)[n - 1], "last");
  REQUIRE(g.status().ok());
  auto bytes = GraphToBytes(g);
  REQUIRE(bytes.ok());
  return *bytes;
}

}  // namespace

TEST_CASE("Costs: a 134 MB registration and a 100,000-merge loop graph stall no node and lose no step",
          "[cluster][hostile][costs]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(3, 300).ok());
  const std::string target = cluster.addresses()[0];
  const auto lives_before = Lives(cluster);
  REQUIRE(lives_before.size() == 3);

  Trainer trainer;
  trainer.Start(cluster, target);
  const bool trained = testing::WaitFor([&] { return trainer.ok.load() >= 5 || trainer.failed.load() > 0; }, 60s);
  if (!trained || trainer.failed.load() > 0) {
    trainer.Stop();
    FAIL("the trainer did not train before the attack: " << trainer.first_error);
  }

  // The prober has an endpoint (and I/O thread) of its own: the attacker's
  // is busy encrypting 134 MB, which is this process's time, not the node's.
  auto probe_endpoint = SessionEndpoint(cluster);
  auto probe_conn = probe_endpoint->Connect(target);
  REQUIRE(probe_conn.ok());
  Prober prober;
  prober.Start(*probe_conn);

  auto endpoint = SessionEndpoint(cluster);
  auto attacker = endpoint->Connect(target);
  REQUIRE(attacker.ok());
  net::RegisterPartition base;
  base.session_id = 0x5eed;
  base.device = "/job:worker/task:0/device:CPU:0";
  base.tasks = {{"task0", target}};
  {
    // 2^22 names of 16 bytes (3 words each, and a pointer): 134 MB in one message.
    net::RegisterPartition big = base;
    big.handle = 1;
    Graph tiny;
    ops::Const(tiny, Tensor::Scalar<float>(1), "c");
    big.graph_def = *GraphToBytes(tiny);
    big.targets.reserve(net::kMaxRegisteredNodes);
    char name[32];
    for (uint64_t i = 0; i < net::kMaxRegisteredNodes; ++i) {
      std::snprintf(name, sizeof name, "t%015llu", static_cast<unsigned long long>(i));
      big.targets.emplace_back(name);
    }
    const auto t0 = Clock::now();
    auto r = net::CallStatus(*attacker, std::move(big), 120000);
    WARN("134 MB registration answered in " << Seconds(t0) << " s: " << r.ToString());
    CHECK(r.code() == Code::kInvalidArgument);
    CHECK(r.message().find("no target node") != std::string::npos);
  }
  {
    // Past the bound: refused by the encoder, naming it, before anything is sent.
    net::RegisterPartition over = base;
    over.handle = 2;
    over.targets.assign(net::kMaxRegisteredNodes + 1, std::string());
    Status s = net::CallStatus(*attacker, std::move(over), 10000);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("at most " + std::to_string(net::kMaxRegisteredNodes)) != std::string::npos);
  }
  {
    // A graph of 100,000 loop merges (800,006 nodes), every node a target.
    net::RegisterPartition loop = base;
    loop.handle = 3;
    loop.graph_def = LoopGraphBytes(100000);
    loop.fetches = {{"last", 0}};
    const auto t0 = Clock::now();
    Status s = net::CallStatus(*attacker, std::move(loop), 120000);
    WARN("100,000-merge loop graph registered in " << Seconds(t0) << " s: " << s.ToString());
    CHECK(s.ok());
  }
  // Training went on meanwhile; a few more steps after the attack.
  const int after = trainer.ok.load();
  CHECK(testing::WaitFor([&] { return trainer.ok.load() >= after + 5 || trainer.failed.load() > 0; }, 60s));
  prober.Stop();
  trainer.Stop();
  INFO(trainer.first_error);
  CHECK(trainer.failed.load() == 0);
  CHECK(trainer.final_value == static_cast<float>(trainer.ok.load()));
  WARN("trainer: " << trainer.ok.load() << " steps, " << trainer.failed.load()
                   << " failed; the node answered ListMembers within " << prober.longest_s << " s throughout");
  CHECK(prober.failures.load() == 0);
  CHECK(prober.longest_s < 1.0);  // the peer timeout: a slower answer would look like a hung node
  // No member dropped the node: every member keeps the life it had.
  CHECK(Lives(cluster) == lives_before);
}

TEST_CASE("Costs: four sessions registering 40,000-merge loop graphs at once hold up no join and no member list",
          "[cluster][hostile][costs]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 300).ok());
  const std::string target = cluster.addresses()[0];
  // The case: four sessions, each a graph of 40,000 loop merges
  // (3.3 s each to load when loading was quadratic).
  const std::string graph = LoopGraphBytes(40000);
  constexpr int kSessions = 4;
  std::vector<Status> results(kSessions);
  std::vector<double> secs(kSessions, 0);
  std::vector<std::thread> sessions;
  for (int i = 0; i < kSessions; ++i) {
    sessions.emplace_back([&, i] {
      auto e = SessionEndpoint(cluster);
      auto c = e->Connect(target);
      if (!c.ok()) {
        results[i] = c.status();
        return;
      }
      net::RegisterPartition r;
      r.session_id = 0x100 + i;
      r.handle = 1;
      r.device = "/job:worker/task:0/device:CPU:0";
      r.tasks = {{"task0", target}};
      r.graph_def = graph;
      r.fetches = {{"last", 0}};
      const auto t0 = Clock::now();
      results[i] = net::CallStatus(*c, std::move(r), 180000);
      secs[i] = Seconds(t0);
    });
  }
  // Meanwhile a node joins, and the busy node lists its members promptly.
  const auto t0 = Clock::now();
  auto joined = cluster.AddNode(300);
  const double join_s = Seconds(t0);
  INFO(joined.status().ToString());
  CHECK(joined.ok());
  Status members = cluster.WaitMembers(3, 60000);
  INFO(members.ToString());
  CHECK(members.ok());
  const auto t1 = Clock::now();
  auto listed = ListClusterMembers(target, cluster.tls_dir());
  const double list_s = Seconds(t1);
  INFO(listed.status().ToString());
  CHECK(listed.ok());
  for (auto& t : sessions) t.join();
  for (int i = 0; i < kSessions; ++i) {
    INFO("session " << i << ": " << results[i].ToString());
    CHECK(results[i].ok());
  }
  WARN("four 40,000-merge registrations took " << secs[0] << ", " << secs[1] << ", " << secs[2] << ", " << secs[3]
                                                << " s; meanwhile a join took " << join_s
                                                << " s and the node listed its members in " << list_s << " s");
  CHECK(list_s < 2.0);
}
