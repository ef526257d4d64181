// The timeline of a cluster step (RunOptions::trace_file): one process row
// per node process, each with the partition it ran, its ops and its sends
// and receives, put on the coordinator's clock inside the step.
#include <catch2/catch.hpp>

#include <set>

#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trace_file.h"

using namespace sf;

TEST_CASE("Trace: a cluster step has one process row per node, on the step's clock", "[cluster][trace]") {
  // One layer on each task, so the step crosses between the nodes both ways.
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {8, 4}, "x");
  Output h, loss;
  {
    auto s = g.DeviceScope("/job:worker/task:0");
    auto w1 = ops::Variable(g, "w1", ops::TruncatedNormal(g, {4, 16}, 0.5, 1));
    h = ops::Tanh(g, ops::MatMul(g, x, w1));
  }
  {
    auto s = g.DeviceScope("/job:worker/task:1");
    auto w2 = ops::Variable(g, "w2", ops::TruncatedNormal(g, {16, 1}, 0.5, 2));
    auto y = ops::MatMul(g, h, w2);
    loss = ops::Mean(g, y * y);
  }
  auto train = GradientDescentOptimizer(0.1).Minimize(g, loss);
  REQUIRE(train.ok());
  auto init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());

  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  ClusterOptions co;
  co.address = cluster.addresses()[0];
  co.tls_dir = cluster.tls_dir();
  auto s = ClusterSession::Connect(g, co);
  REQUIRE(s.ok());
  REQUIRE((*s)->tasks().size() == 2);
  REQUIRE((*s)->Run({}, {}, {init}).ok());
  testing::TempDir dir("sf_trace_cluster");
  RunOptions ro;
  ro.trace_file = dir / "cluster.json";
  FeedMap feeds{{x, Tensor::FromVector(std::vector<float>(32, 0.25f), {8, 4})}};
  auto r = (*s)->Run(feeds, {loss}, {*train}, ro);
  REQUIRE(r.ok());

  testing::TraceFile t;
  REQUIRE(testing::ReadTraceFile(ro.trace_file, &t) == "");
  CHECK(t.dropped == 0);
  // The coordinator's row holds the step; each node's row what it ran.
  std::set<std::string> nodes;
  int coordinator_pid = -1;
  for (const auto& [pid, name] : t.processes) {
    if (name == "coordinator") coordinator_pid = pid;
    else if (name.rfind("node ", 0) == 0) nodes.insert(name);
  }
  REQUIRE(coordinator_pid > 0);
  CHECK(t.processes.size() == 3);
  CHECK(nodes.size() == 2);
  auto steps = t.Of("step");
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].pid == coordinator_pid);
  std::map<int, int> partitions, op_events, transfers;
  for (const auto& e : t.events) {
    if (e.pid == coordinator_pid) continue;
    // Every node event lies inside the step as the coordinator saw it.
    INFO(e.name << " on " << t.processes[e.pid]);
    CHECK(e.ts >= steps[0].ts);
    CHECK(e.ts + e.dur <= steps[0].ts + steps[0].dur + 0.002);
    if (e.cat == "partition") ++partitions[e.pid];
    if (e.cat == "op") ++op_events[e.pid];
    if (e.cat == "send" || e.cat == "recv") ++transfers[e.pid];
  }
  CHECK(partitions.size() == 2);
  CHECK(op_events.size() == 2);
  CHECK(transfers.size() == 2);  // both nodes send and receive (forward and backward)
  for (const auto& [pid, n] : partitions) CHECK(n == 1);
}
