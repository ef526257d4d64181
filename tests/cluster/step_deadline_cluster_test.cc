// A cluster step's deadline is progress-based: a step whose ops all wait
// fails with DeadlineExceeded after ClusterOptions::step_progress_timeout_ms,
// one that keeps computing for longer runs to its end.
#include <catch2/catch.hpp>

#include <chrono>

#include "shardflow/cluster.h"
#include "shardflow/control_flow.h"
#include "shardflow/ops.h"
#include "shardflow/queue_ops.h"
#include "tests/support/test_credentials.h"
#include "tests/support/test_etcd.h"

using namespace sf;
using namespace std::chrono_literals;

namespace {

struct TwoNodes {
  std::unique_ptr<ClusterNode> n0, n1;
  TwoNodes() {
    NodeOptions no;
    no.tls_dir = sf::testing::TestTlsDir();
    no.etcd = sf::testing::TestEtcd();
    no.lease_ttl_s = 1;
    auto a = ClusterNode::Start(no);
    REQUIRE(a.ok());
    n0 = std::move(a).value();
    auto b = ClusterNode::Start(no);
    REQUIRE(b.ok());
    n1 = std::move(b).value();
  }
  ClusterOptions Options(int timeout_ms) const {
    ClusterOptions o;
    o.address = n0->address();
    o.tls_dir = sf::testing::TestTlsDir();
    o.step_progress_timeout_ms = timeout_ms;
    return o;
  }
};

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("Cluster deadline: a step waiting on an empty queue fails after the no-progress timeout",
          "[cluster][deadline]") {
  TwoNodes nodes;
  // Task 1 waits for task 0's value, which waits on an empty queue.
  Graph g;
  Output x, y;
  Operation enq;
  {
    auto s = g.DeviceScope("/job:worker/task:0");
    auto q = ops::FIFOQueue(g, {DType::kFloat32});
    x = ops::QueueDequeue(g, q)[0];
    enq = ops::QueueEnqueue(g, q, {ops::Const(g, Tensor::FromVector<float>({1}, {1}))});
  }
  {
    auto s = g.DeviceScope("/job:worker/task:1");
    y = x * ops::Const(g, Tensor::FromVector<float>({2}, {1}));
  }
  REQUIRE(g.status().ok());
  auto s = ClusterSession::Connect(g, nodes.Options(1000));
  REQUIRE(s.ok());
  REQUIRE((*s)->tasks().size() == 2);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = (*s)->Run({}, std::vector<Output>{y});
  const double secs = SecondsSince(t0);
  REQUIRE(!r.ok());
  INFO(r.status().ToString());
  CHECK(r.status().code() == Code::kDeadlineExceeded);
  CHECK(r.status().message().find("no op of the step finished") != std::string::npos);
  CHECK(r.status().message().find("step_progress_timeout_ms") != std::string::npos);
  CHECK(secs >= 1.0);
  CHECK(secs < 15.0);
  // The session still serves; the value enqueued ends the abandoned dequeue
  // (its late answer is dropped), and the next step gets the next value.
  REQUIRE((*s)->Run({}, {}, {enq}).ok());
  REQUIRE((*s)->Run({}, {}, {enq}).ok());
  auto again = (*s)->Run({}, std::vector<Output>{y});
  REQUIRE(again.ok());
  CHECK((*again)[0].ToVector<float>() == std::vector<float>{2});
}

TEST_CASE("Cluster deadline: a step that keeps computing outlives the no-progress timeout", "[cluster][deadline]") {
  TwoNodes nodes;
  // A loop on task 0 of many cheap iterations, its result used on task 1:
  // task 1 only waits the whole time, but the step progresses on task 0.
  Graph g;
  Output y;
  Output counted;
  {
    auto s = g.DeviceScope("/job:worker/task:0");
    auto loop = WhileLoop(
        g, [](Graph& g, const std::vector<Output>& v) { return ops::Less(g, v[0], ops::Const(g, 1000000)); },
        [](Graph& g, const std::vector<Output>& v) {
          return std::vector<Output>{ops::Add(g, v[0], ops::Const(g, 1))};
        },
        {ops::Const(g, 0)});
    REQUIRE(loop.ok());
    counted = (*loop)[0];
  }
  {
    auto s = g.DeviceScope("/job:worker/task:1");
    y = ops::Add(g, counted, ops::Const(g, 1));
  }
  REQUIRE(g.status().ok());
  const int timeout_ms = 100;
  auto s = ClusterSession::Connect(g, nodes.Options(timeout_ms));
  REQUIRE(s.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = (*s)->Run({}, std::vector<Output>{y});
  const double secs = SecondsSince(t0);
  INFO(r.status().ToString() << " after " << secs << " s");
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<int32_t>() == std::vector<int32_t>{1000001});
  // Meaningful only if the step ran for several timeouts.
  CHECK(secs > 3.0 * timeout_ms / 1000.0);
}
