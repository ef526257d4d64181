// Ring all-reduce between node processes: each rank is its own worker with
// its own graph and ClusterSession (between-graph replication), its AllReduce
// placed on its own task, so the ranks of a group run in different `shardflow
// node` processes and the chunks travel node to node. Sums are checked
// against a double-precision reference; a node killed mid-reduction must fail
// the other ranks' steps by name, quickly.
#include <catch2/catch.hpp>

#include <fcntl.h>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>

#include "examples/common/local_cluster.h"
#include "net/peer_rpc.h"
#include "shardflow/cluster.h"
#include "shardflow/ops.h"
#include "shardflow/replication.h"
#include "tests/support/raw_socket.h"
#include "tests/support/wait.h"
#include "tests/support/test_credentials.h"
#include "tests/support/test_etcd.h"

using namespace sf;
using namespace std::chrono_literals;

namespace {

// Whether in-process nodes of options no spread slots 0 and 1 of their map
// over two of them, handed over (a slot moves to a joining node once copied
// there).
bool SlotsSpread(const NodeOptions& no) {
  auto m = ReadClusterMap(no.etcd, no.tls_dir);
  return m.ok() && m->holder.size() > 1 && m->holder[0] != m->holder[1] && m->moving_from[0].empty() &&
         m->moving_from[1].empty();
}

// Rank r's graph: x32 and x64 (any length) summed over the groups "sum32"
// and "sum64" of n ranks, on task r.
struct Rank {
  Graph g;
  Output s32, s64;
  Rank(int r, int n) {
    auto d = g.DeviceScope("/job:worker/task:" + std::to_string(r));
    s32 = ops::AllReduce(g, ops::Placeholder(g, DType::kFloat32, {-1}, "x32"), "sum32", n, r);
    s64 = ops::AllReduce(g, ops::Placeholder(g, DType::kFloat64, {-1}, "x64"), "sum64", n, r);
  }
};

// Rank r's contribution to round k: element i.
double Value(int r, int k, int64_t i) { return std::sin(0.001 * i + 0.7 * r + 0.3 * k) * (r + 1) + 0.25 * k; }

Tensor Contribution(DType dt, int r, int k, int64_t size) {
  Tensor t(dt, {size});
  for (int64_t i = 0; i < size; ++i) {
    if (dt == DType::kFloat32) t.data<float>()[i] = static_cast<float>(Value(r, k, i));
    else t.data<double>()[i] = Value(r, k, i);
  }
  return t;
}

// The ranks' workers and sessions on a cluster.
struct Ranks {
  std::vector<std::unique_ptr<Rank>> ranks;
  std::vector<std::unique_ptr<ClusterSession>> sessions;

  Status Connect(const examples::LocalCluster& c, int n, int tasks = 0, bool elastic = true) {
    ClusterOptions o;
    o.address = c.addresses()[0];
    o.tls_dir = c.tls_dir();
    o.tasks = tasks;
    o.elastic = elastic;
    for (int r = 0; r < n; ++r) {
      ranks.push_back(std::make_unique<Rank>(r, n));
      auto s = ClusterSession::Connect(ranks.back()->g, o);
      if (!s.ok()) return s.status();
      sessions.push_back(std::move(*s));
    }
    return Status::OK();
  }
  // The node that runs rank r.
  std::string NodeOf(int r) const { return sessions[r]->tasks()[r]; }

  // Every rank runs its AllReduce of dtype dt once, concurrently, with
  // inputs[r]; the results (or errors) by rank.
  std::vector<Result<Tensor>> Round(DType dt, const std::vector<Tensor>& inputs) {
    const int n = static_cast<int>(ranks.size());
    std::vector<Result<Tensor>> out(n, Status());
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        const bool f32 = dt == DType::kFloat32;
        auto got = sessions[r]->Run({{f32 ? "x32" : "x64", inputs[r]}},
                                    std::vector<Output>{f32 ? ranks[r]->s32 : ranks[r]->s64});
        if (got.ok()) out[r] = (*got)[0];
        else out[r] = got.status();
      });
    for (auto& t : threads) t.join();
    return out;
  }
};

// Largest |got - reference| / (1 + |reference|), where reference sums the
// inputs in double.
double MaxError(const Tensor& got, const std::vector<Tensor>& inputs) {
  auto at = [](const Tensor& t, int64_t i) {
    return t.dtype() == DType::kFloat32 ? double{t.data<float>()[i]} : t.data<double>()[i];
  };
  double worst = 0;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    double ref = 0;
    for (const Tensor& t : inputs) ref += at(t, i);
    worst = std::max(worst, std::abs(at(got, i) - ref) / (1 + std::abs(ref)));
  }
  return worst;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

// Runs `rounds` generations of every size and dtype; each rank gets the
// reference sum, and every rank the same bits.
void CheckSums(Ranks& rs, int rounds) {
  const int n = static_cast<int>(rs.ranks.size());
  int k = 0;
  for (int round = 0; round < rounds; ++round) {
    // 786437 floats: chunks of whole 1 MiB pieces and a ragged last one.
    for (int64_t size : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{1} << 20, int64_t{786437}}) {
      for (DType dt : {DType::kFloat32, DType::kFloat64}) {
        std::vector<Tensor> in;
        for (int r = 0; r < n; ++r) in.push_back(Contribution(dt, r, k, size));
        auto out = rs.Round(dt, in);
        INFO("n " << n << " size " << size << " " << DTypeName(dt) << " round " << round);
        for (int r = 0; r < n; ++r) {
          INFO("rank " << r << ": " << out[r].status().ToString());
          REQUIRE(out[r].ok());
          REQUIRE(out[r]->num_elements() == size);
          REQUIRE(SameBytes(*out[r], *out[0]));
        }
        const double err = MaxError(*out[0], in);
        INFO("max relative error " << err);
        REQUIRE(err < (dt == DType::kFloat32 ? 2.5e-7 * n : 1e-15 * n));
        // The inputs are untouched (the ring reduces into a copy).
        REQUIRE(SameBytes(in[0], Contribution(dt, 0, k, size)));
        ++k;
      }
    }
  }
}

}  // namespace

TEST_CASE("Cluster all-reduce: 2 and 3 node processes sum like a double-precision reference",
          "[cluster][allreduce]") {
  for (int n : {2, 3}) {
    examples::LocalCluster cluster;
    REQUIRE(cluster.Start(n, 120).ok());
    Ranks rs;
    REQUIRE(rs.Connect(cluster, n).ok());
    std::set<std::string> nodes;
    for (int r = 0; r < n; ++r) nodes.insert(rs.NodeOf(r));
    REQUIRE(static_cast<int>(nodes.size()) == n);  // every rank in its own process
    CheckSums(rs, 2);
  }
}

TEST_CASE("Cluster all-reduce: ranks sharing a node and ranks on another reduce together",
          "[cluster][allreduce]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  Ranks rs;
  REQUIRE(rs.Connect(cluster, 3, /*tasks=*/3).ok());
  // Tasks 0 and 2 share a node, task 1 is on the other.
  REQUIRE(rs.NodeOf(0) == rs.NodeOf(2));
  REQUIRE(rs.NodeOf(0) != rs.NodeOf(1));
  CheckSums(rs, 1);
}

TEST_CASE("Cluster all-reduce: ranks disagreeing on the length fail by group name, then go on",
          "[cluster][allreduce]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  Ranks rs;
  REQUIRE(rs.Connect(cluster, 2).ok());
  auto bad = rs.Round(DType::kFloat32, {Contribution(DType::kFloat32, 0, 0, 7), Contribution(DType::kFloat32, 1, 0, 8)});
  for (auto& r : bad) {
    REQUIRE(!r.ok());
    INFO(r.status().ToString());
    REQUIRE(r.status().code() == Code::kInvalidArgument);
    REQUIRE(r.status().message().find("all-reduce group 'sum32'") != std::string::npos);
  }
  // The next generation is fine.
  std::vector<Tensor> in = {Contribution(DType::kFloat32, 0, 1, 9), Contribution(DType::kFloat32, 1, 1, 9)};
  auto good = rs.Round(DType::kFloat32, in);
  for (auto& r : good) REQUIRE(r.ok());
  REQUIRE(MaxError(*good[0], in) < 3e-7);
}

TEST_CASE("Cluster all-reduce: a node killed or hung mid-reduction fails the others' steps naming it",
          "[cluster][allreduce]") {
  for (int sig : {SIGKILL, SIGSTOP}) {
    INFO((sig == SIGKILL ? "killed" : "hung"));
    examples::LocalCluster cluster;
    REQUIRE(cluster.Start(3, 120).ok());
    Ranks rs;
    REQUIRE(rs.Connect(cluster, 3, 0, /*elastic=*/false).ok());
    std::vector<Tensor> in;
    for (int r = 0; r < 3; ++r) in.push_back(Contribution(DType::kFloat32, r, 0, 1000));
    for (auto& r : rs.Round(DType::kFloat32, in)) REQUIRE(r.ok());

    // Ranks 0 and 1 start the next reduction; rank 2's node dies (or hangs) instead.
    const std::string victim = rs.NodeOf(2);
    int victim_index = -1;
    for (int i = 0; i < 3; ++i)
      if (cluster.addresses()[i] == victim) victim_index = i;
    REQUIRE(victim_index >= 0);
    std::vector<Result<std::vector<Tensor>>> out(2, Status());
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        out[r] = rs.sessions[r]->Run({{"x32", in[r]}}, std::vector<Output>{rs.ranks[r]->s32});
      });
    // Whether the failure lands before or after their contributions, they
    // fail: a deliberate delay that aims the failure at the reduction in
    // progress, not a wait for a condition.
    testing::PauseFor(300ms);
    const auto failed = std::chrono::steady_clock::now();
    if (sig == SIGKILL) cluster.Kill(victim_index);
    else ::kill(cluster.pid(victim_index), SIGSTOP);
    for (auto& t : threads) t.join();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - failed).count();
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << ": " << out[r].status().ToString());
      REQUIRE(!out[r].ok());
      REQUIRE(out[r].status().message().find(victim) != std::string::npos);
      REQUIRE(out[r].status().message().find("all-reduce group 'sum32'") != std::string::npos);
    }
    REQUIRE(secs < 5.0);  // heartbeats find a hung peer in about a second
    // Later reductions of the group fail at once (rank 2's node is gone) instead of waiting.
    auto again = rs.sessions[0]->Run({{"x32", in[0]}}, std::vector<Output>{rs.ranks[0]->s32});
    REQUIRE(!again.ok());
    REQUIRE(again.status().message().find(victim) != std::string::npos);
  }
}

TEST_CASE("Cluster all-reduce: stopping a node fails its peers' and its own waiting reductions, no hang",
          "[cluster][allreduce]") {
  NodeOptions no;
  no.tls_dir = sf::testing::TestTlsDir();
  no.etcd = sf::testing::TestEtcd();
  no.lease_ttl_s = 1;
  no.replicas = 1;  // no backup takes over: the reductions fail
  auto n0 = ClusterNode::Start(no);
  REQUIRE(n0.ok());
  auto n1 = ClusterNode::Start(no);
  REQUIRE(n1.ok());
  const std::string a0 = (*n0)->address(), a1 = (*n1)->address();
  REQUIRE(testing::WaitFor([&] { return SlotsSpread(no); }, 20s));
  Ranks rs;
  ClusterOptions o;
  o.address = a0;
  o.tls_dir = no.tls_dir;
  o.elastic = false;
  for (int r = 0; r < 2; ++r) {
    rs.ranks.push_back(std::make_unique<Rank>(r, 2));
    auto s = ClusterSession::Connect(rs.ranks.back()->g, o);
    REQUIRE(s.ok());
    rs.sessions.push_back(std::move(*s));
  }
  REQUIRE(rs.NodeOf(0) == a0);
  REQUIRE(rs.NodeOf(1) == a1);
  std::vector<Tensor> in = {Contribution(DType::kFloat32, 0, 0, 100), Contribution(DType::kFloat32, 1, 0, 100)};
  for (auto& r : rs.Round(DType::kFloat32, in)) REQUIRE(r.ok());

  // Rank 0 waits for rank 1's node, which stops.
  Result<std::vector<Tensor>> waiting = Status();
  std::thread t([&] { waiting = rs.sessions[0]->Run({{"x32", in[0]}}, std::vector<Output>{rs.ranks[0]->s32}); });
  // Gives rank 0 time to start waiting: a deliberate delay that aims the stop
  // at a waiting reduction (nothing exposes one to wait on).
  testing::PauseFor(200ms);
  const auto t0 = std::chrono::steady_clock::now();
  (*n1)->Stop();
  t.join();
  REQUIRE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
  INFO(waiting.status().ToString());
  REQUIRE(!waiting.ok());
  REQUIRE(waiting.status().message().find("all-reduce group 'sum32': node " + a1) != std::string::npos);

  // Rank 0 of "sum64" waits for a rank no node has announced; its own node
  // stopping ends the wait.
  std::thread t2([&] {
    waiting = rs.sessions[0]->Run({{"x64", Contribution(DType::kFloat64, 0, 0, 5)}}, std::vector<Output>{rs.ranks[0]->s64});
  });
  // The same: aims the stop at the waiting reduction.
  testing::PauseFor(200ms);
  const auto t1 = std::chrono::steady_clock::now();
  (*n0)->Stop();
  t2.join();
  REQUIRE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() < 5.0);
  INFO(waiting.status().ToString());
  REQUIRE(!waiting.ok());
}

TEST_CASE("Cluster all-reduce: a peer's chunk of the wrong length fails the reduction by name, then it goes on",
          "[cluster][allreduce]") {
  NodeOptions no;
  no.tls_dir = sf::testing::TestTlsDir();
  no.etcd = sf::testing::TestEtcd();
  no.lease_ttl_s = 1;
  auto n0 = ClusterNode::Start(no);
  REQUIRE(n0.ok());
  auto n1 = ClusterNode::Start(no);
  REQUIRE(n1.ok());
  REQUIRE(testing::WaitFor([&] { return SlotsSpread(no); }, 20s));
  Ranks rs;
  ClusterOptions o;
  o.address = (*n0)->address();
  o.tls_dir = no.tls_dir;
  for (int r = 0; r < 2; ++r) {
    rs.ranks.push_back(std::make_unique<Rank>(r, 2));
    auto s = ClusterSession::Connect(rs.ranks.back()->g, o);
    REQUIRE(s.ok());
    rs.sessions.push_back(std::move(*s));
  }
  // The ranks on the two nodes (which holds which is the shard map's choice).
  const std::string rank1_node = rs.NodeOf(1);
  REQUIRE(rank1_node != rs.NodeOf(0));
  REQUIRE((rank1_node == (*n0)->address() || rank1_node == (*n1)->address()));
  std::vector<Tensor> in = {Contribution(DType::kFloat32, 0, 0, 100), Contribution(DType::kFloat32, 1, 0, 100)};
  for (auto& r : rs.Round(DType::kFloat32, in)) REQUIRE(r.ok());

  // Rank 1 starts generation 1 and waits for rank 0's first chunk (50
  // elements); an authenticated node sends it 3 instead.
  Result<std::vector<Tensor>> r1 = Status();
  std::thread t([&] { r1 = rs.sessions[1]->Run({{"x32", in[1]}}, std::vector<Output>{rs.ranks[1]->s32}); });
  std::unique_ptr<net::Endpoint> tr;
  auto c = testing::ConnectAs(net::Role::kNode, no.tls_dir, rank1_node, &tr);
  REQUIRE(c.ok());
  net::CollectiveChunk bad;
  bad.group_key = "sum32";
  bad.group_size = 2;
  bad.generation = 1;
  bad.from_rank = 0;
  bad.step = 0;
  bad.total = 100;
  bad.chunk = Contribution(DType::kFloat32, 0, 0, 3);
  REQUIRE((*c)->Send(net::Message{0, bad}).ok());
  t.join();
  INFO(r1.status().ToString());
  REQUIRE(!r1.ok());
  REQUIRE(r1.status().code() == Code::kInvalidArgument);
  REQUIRE(r1.status().message().find("all-reduce group 'sum32': rank 1 got a chunk of 3 float32 elements at step 0 "
                                      "where 50 float32 belong") != std::string::npos);
  // Rank 0's generation 1 fails too (the error comes round the ring) ...
  auto r0 = rs.sessions[0]->Run({{"x32", in[0]}}, std::vector<Output>{rs.ranks[0]->s32});
  REQUIRE(!r0.ok());
  REQUIRE(r0.status().message().find("got a chunk of 3 float32") != std::string::npos);
  // ... and generation 2 sums correctly.
  tr->Shutdown();
  auto good = rs.Round(DType::kFloat32, in);
  for (auto& r : good) REQUIRE(r.ok());
  REQUIRE(MaxError(*good[0], in) < 3e-7);
}

TEST_CASE("Cluster all-reduce: groups a peer announces are bounded; a real group beyond the bound fails by name",
          "[cluster][allreduce][hostile]") {
  NodeOptions no;
  no.tls_dir = sf::testing::TestTlsDir();
  auto n0 = ClusterNode::Start(no);
  REQUIRE(n0.ok());
  // An authenticated node announces 4096 groups it never uses.
  std::unique_ptr<net::Endpoint> e;
  auto c = testing::ConnectAs(net::Role::kNode, no.tls_dir, (*n0)->address(), &e);
  REQUIRE(c.ok());
  for (int i = 0; i < 4096; ++i)
    REQUIRE((*c)->Send(net::Message{0, testing::Announcement("ghost" + std::to_string(i), 2, 1, "127.0.0.1:1")}).ok());
  REQUIRE(net::Call(*c, net::ListMembers{}, 30000).ok());  // all handled by now
  // A real one-rank group on the node is refused, naming the bound.
  Graph g;
  Output s;
  {
    auto d = g.DeviceScope("/job:worker/task:0");
    s = ops::AllReduce(g, ops::Placeholder(g, DType::kFloat32, {-1}, "x"), "real", 1, 0);
  }
  ClusterOptions o;
  o.address = (*n0)->address();
  o.tls_dir = no.tls_dir;
  auto sess = ClusterSession::Connect(g, o);
  REQUIRE(sess.ok());
  // The announcements were posted to the node's hub before the ask above
  // was answered, so before this contribution.
  auto r = (*sess)->Run({{"x", Contribution(DType::kFloat32, 0, 0, 10)}}, std::vector<Output>{s});
  REQUIRE(!r.ok());
  const Status last = r.status();
  INFO(last.ToString());
  CHECK(last.code() == Code::kResourceExhausted);
  CHECK(last.message().find("all-reduce group 'real'") != std::string::npos);
  CHECK(last.message().find("4096 groups") != std::string::npos);
}

TEST_CASE("Cluster all-reduce: a node's hub never waits on a dial to a peer that does not answer",
          "[cluster][allreduce][hostile]") {
  NodeOptions no;
  no.tls_dir = sf::testing::TestTlsDir();
  auto n0 = ClusterNode::Start(no);
  REQUIRE(n0.ok());
  // Three addresses that accept connections and never answer a TLS hello:
  // a dial to each takes the whole connect timeout.
  std::vector<int> holes;
  std::vector<std::string> hole_addrs(3);
  for (int i = 0; i < 3; ++i) {
    holes.push_back(testing::RawListen(&hole_addrs[i]));
    REQUIRE(holes.back() >= 0);
  }
  // An authenticated node says rank 1 of groups bh0..bh2 runs there.
  std::unique_ptr<net::Endpoint> e;
  auto c = testing::ConnectAs(net::Role::kNode, no.tls_dir, (*n0)->address(), &e);
  REQUIRE(c.ok());
  for (int i = 0; i < 3; ++i)
    REQUIRE((*c)->Send(net::Message{0, testing::Announcement("bh" + std::to_string(i), 2, 1, hole_addrs[i])}).ok());
  REQUIRE(net::Call(*c, net::ListMembers{}, 30000).ok());
  ClusterOptions o;
  o.address = (*n0)->address();
  o.tls_dir = no.tls_dir;
  // Rank 0 of each contributes here: its first piece is for the silent peer.
  std::vector<std::unique_ptr<Graph>> graphs;
  std::vector<std::unique_ptr<ClusterSession>> stuck;
  std::vector<std::thread> runs;
  std::vector<Status> results(3);
  for (int i = 0; i < 3; ++i) {
    graphs.push_back(std::make_unique<Graph>());
    Output s;
    {
      auto d = graphs.back()->DeviceScope("/job:worker/task:0");
      s = ops::AllReduce(*graphs.back(), ops::Placeholder(*graphs.back(), DType::kFloat32, {-1}, "x"),
                         "bh" + std::to_string(i), 2, 0);
    }
    auto sess = ClusterSession::Connect(*graphs.back(), o);
    REQUIRE(sess.ok());
    stuck.push_back(std::move(*sess));
    ClusterSession* p = stuck.back().get();
    runs.emplace_back([p, s, &results, i] {
      results[i] = p->Run({{"x", Contribution(DType::kFloat32, 0, 0, 10)}}, std::vector<Output>{s}).status();
    });
  }
  // Meanwhile a one-rank group on the same node is served at once.
  Graph g;
  Output solo;
  {
    auto d = g.DeviceScope("/job:worker/task:0");
    solo = ops::AllReduce(g, ops::Placeholder(g, DType::kFloat32, {-1}, "x"), "solo", 1, 0);
  }
  auto sess = ClusterSession::Connect(g, o);
  REQUIRE(sess.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = (*sess)->Run({{"x", Contribution(DType::kFloat32, 0, 0, 10)}}, std::vector<Output>{solo});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.status().ToString() << " after " << secs << " s");
  REQUIRE(r.ok());
  CHECK(secs < 1.5);  // three dials in the hub would take 3 x 2 s
  // The silent peers are found down and their groups fail by name.
  for (auto& t : runs) t.join();
  for (int i = 0; i < 3; ++i) {
    INFO(results[i].ToString());
    CHECK(results[i].code() == Code::kUnavailable);
    CHECK(results[i].message().find(hole_addrs[i]) != std::string::npos);
  }
  for (int fd : holes) ::close(fd);
}

TEST_CASE("Cluster: a node dials no address a peer announces that is not a member", "[cluster][allreduce][hostile]") {
  NodeOptions no;
  no.tls_dir = sf::testing::TestTlsDir();
  auto n0 = ClusterNode::Start(no);
  REQUIRE(n0.ok());
  // Accepts connections and never answers a TLS hello: a dial there would
  // hold the node's dialer for the whole connect timeout (2 s).
  std::string hole_addr;
  const int hole = testing::RawListen(&hole_addr);
  REQUIRE(hole >= 0);
  std::unique_ptr<net::Endpoint> e;
  auto c = testing::ConnectAs(net::Role::kNode, no.tls_dir, (*n0)->address(), &e);
  REQUIRE(c.ok());
  ClusterOptions o;
  o.address = (*n0)->address();
  o.tls_dir = no.tls_dir;
  // Rank 0 of a group whose rank 1 is said to run at the hole, which no
  // etcd lists: refused without a dial. Returns the run's status and seconds.
  auto run_group = [&](const std::string& key) {
    REQUIRE((*c)->Send(net::Message{0, testing::Announcement(key, 2, 1, hole_addr)}).ok());
    REQUIRE(net::Call(*c, net::ListMembers{}, 30000).ok());
    Graph g;
    Output s;
    {
      auto d = g.DeviceScope("/job:worker/task:0");
      s = ops::AllReduce(g, ops::Placeholder(g, DType::kFloat32, {-1}, "x"), key, 2, 0);
    }
    auto sess = ClusterSession::Connect(g, o);
    REQUIRE(sess.ok());
    const auto t0 = std::chrono::steady_clock::now();
    Status st = (*sess)->Run({{"x", Contribution(DType::kFloat32, 0, 0, 10)}}, std::vector<Output>{s}).status();
    return std::make_pair(st, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  for (const char* key : {"member_a", "member_b"}) {
    auto [st, secs] = run_group(key);
    INFO(st.ToString() << " after " << secs << " s");
    CHECK(st.code() == Code::kUnavailable);
    CHECK(st.message().find(hole_addr) != std::string::npos);
    CHECK(st.message().find("dials only members") != std::string::npos);
    CHECK(secs < 1.0);  // a dial would take 2 s
  }
  // Nothing connected to the hole: its backlog is empty.
  ::fcntl(hole, F_SETFL, O_NONBLOCK);
  const int accepted = ::accept(hole, nullptr, nullptr);
  CHECK(accepted < 0);
  if (accepted >= 0) ::close(accepted);
  ::close(hole);
}
