// Cluster sessions over real node processes (and in-process nodes) on
// 127.0.0.1: the same graph must give the same numbers as in one process,
// failures must surface as errors naming the node, never as hangs, and peers
// without the secret or speaking garbage must not disturb a node.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "examples/common/local_cluster.h"
#include "shardflow/graph_io.h"
#include "net/peer_rpc.h"
#include "net/wire.h"
#include "shardflow/cluster.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/queue_ops.h"
#include "shardflow/session.h"
#include "tests/support/neg_partition.h"
#include "tests/support/raw_socket.h"
#include "tests/support/wait.h"
#include "tests/support/test_credentials.h"
#include "tests/support/test_etcd.h"

using namespace sf;
using namespace std::chrono_literals;

namespace {

// Whether the cluster's map gives slot to the node at address, handed over
// (a slot moves by being copied to its new holder as a backup first, so a
// node that just joined holds nothing yet).
bool SlotAt(int slot, const std::string& address) {
  auto m = ReadClusterMap(sf::testing::TestEtcd(), sf::testing::TestTlsDir());
  const auto s = static_cast<size_t>(slot);
  return m.ok() && s < m->holder.size() && m->holder[s] == address && m->moving_from[s].empty();
}

bool Contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

// A two-layer regression model with one layer's variables pinned to each
// task, so every step crosses between the nodes both ways.
struct Model {
  Graph g;
  Output loss, w1, w2;
  Operation train, init;
  // second_task: where the second layer goes ("/job:worker/task:1" needs two nodes).
  explicit Model(const std::string& second_task = "/job:worker/task:1") {
    auto x = ops::Placeholder(g, DType::kFloat32, {8, 4}, "x");
    auto y = ops::Placeholder(g, DType::kFloat32, {8, 1}, "y");
    Output h;
    {
      auto s = g.DeviceScope("/job:worker/task:0");
      w1 = ops::Variable(g, "w1", ops::TruncatedNormal(g, {4, 16}, 0.5, 1));
      h = ops::Tanh(g, ops::MatMul(g, x, w1));
    }
    {
      auto s = g.DeviceScope(second_task);
      w2 = ops::Variable(g, "w2", ops::TruncatedNormal(g, {16, 1}, 0.5, 2));
      auto d = ops::MatMul(g, h, w2) - y;
      loss = ops::Mean(g, d * d);
    }
    auto t = MomentumOptimizer(0.1, 0.9).Minimize(g, loss);
    REQUIRE(t.ok());
    train = *t;
    init = ops::GlobalVariablesInitializer(g);
    REQUIRE(g.status().ok());
  }
  FeedMap Batch(int step) const {
    std::vector<float> xs(32), ys(8);
    for (int i = 0; i < 32; ++i) xs[i] = std::sin(0.37f * (i + 1) * (step + 1));
    for (int i = 0; i < 8; ++i) ys[i] = std::cos(0.11f * (i + 3) * (step + 2));
    return {{"x", Tensor::FromVector(xs, {8, 4})}, {"y", Tensor::FromVector(ys, {8, 1})}};
  }
};

template <typename S>
std::vector<float> Train(S& s, const Model& m, int steps, std::vector<Tensor>* weights) {
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    auto r = s.Run(m.Batch(i), std::vector<Output>{m.loss}, {m.train});
    REQUIRE(r.ok());
    losses.push_back((*r)[0].template data<float>()[0]);
  }
  auto w = s.Run({}, std::vector<Output>{m.w1, m.w2});
  REQUIRE(w.ok());
  *weights = *w;
  return losses;
}

void RequireClose(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  for (int64_t i = 0; i < a.num_elements(); ++i) REQUIRE(x[i] == Approx(y[i]).epsilon(1e-6).margin(1e-7));
}

ClusterOptions Options(const examples::LocalCluster& c) {
  ClusterOptions o;
  o.address = c.addresses()[0];
  o.tls_dir = c.tls_dir();
  return o;
}

using testing::RawConnect;

}  // namespace

TEST_CASE("Cluster: training over two node processes matches one process", "[cluster]") {
  Model m;
  std::vector<Tensor> local_w, cluster_w;
  Session local(m.g);
  auto local_losses = Train(local, m, 6, &local_w);

  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  auto s = ClusterSession::Connect(m.g, Options(cluster));
  REQUIRE(s.ok());
  REQUIRE((*s)->tasks().size() == 2);
  auto cluster_losses = Train(**s, m, 6, &cluster_w);
  REQUIRE(cluster_losses.size() == local_losses.size());
  for (size_t i = 0; i < local_losses.size(); ++i)
    REQUIRE(cluster_losses[i] == Approx(local_losses[i]).epsilon(1e-6));
  RequireClose(cluster_w[0], local_w[0]);
  RequireClose(cluster_w[1], local_w[1]);
}

TEST_CASE("Cluster: variables live on the nodes and are shared by sessions", "[cluster]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  Graph g;
  Output v, assign;
  {
    auto s = g.DeviceScope("/job:worker/task:1");
    v = ops::Variable(g, "shared_v", ops::Const(g, std::vector<float>{1, 2, 3}, {3}));
  }
  auto x = ops::Placeholder(g, DType::kFloat32, {3}, "x");
  const Operation init = ops::GlobalVariablesInitializer(g);
  const int add = ops::AssignAdd(g, ops::VariableHandle(v), x).node;
  REQUIRE(g.status().ok());
  auto a = ClusterSession::Connect(g, Options(cluster));
  auto b = ClusterSession::Connect(g, Options(cluster));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE((*a)->Run({}, std::vector<Output>{}, {init}).ok());
  FeedMap feed = {{"x", Tensor::FromVector(std::vector<float>{10, 20, 30}, {3})}};
  REQUIRE((*a)->Run(feed, std::vector<Output>{}, {add}).ok());
  auto r = (*b)->Run({}, std::vector<Output>{v});
  REQUIRE(r.ok());
  const float* f = (*r)[0].data<float>();
  REQUIRE(f[0] == 11);
  REQUIRE(f[2] == 33);
}

TEST_CASE("Cluster: a certificate of another CA is refused and the node keeps serving", "[cluster]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  Model m("/job:worker/task:0");
  auto other = MakeTemporaryClusterCredentials();
  REQUIRE(other.ok());
  ClusterOptions bad = Options(cluster);
  bad.tls_dir = *other;
  auto s = ClusterSession::Connect(m.g, bad);
  std::filesystem::remove_all(*other);
  REQUIRE(!s.ok());
  INFO(s.status().ToString());
  REQUIRE(s.status().code() == Code::kPermissionDenied);
  // Plaintext to a TLS node is refused too.
  ClusterOptions plain = Options(cluster);
  plain.insecure = true;
  auto p = ClusterSession::Connect(m.g, plain);
  REQUIRE(!p.ok());
  auto good = ClusterSession::Connect(m.g, Options(cluster));
  REQUIRE(good.ok());
  auto r = (*good)->Run({}, std::vector<Output>{}, {m.init});
  INFO(r.status().ToString());
  REQUIRE(r.ok());
}

TEST_CASE("Cluster: garbage and malformed frames do not stop a node", "[cluster]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  const std::string addr = cluster.addresses()[0];
  // Not a shardflow peer at all.
  int fd = RawConnect(addr);
  REQUIRE(fd >= 0);
  const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  REQUIRE(::write(fd, junk, sizeof junk) > 0);
  ::close(fd);
  // A TLS record header announcing the largest record, then silence.
  fd = RawConnect(addr);
  REQUIRE(fd >= 0);
  const uint8_t record[] = {0x16, 0x03, 0x01, 0xff, 0xff};
  REQUIRE(::write(fd, record, sizeof record) == sizeof record);
  ::close(fd);
  // A Cap'n Proto segment table claiming 4 GiB, as a plaintext peer would send.
  fd = RawConnect(addr);
  REQUIRE(fd >= 0);
  const uint32_t table[2] = {0, 0xffffffffu};
  REQUIRE(::write(fd, table, sizeof table) == sizeof table);
  ::close(fd);

  Model m("/job:worker/task:0");
  auto s = ClusterSession::Connect(m.g, Options(cluster));
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
}

TEST_CASE("Cluster: a killed or hung node fails the step with its name, no hang", "[cluster]") {
  Model m;
  for (int sig : {SIGKILL, SIGSTOP}) {
    examples::LocalCluster cluster;
    cluster.SetReplicas(1);  // no backup takes over: the step fails
    REQUIRE(cluster.Start(2, 120).ok());
    auto s = ClusterSession::Connect(m.g, Options(cluster));
    REQUIRE(s.ok());
    REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
    REQUIRE((*s)->Run(m.Batch(0), std::vector<Output>{m.loss}, {m.train}).ok());
    const std::string victim = (*s)->tasks()[1];
    if (sig == SIGKILL) cluster.Kill(1);
    else ::kill(cluster.pid(1), SIGSTOP);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = (*s)->Run(m.Batch(1), std::vector<Output>{m.loss}, {m.train});
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(!r.ok());
    INFO(r.status().ToString());
    REQUIRE(Contains(r.status(), victim));
    REQUIRE(secs < 5.0);  // heartbeats find a hung peer in about a second
  }
}

TEST_CASE("Cluster: a session whose connection to a live member dropped registers its partitions again",
          "[cluster]") {
  Model m;
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  ClusterOptions o = Options(cluster);
  o.tasks = 2;  // the model's two tasks, on the one node
  auto s = ClusterSession::Connect(m.g, o);
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
  REQUIRE((*s)->Run(m.Batch(0), std::vector<Output>{m.loss}, {m.train}).ok());
  // Stopped long enough for the session to drop its connection (the step
  // fails naming the node); resumed, the node sees the connection gone and
  // forgets the session's partitions, and stays the cluster's member.
  ::kill(cluster.pid(0), SIGSTOP);
  auto failed = (*s)->Run(m.Batch(1), std::vector<Output>{m.loss}, {m.train});
  ::kill(cluster.pid(0), SIGCONT);
  REQUIRE(!failed.ok());
  // The session dials again and registers anew: steps run again.
  Status last;
  CHECK(testing::WaitFor([&] {
    auto r = (*s)->Run(m.Batch(1), std::vector<Output>{m.loss}, {m.train});
    last = r.status();
    return r.ok();
  }, 30s));
  INFO(last.ToString());
  CHECK(last.ok());
}

TEST_CASE("Cluster: in-process nodes report feed and kernel errors by name", "[cluster]") {
  NodeOptions no;
  no.tls_dir = sf::testing::TestTlsDir();
  no.etcd = sf::testing::TestEtcd();
  no.lease_ttl_s = 1;
  auto n0 = ClusterNode::Start(no);
  REQUIRE(n0.ok());
  auto n1 = ClusterNode::Start(no);
  REQUIRE(n1.ok());
  // Both see both, through etcd, and the map gives task 1 to n1.
  REQUIRE(testing::WaitFor([&] { return (*n0)->Members().size() == 2 && (*n1)->Members().size() == 2; }, 10s));
  REQUIRE(testing::WaitFor([&] { return SlotAt(1, (*n1)->address()); }, 20s));

  Graph g;
  Output x, r;
  {
    auto s = g.DeviceScope("/job:worker/task:0");
    x = ops::Placeholder(g, DType::kFloat32, {-1}, "x");
  }
  {
    auto s = g.DeviceScope("/job:worker/task:1");
    r = ops::Reshape(g, x, ops::Const(g, std::vector<int32_t>{2, 2}));
  }
  REQUIRE(g.status().ok());
  ClusterOptions o;
  o.address = (*n0)->address();
  o.tls_dir = no.tls_dir;
  auto s = ClusterSession::Connect(g, o);
  REQUIRE(s.ok());
  FeedMap ok = {{"x", Tensor::FromVector(std::vector<float>{1, 2, 3, 4}, {4})}};
  auto good = (*s)->Run(ok, std::vector<Output>{r});
  REQUIRE(good.ok());
  REQUIRE((*good)[0].shape() == Shape{2, 2});
  // The kernel on task 1 fails: the error names its node and op.
  FeedMap three = {{"x", Tensor::FromVector(std::vector<float>{1, 2, 3}, {3})}};
  auto bad = (*s)->Run(three, std::vector<Output>{r});
  REQUIRE(!bad.ok());
  INFO(bad.status().ToString());
  REQUIRE(Contains(bad.status(), "Reshape"));
  // ... and which member and step: a kernel's own error names neither.
  REQUIRE(Contains(bad.status(), "task 1 (" + (*n1)->address() + ")"));
  REQUIRE(Contains(bad.status(), "step "));
  // A wrongly typed feed never leaves the client.
  FeedMap wrong = {{"x", Tensor::FromVector(std::vector<int32_t>{1, 2, 3, 4}, {4})}};
  auto w = (*s)->Run(wrong, std::vector<Output>{r});
  REQUIRE(!w.ok());
  REQUIRE(Contains(w.status(), "x"));
  // And the session still works.
  REQUIRE((*s)->Run(ok, std::vector<Output>{r}).ok());
}

TEST_CASE("Cluster: stopping a node while its partition waits fails the step by name", "[cluster]") {
  NodeOptions no;
  no.tls_dir = sf::testing::TestTlsDir();
  no.etcd = sf::testing::TestEtcd();
  no.lease_ttl_s = 1;
  no.replicas = 1;  // no backup takes over: the step fails
  auto n0 = ClusterNode::Start(no);
  REQUIRE(n0.ok());
  auto n1 = ClusterNode::Start(no);
  REQUIRE(n1.ok());
  const std::string victim = (*n1)->address();
  REQUIRE(testing::WaitFor([&] { return SlotAt(1, victim); }, 20s));

  // Task 1 waits on an empty queue (its own) and on a tensor from task 0,
  // which waits on its own empty queue until a timeout.
  Graph g;
  Output x, r;
  {
    auto s = g.DeviceScope("/job:worker/task:0");
    auto q0 = ops::FIFOQueue(g, {DType::kFloat32});
    x = ops::QueueDequeue(g, q0, 3000)[0];
  }
  {
    auto s = g.DeviceScope("/job:worker/task:1");
    auto q1 = ops::FIFOQueue(g, {DType::kFloat32});
    r = ops::QueueDequeue(g, q1)[0] + x;
  }
  REQUIRE(g.status().ok());
  ClusterOptions o;
  o.address = (*n0)->address();
  o.tls_dir = no.tls_dir;
  auto s = ClusterSession::Connect(g, o);
  REQUIRE(s.ok());
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<std::vector<Tensor>>> result;
  (*s)->RunAsync({}, {r.name()}, {}, [&](Result<std::vector<Tensor>> res) {
    std::lock_guard<std::mutex> l(mu);
    result.emplace(std::move(res));
    cv.notify_all();
  });
  // Gives the step time to reach both members and wait there: a deliberate
  // delay that aims the stop at a waiting partition (neither a node nor the
  // session offers a query for a step in progress to wait on).
  testing::PauseFor(300ms);
  const auto t0 = std::chrono::steady_clock::now();
  (*n1)->Stop();  // must not wait on the step forever, nor leave it running
  const double stop_secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(stop_secs < 2.0);
  n1->reset();
  std::unique_lock<std::mutex> l(mu);
  REQUIRE(cv.wait_for(l, std::chrono::seconds(10), [&] { return result.has_value(); }));
  REQUIRE(!result->ok());
  INFO(result->status().ToString());
  REQUIRE(Contains(result->status(), victim));
}

TEST_CASE("Cluster: a slow RunAsync callback does not make a healthy node look hung", "[cluster]") {
  NodeOptions no;
  no.tls_dir = sf::testing::TestTlsDir();
  auto n0 = ClusterNode::Start(no);
  REQUIRE(n0.ok());
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  auto y = x * x;
  REQUIRE(g.status().ok());
  ClusterOptions o;
  o.address = (*n0)->address();
  o.tls_dir = no.tls_dir;
  auto s = ClusterSession::Connect(g, o);
  REQUIRE(s.ok());
  FeedMap feeds = {{"x", Tensor::FromVector(std::vector<float>{2, 3}, {2})}};
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<std::vector<Tensor>>> first;
  // Longer than the peer timeout: run on a transport thread, it would keep
  // that connection's heartbeats unread and the node would be dropped.
  (*s)->RunAsync(feeds, {y.name()}, {}, [&](Result<std::vector<Tensor>> r) {
    // A deliberately slow callback: the time past the peer timeout is the point.
    testing::PauseFor(std::chrono::milliseconds(o.peer_timeout_ms + 500));
    std::lock_guard<std::mutex> l(mu);
    first.emplace(std::move(r));
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> l(mu);
    REQUIRE(cv.wait_for(l, std::chrono::seconds(10), [&] { return first.has_value(); }));
  }
  REQUIRE(first->ok());
  auto again = (*s)->Run(feeds, std::vector<Output>{y});
  INFO(again.status().ToString());
  REQUIRE(again.ok());
  REQUIRE((*again)[0].data<float>()[1] == 9.0f);
}

TEST_CASE("Cluster: a node checks a peer's feeds before its kernels see them", "[cluster]") {
  NodeOptions no;
  no.tls_dir = sf::testing::TestTlsDir();
  auto node = ClusterNode::Start(no);
  REQUIRE(node.ok());
  const testing::NegPartition neg;

  std::unique_ptr<net::Endpoint> t;
  auto c = testing::ConnectAs(net::Role::kSession, no.tls_dir, (*node)->address(), &t);
  REQUIRE(c.ok());
  auto r = net::Call(*c, neg.Registration(42, 1, (*node)->address()), 5000);
  REQUIRE(r.ok());
  REQUIRE(r->status.ok());

  auto run = [&](std::vector<Tensor> feeds) {
    net::RunPartition rp;
    rp.session_id = 42;
    rp.handle = 1;
    rp.step_id = 7;
    rp.feeds = std::move(feeds);
    auto reply = net::Call(*c, rp, 5000);
    REQUIRE(reply.ok());
    return (*reply);
  };
  auto good = run({Tensor::FromVector(std::vector<float>{1, -2}, {2})});
  REQUIRE(good.status.ok());
  REQUIRE(good.fetches[0].data<float>()[1] == 2);
  // A wrong dtype, a wrong shape and a missing feed are refused by name.
  auto wrong_type = run({Tensor::FromVector(std::vector<int32_t>{1, 2}, {2})});
  REQUIRE(wrong_type.status.code() == Code::kInvalidArgument);
  REQUIRE(Contains(wrong_type.status, "x"));
  auto wrong_shape = run({Tensor::FromVector(std::vector<float>{1, 2, 3}, {3})});
  REQUIRE(wrong_shape.status.code() == Code::kInvalidArgument);
  auto missing = run({});
  REQUIRE(missing.status.code() == Code::kInvalidArgument);
  REQUIRE(Contains(missing.status, "feeds"));
  t->Shutdown();
}

TEST_CASE("Cluster: a hung member is dropped when its lease in etcd ends", "[cluster]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  NodeOptions no;
  no.tls_dir = cluster.tls_dir();
  no.etcd = cluster.etcd_endpoint();
  no.lease_ttl_s = 1;
  auto node = ClusterNode::Start(no);
  INFO(node.status().ToString());
  REQUIRE(node.ok());
  REQUIRE((*node)->Members().size() == 2);
  ::kill(cluster.pid(0), SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  testing::WaitFor([&] { return (*node)->Members().size() != 2; }, 10s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::kill(cluster.pid(0), SIGCONT);
  CHECK((*node)->Members().size() == 1);
  CHECK(secs < 2.5);  // the 1 s lease, and etcd's check of expired leases
  // Resumed, it finds its lease gone and registers again as a new life.
  CHECK(testing::WaitFor([&] { return (*node)->Members().size() == 2; }, 10s));
}

TEST_CASE("Cluster: a node whose etcd cannot be reached does not start, naming etcd", "[cluster]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  NodeOptions no;
  no.tls_dir = cluster.tls_dir();
  no.etcd = "127.0.0.1:1";
  const auto t0 = std::chrono::steady_clock::now();
  auto node = ClusterNode::Start(no);
  REQUIRE(!node.ok());
  CHECK(Contains(node.status(), "127.0.0.1:1"));
  CHECK(std::chrono::steady_clock::now() - t0 < 15s);
  // A name etcd's member keys cannot hold is refused by name, before etcd is asked.
  no.name = "rack/7";
  auto slashed = ClusterNode::Start(no);
  REQUIRE(slashed.status().code() == Code::kInvalidArgument);
  CHECK(Contains(slashed.status(), "rack/7"));
  no.name.clear();
  // A second node of a live node's name is refused, naming the holder.
  auto first = ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir());
  REQUIRE(first.ok());
  REQUIRE(first->size() == 1);
  no.etcd = cluster.etcd_endpoint();
  no.name = (*first)[0].name;
  auto twin = ClusterNode::Start(no);
  REQUIRE(twin.status().code() == Code::kFailedPrecondition);
  CHECK(Contains(twin.status(), (*first)[0].address));
}
