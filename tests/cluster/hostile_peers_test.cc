// Node processes against hostile or broken peers: silent connections past
// the node's descriptor limit, an oversized and trickled handshake, and a
// session's credential trying to change the membership. Each test is
// bounded in time and checks the node still serves afterwards.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/local_cluster.h"
#include "graph/partition.h"
#include "net/peer_rpc.h"
#include "shardflow/checkpoint_ops.h"
#include "shardflow/cluster.h"
#include "shardflow/graph_io.h"
#include "shardflow/ops.h"
#include "shardflow/queue_ops.h"
#include "tests/support/neg_partition.h"
#include "tests/support/raw_socket.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;

namespace {

using testing::RawConnect;

// A one-op graph on the first task; its step proves the node serves.
struct Probe {
  Graph g;
  Output y;
  Probe() {
    auto s = g.DeviceScope("/job:worker/task:0");
    y = ops::Mul(g, ops::Const(g, Tensor::FromVector<float>({1, 2}, {2})), ops::Const(g, Tensor::FromVector<float>({3, 4}, {2})));
  }
  Status Run(const examples::LocalCluster& c) {
    ClusterOptions o;
    o.address = c.addresses()[0];
    o.tls_dir = c.tls_dir();
    o.request_timeout_ms = 20000;
    auto s = ClusterSession::Connect(g, o);
    if (!s.ok()) return s.status();
    auto r = (*s)->Run({}, std::vector<Output>{y});
    if (!r.ok()) return r.status();
    return (*r)[0].ToVector<float>() == std::vector<float>{3, 8} ? Status::OK() : Internal("wrong result");
  }
};

// An endpoint holding the cluster's credential for role (fails the test otherwise).
Result<std::unique_ptr<net::Endpoint>> Peer(const examples::LocalCluster& cluster, net::Role role) {
  net::EndpointOptions o;
  o.role = role;
  o.tls_dir = cluster.tls_dir();
  o.log = false;
  auto e = net::Endpoint::Create(o, nullptr, nullptr);
  REQUIRE(e.ok());
  return e;
}

// The members the node at `at` lists (none when it cannot be asked).
std::vector<MemberInfo> MembersAt(const examples::LocalCluster& cluster, const std::string& at) {
  auto m = ListClusterMembers(at, cluster.tls_dir());
  return m.ok() ? *m : std::vector<MemberInfo>{};
}

// The node's resident memory in KiB (0 when unknown).
int64_t RssKib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return 0;
}

// A zero-filled float32 tensor of 16 MiB.
Tensor SixteenMib() {
  Tensor big(DType::kFloat32, {int64_t{4} << 20});
  std::memset(big.raw_data(), 0, big.bytes());
  return big;
}

// Sends 80 copies of big (1.25 GiB) for session `session`'s steps first_step,
// first_step + 1, ..., in rounds of 10 (160 MiB), each round waited for by an
// ask behind it, so little is in flight at once.
void SendInRounds(const net::ConnectionPtr& c, const Tensor& big, uint64_t session, int64_t first_step) {
  for (int round = 0; round < 8; ++round) {
    for (int i = 0; i < 10; ++i) {
      net::SendTensor t{first_step + round * 10 + i, "edge", "", 0, false, big};
      t.session_id = session;
      REQUIRE(c->Send(net::Message{0, t}).ok());
    }
    REQUIRE(net::Call(c, net::ListMembers{}, 120000).ok());
  }
}

}  // namespace

TEST_CASE("Hostile: silent connections past the descriptor limit keep no real peer out", "[cluster][hostile]") {
  examples::LocalCluster cluster;
  cluster.SetNodeArgs({"--max-open-files", "64"});
  REQUIRE(cluster.Start(1, 120).ok());
  // From another address than the probe's (one address holds at most half
  // the node's handshakes), each a byte and then silence (one that sends
  // nothing is not even accepted: TCP_DEFER_ACCEPT).
  std::vector<int> silent;
  for (int i = 0; i < 150; ++i) {
    const int fd = RawConnect(cluster.addresses()[0], "127.0.0.2");
    if (fd >= 0 && ::write(fd, "\x16", 1) == 1) silent.push_back(fd);
  }
  CHECK(silent.size() >= 64);  // more than the node has descriptors for
  Probe p;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = p.Run(cluster);
  INFO(s.ToString());
  CHECK(s.ok());
  CHECK(std::chrono::steady_clock::now() - t0 < 30s);
  for (int fd : silent) ::close(fd);
  // And after they leave.
  Status again = p.Run(cluster);
  INFO(again.ToString());
  CHECK(again.ok());
}

TEST_CASE("Hostile: an oversized, trickled handshake is dropped and costs no memory", "[cluster][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  const int64_t before = RssKib(cluster.pid(0));
  std::vector<int> fds;
  for (int i = 0; i < 32; ++i) {
    const int fd = RawConnect(cluster.addresses()[0]);
    REQUIRE(fd >= 0);
    // A TLS record header claiming the largest record, and a Cap'n Proto
    // segment table claiming 4 GiB: nothing of it may be allocated.
    const uint8_t record[] = {0x16, 0x03, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    REQUIRE(::write(fd, record, sizeof record) == sizeof record);
    fds.push_back(fd);
  }
  // Trickle a byte a second into each: the handshake deadline (2 s) ends them.
  const auto t0 = std::chrono::steady_clock::now();
  size_t closed = 0;
  while (closed < fds.size() && std::chrono::steady_clock::now() - t0 < 15s) {
    closed = 0;
    for (int fd : fds) {
      char b = 0;
      if (::send(fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) ++closed;
    }
    testing::PauseFor(200ms);  // the trickle's pace is the point
  }
  CHECK(closed == fds.size());
  const int64_t after = RssKib(cluster.pid(0));
  INFO("RSS before " << before << " KiB, after " << after << " KiB");
  CHECK(after - before < 64 * 1024);
  for (int fd : fds) ::close(fd);
  Probe p;
  CHECK(p.Run(cluster).ok());
}

TEST_CASE("Hostile: a session's credential cannot change the membership", "[cluster][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  auto e = Peer(cluster, net::Role::kSession);
  auto c = (*e)->Connect(cluster.addresses()[0]);
  REQUIRE(c.ok());
  // No method changes the membership (etcd's): a view is no request, and a
  // node sends views to sessions, never takes one (a hand-made call is
  // dropped: tests/net/peer_services_test.cc).
  net::Membership add;
  add.members.push_back({"ghost", "127.0.0.1:9"});
  auto r = net::detail::CallBody(*c, add, 10000);
  CHECK(r.status().code() == Code::kInvalidArgument);
  net::Membership drain;
  drain.leaving.push_back({"", cluster.addresses()[0]});
  CHECK((*c)->Send(net::Message{0, drain}).code() == Code::kPermissionDenied);
  // The leader's orders: the node gave the session no placement capability.
  auto move = net::Call(*c, net::MoveSlot{0, "127.0.0.1:9", 1 << 30}, 10000);
  CHECK(move.status().code() == Code::kPermissionDenied);
  CHECK(move.status().message().find("placement") != std::string::npos);
  // The membership is untouched: the one node, not draining.
  auto m = net::Call(*c, net::ListMembers{}, 10000);
  REQUIRE(m.ok());
  auto& mem = (*m);
  CHECK(mem.members.size() == 1);
  CHECK(mem.leaving.empty());
  Probe p;
  CHECK(p.Run(cluster).ok());
}

TEST_CASE("Membership: a node resumed after SIGSTOP rejoins as a new incarnation", "[cluster][membership]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  const std::string a0 = cluster.addresses()[0], a1 = cluster.addresses()[1];
  auto members = [&](const std::string& at) { return MembersAt(cluster, at); };
  auto incarnation_of = [&](const std::vector<MemberInfo>& ms, const std::string& addr) -> uint64_t {
    for (const auto& m : ms)
      if (m.address == addr) return m.incarnation;
    return 0;
  };
  REQUIRE(testing::WaitFor([&] { return members(a0).size() == 2; }, 20s));
  const auto before = members(a0);
  CHECK(before[0].address == a0);
  CHECK(before[0].state == "alive");
  const uint64_t inc1 = incarnation_of(before, a1);
  CHECK(inc1 > 0);
  ::kill(cluster.pid(1), SIGSTOP);
  const bool dropped = testing::WaitFor([&] { return members(a0).size() == 1; }, 10s);
  ::kill(cluster.pid(1), SIGCONT);
  REQUIRE(dropped);
  // Resumed, it finds every peer gone and rejoins through its seed.
  REQUIRE(testing::WaitFor([&] { return members(a0).size() == 2; }, 30s));
  CHECK(incarnation_of(members(a0), a1) > inc1);
  REQUIRE(testing::WaitFor([&] { return members(a1).size() == 2; }, 30s));
  Probe p;
  CHECK(p.Run(cluster).ok());
}

TEST_CASE("Membership: a node resumed after it was replaced leaves instead of rejoining", "[cluster][membership]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  const std::string a0 = cluster.addresses()[0];
  auto members = [&] { return MembersAt(cluster, a0); };
  cluster.SetNodeArgs({"--name", "worker-7"});
  auto a1 = cluster.AddNode(120);
  REQUIRE(a1.ok());
  REQUIRE(testing::WaitFor([&] { return members().size() == 2; }, 20s));
  ::kill(cluster.pid(1), SIGSTOP);
  const bool dropped = testing::WaitFor([&] { return members().size() == 1; }, 10s);
  // Its replacement: a new node of the same name, at another address.
  auto a2 = dropped ? cluster.AddNode(120) : Result<std::string>(Internal("not dropped"));
  const bool replaced = a2.ok() && testing::WaitFor([&] { return members().size() == 2; }, 20s);
  ::kill(cluster.pid(1), SIGCONT);
  REQUIRE(dropped);
  REQUIRE(replaced);
  // Resumed, the old one finds worker-7 elsewhere and exits by itself.
  CHECK(cluster.WaitExit(1, 30000));
  CHECK(testing::WaitFor([&] { return members().size() == 2; }, 10s));
  const auto now = members();
  REQUIRE(now.size() == 2);
  CHECK(now[1].address == *a2);
  CHECK(now[1].name == "worker-7");
}

TEST_CASE("Membership: with etcd, no peer can add, end or replace a member by messages", "[cluster][membership]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  const std::string a0 = cluster.addresses()[0], a1 = cluster.addresses()[1];
  auto listed = [&](const std::string& at) {
    auto m = ListClusterMembers(at, cluster.tls_dir());
    return m.ok() ? *m : std::vector<MemberInfo>{};
  };
  REQUIRE(testing::WaitFor([&] { return listed(a0).size() == 2 && listed(a1).size() == 2; }, 20s));
  const auto before0 = listed(a0), before = listed(a1);
  auto e = Peer(cluster, net::Role::kNode);
  auto c = (*e)->Connect(a1);
  REQUIRE(c.ok());
  // A node credential claiming 100k ghost members and a1 leaving: no method
  // takes it (a view is no request, and nodes take no views), and nothing
  // changes anywhere.
  net::Membership claim;
  claim.leaving.push_back({"", a1, before[0].incarnation});
  for (int i = 0; i < 100'000; ++i)
    claim.members.push_back({"ghost", "127.0.0." + std::to_string(2 + i / 50'000) + ":" + std::to_string(1 + i % 50'000), 1});
  CHECK(net::detail::CallBody(*c, claim, 30000).status().code() == Code::kInvalidArgument);
  CHECK((*c)->Send(net::Message{0, claim}).code() == Code::kPermissionDenied);
  // Each node lists itself first.
  for (const auto& [at, was] : {std::make_pair(a0, before0), std::make_pair(a1, before)}) {
    const auto now = listed(at);
    REQUIRE(now.size() == 2);
    for (size_t i = 0; i < now.size(); ++i) {
      CHECK(now[i].address == was[i].address);
      CHECK(now[i].incarnation == was[i].incarnation);
    }
  }
  // etcd's list is the same, in the same order.
  auto from_etcd = ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir());
  REQUIRE(from_etcd.ok());
  REQUIRE(from_etcd->size() == 2);
  CHECK((*from_etcd)[0].address == a0);
  CHECK((*from_etcd)[1].address == a1);
}

TEST_CASE("Hostile: no peer lists members: a node's are etcd's alone", "[cluster][membership][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  const std::string a0 = cluster.addresses()[0];
  auto listed = [&] {
    std::vector<std::string> out;
    auto m = ListClusterMembers(a0, cluster.tls_dir());
    if (m.ok())
      for (const auto& k : *m) out.push_back(k.address);
    return out;
  };
  // A node credential naming ghosts (nothing listens at the first; the
  // second is a session's endpoint): no method takes a member list.
  auto session = Peer(cluster, net::Role::kSession);
  auto session_port = (*session)->Listen("127.0.0.1", 0);
  REQUIRE(session_port.ok());
  const std::string ghost1 = testing::UnusedAddress();
  const std::string ghost2 = "127.0.0.1:" + std::to_string(*session_port);
  auto e = Peer(cluster, net::Role::kNode);
  auto c = (*e)->Connect(a0);
  REQUIRE(c.ok());
  const net::Membership ghosts{{{"g1", ghost1, 1}, {"g2", ghost2, 1}}};
  CHECK(net::detail::CallBody(*c, ghosts, 20000).status().code() == Code::kInvalidArgument);
  CHECK((*c)->Send(net::Message{0, ghosts}).code() == Code::kPermissionDenied);
  CHECK(listed() == std::vector<std::string>{a0});
  // A real node still joins, through etcd.
  REQUIRE(cluster.AddNode(120).ok());
  CHECK(testing::WaitFor([&] { return listed().size() == 2; }, 20s));
  CHECK(listed()[0] == a0);
  Probe p;
  CHECK(p.Run(cluster).ok());
}

TEST_CASE("Membership: shardflow node members prints one JSON line per member", "[cluster][membership]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  REQUIRE(testing::WaitFor([&] {
    auto m = ListClusterMembers(cluster.addresses()[0], cluster.tls_dir());
    return m.ok() && m->size() == 2;
  }, 20s));
  const std::string cmd = examples::ProgramDir() + "/shardflow node members " + cluster.addresses()[0] +
                          " --tls-dir " + cluster.tls_dir() + " --json";
  std::FILE* f = ::popen(cmd.c_str(), "r");
  REQUIRE(f);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) out += buf;
  CHECK(::pclose(f) == 0);
  INFO(out);
  CHECK(std::count(out.begin(), out.end(), '\n') == 2);
  CHECK(out.find("\"address\": \"" + cluster.addresses()[0] + "\"") != std::string::npos);
  CHECK(out.find("\"address\": \"" + cluster.addresses()[1] + "\"") != std::string::npos);
  CHECK(out.find("\"incarnation\": ") != std::string::npos);
  CHECK(out.find("\"state\": \"alive\"") != std::string::npos);
  CHECK(out.find("\"name\": ") != std::string::npos);
}

TEST_CASE("Membership: shardflow cluster members --etcd prints etcd's list, one JSON line per member", "[cluster][membership]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  REQUIRE(testing::WaitFor([&] {
    auto m = ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir());
    return m.ok() && m->size() == 2;
  }, 20s));
  auto run = [&](const std::string& args, int* rc) {
    const std::string cmd = examples::ProgramDir() + "/shardflow cluster members " + args + " 2>&1";
    std::FILE* f = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    while (f && std::fgets(buf, sizeof buf, f)) out += buf;
    *rc = f ? ::pclose(f) : -1;
    return out;
  };
  int rc = 0;
  const std::string out = run("--etcd " + cluster.etcd_endpoint() + " --tls-dir " + cluster.tls_dir() + " --json", &rc);
  INFO(out);
  CHECK(rc == 0);
  CHECK(std::count(out.begin(), out.end(), '\n') == 2);
  // In the order they joined.
  const size_t first = out.find("\"address\": \"" + cluster.addresses()[0] + "\"");
  const size_t second = out.find("\"address\": \"" + cluster.addresses()[1] + "\"");
  CHECK(first != std::string::npos);
  CHECK(second != std::string::npos);
  CHECK(first < second);
  CHECK(out.find("\"state\": \"alive\"") != std::string::npos);
  // Another cluster's keys in the same etcd are not this credential's to
  // read (etcd's roles are per cluster); a dead etcd is named.
  const std::string other = run("--etcd " + cluster.etcd_endpoint() + " --tls-dir " + cluster.tls_dir() +
                                " --cluster other --json", &rc);
  INFO(other);
  CHECK(rc != 0);
  CHECK(other.find("permission denied") != std::string::npos);
  const std::string dead = run("--etcd 127.0.0.1:1 --tls-dir " + cluster.tls_dir(), &rc);
  CHECK(rc != 0);
  CHECK(dead.find("127.0.0.1:1") != std::string::npos);
}

TEST_CASE("Hostile: a session is given no rendezvous or collectives, so it cannot send tensors or chunks", "[cluster][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  // The node hands a session's certificate no capability for them at hello
  // (tests/net/peer_services_test.cc checks that on the wire): the
  // connection refuses at once, naming the service, and nothing is sent.
  auto e = Peer(cluster, net::Role::kSession);
  auto c = (*e)->Connect(cluster.addresses()[0]);
  REQUIRE(c.ok());
  Tensor t(DType::kFloat32, {int64_t{64} << 10});
  std::memset(t.raw_data(), 0, t.bytes());
  Status s = (*c)->Send(net::Message{0, net::SendTensor{1000000, "edge", "", 0, false, t}});
  CHECK(s.code() == Code::kPermissionDenied);
  CHECK(s.message().find("rendezvous") != std::string::npos);
  s = (*c)->Send(net::Message{0, testing::Announcement("g", 2, 1, "127.0.0.1:1")});
  CHECK(s.code() == Code::kPermissionDenied);
  CHECK(s.message().find("collectives") != std::string::npos);
  // What a session may do still works.
  REQUIRE(net::Call(*c, net::ListMembers{}, 10000).ok());
  Probe p;
  CHECK(p.Run(cluster).ok());
}

TEST_CASE("Hostile: tensors and aborts for steps that never run cost bounded memory", "[cluster][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  const int64_t before = RssKib(cluster.pid(0));
  auto e = Peer(cluster, net::Role::kNode);  // an authenticated member gone rogue
  auto c = (*e)->Connect(cluster.addresses()[0]);
  REQUIRE(c.ok());
  const Tensor big = SixteenMib();
  // Tensors naming a session with no partition on the node are refused as
  // they arrive: 1.25 GiB of them leave nothing behind. Kept for steps to
  // come, as the node keeps a known session's, they would hold 1 GiB.
  SendInRounds(*c, big, 4242, 500000);
  const int64_t after_unknown = RssKib(cluster.pid(0));
  INFO("RSS before " << before << " KiB, after tensors for an unknown session " << after_unknown << " KiB");
  CHECK(after_unknown - before < 512 * 1024);
  // A session the node knows (registered by this peer) whose steps never
  // run: 6000 steps (more than the node keeps), and 1.25 GiB of tensors for
  // them (more than it holds for such steps).
  const testing::NegPartition neg;
  auto reg = net::Call(*c, neg.Registration(77, 1, cluster.addresses()[0]), 10000);
  REQUIRE(reg.ok());
  REQUIRE(reg->status.ok());
  for (int i = 0; i < 80; ++i) {
    net::SendTensor t{1000000 + i, "edge", "", 0, false, big};
    t.session_id = 77;
    REQUIRE((*c)->Send(net::Message{0, t}).ok());
  }
  for (int i = 0; i < 6000; ++i) {
    REQUIRE((*c)->Send(net::Message{0, net::AbortStep{2000000 + i, Aborted("x"), 0}}).ok());
    net::SendTensor t{3000000 + i, "e", "", 0, true, Tensor()};
    t.session_id = 77;
    REQUIRE((*c)->Send(net::Message{0, t}).ok());
  }
  // Everything sent has been handled once an ask behind it is answered.
  auto r = net::Call(*c, net::ListMembers{}, 120000);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  const int64_t after = RssKib(cluster.pid(0));
  INFO("RSS before " << before << " KiB, after " << after << " KiB");
  // The node keeps at most 1 GiB of such tensors; its allocator keeps
  // freed buffers warm, so RSS shows the peak in flight as well, and is
  // only checked against what was sent plus that.
  CHECK(after - before < 2560 * 1024);
  Probe p;
  CHECK(p.Run(cluster).ok());
}

TEST_CASE("Hostile: tensors for a step its session ended are refused, not held", "[cluster][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  auto e = Peer(cluster, net::Role::kNode);
  auto c = (*e)->Connect(cluster.addresses()[0]);
  REQUIRE(c.ok());
  const testing::NegPartition neg;
  auto reg = net::Call(*c, neg.Registration(77, 1, cluster.addresses()[0]), 10000);
  REQUIRE(reg.ok());
  REQUIRE(reg->status.ok());
  REQUIRE(net::Call(*c, net::ListMembers{}, 10000).ok());
  const int64_t before = RssKib(cluster.pid(0));
  // The session (this peer registered it) ends 80 steps, then 1.25 GiB of
  // tensors for them arrive. Held as early steps' tensors, the node would
  // keep 1 GiB of them for a minute.
  for (int i = 0; i < 80; ++i) REQUIRE((*c)->Send(net::Message{0, net::CleanupStep{4000000 + i, 77}}).ok());
  SendInRounds(*c, SixteenMib(), 77, 4000000);
  const int64_t after = RssKib(cluster.pid(0));
  INFO("RSS before " << before << " KiB, after tensors for ended steps " << after << " KiB");
  CHECK(after - before < 512 * 1024);
  Probe p;
  CHECK(p.Run(cluster).ok());
}

TEST_CASE("Hostile: a session's client may hold boundedly many sessions, and only its own", "[cluster][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  const std::string a0 = cluster.addresses()[0];
  const testing::NegPartition neg;
  auto reg = [&](uint64_t session, uint64_t handle) { return neg.Registration(session, handle, a0); };
  auto status_of = [](const Result<net::StatusReply>& r) { return r.status(); };
  auto e = Peer(cluster, net::Role::kSession);
  auto c = (*e)->Connect(a0);
  REQUIRE(c.ok());
  // 256 sessions for one client, then no more.
  for (uint64_t s = 1; s <= 256; ++s) REQUIRE(status_of(net::Call(*c, reg(s, 1), 10000)).ok());
  Status over = status_of(net::Call(*c, reg(257, 1), 10000));
  INFO(over.ToString());
  CHECK(over.code() == Code::kResourceExhausted);
  CHECK(over.message().find("256 sessions") != std::string::npos);
  // Another client can neither register into, run nor close this one's sessions.
  auto e2 = Peer(cluster, net::Role::kSession);
  auto c2 = (*e2)->Connect(a0);
  REQUIRE(c2.ok());
  CHECK(status_of(net::Call(*c2, reg(1, 2), 10000)).code() == Code::kPermissionDenied);
  net::RunPartition rp{1, 1, 7, {Tensor::FromVector(std::vector<float>{1, -2}, {2})}};
  auto theirs = net::Call(*c2, rp, 10000);
  REQUIRE(theirs.ok());
  CHECK((*theirs).status.code() == Code::kNotFound);
  REQUIRE(status_of(net::Call(*c2, net::CloseSession{1}, 10000)).ok());
  auto mine = net::Call(*c, rp, 10000);
  REQUIRE(mine.ok());
  CHECK((*mine).status.ok());
  // Closing one of its own makes room for another.
  REQUIRE(status_of(net::Call(*c, net::CloseSession{1}, 10000)).ok());
  CHECK(status_of(net::Call(*c, reg(257, 1), 10000)).ok());
  Probe p;
  CHECK(p.Run(cluster).ok());
}

TEST_CASE("Hostile: a session's in-graph checkpoints stay under the node's --checkpoint-dir", "[cluster][hostile]") {
  testing::TempDir root("sf_node_ckpt_root");
  testing::TempDir outside("sf_node_ckpt_outside");
  // Each dir a session's graph may name: only a relative one lands, under root.
  auto save = [](const examples::LocalCluster& c, const std::string& dir) -> Status {
    Graph g;
    auto scope = g.DeviceScope("/job:worker/task:0");
    ops::Variable(g, "w", ops::Const(g, Tensor::FromVector<float>({1, 2}, {2})));
    const Operation init = ops::GlobalVariablesInitializer(g);
    Output saved = ops::SaveVariables(g, dir, ops::Const(g, Tensor::Scalar<int64_t>(3)));
    if (!g.status().ok()) return g.status();
    ClusterOptions o;
    o.address = c.addresses()[0];
    o.tls_dir = c.tls_dir();
    auto s = ClusterSession::Connect(g, o);
    if (!s.ok()) return s.status();
    SF_RETURN_IF_ERROR((*s)->Run({}, std::vector<Output>{}, {init}).status());
    return (*s)->Run({}, std::vector<Output>{saved}).status();
  };
  {
    examples::LocalCluster cluster;
    cluster.SetNodeArgs({"--checkpoint-dir", root.path});
    REQUIRE(cluster.Start(1, 120).ok());
    Status ok = save(cluster, "run1/ckpt");
    INFO(ok.ToString());
    REQUIRE(ok.ok());
    CHECK(std::filesystem::exists(root.path + "/run1/ckpt"));
    const std::string absolute = outside.path + "/stolen";
    Status abs = save(cluster, absolute);
    INFO(abs.ToString());
    CHECK(abs.code() == Code::kInvalidArgument);
    CHECK(abs.message().find(absolute) != std::string::npos);
    CHECK(abs.message().find("absolute") != std::string::npos);
    Status up = save(cluster, "run1/../../" + std::filesystem::path(outside.path).filename().string());
    INFO(up.ToString());
    CHECK(up.code() == Code::kInvalidArgument);
    CHECK(up.message().find("'..'") != std::string::npos);
    CHECK(std::filesystem::is_empty(outside.path));
    Probe p;
    CHECK(p.Run(cluster).ok());
  }
  {
    examples::LocalCluster cluster;  // no --checkpoint-dir: in-graph checkpoints are off
    REQUIRE(cluster.Start(1, 120).ok());
    Status off = save(cluster, outside.path + "/x");
    INFO(off.ToString());
    CHECK(off.code() == Code::kFailedPrecondition);
    CHECK(off.message().find("--checkpoint-dir") != std::string::npos);
    CHECK(std::filesystem::is_empty(outside.path));
  }
}

namespace {

// A partition that dequeues one float from the node's queue "wedge" (shared
// node-wide by name), as a session would register it by hand.
struct WedgePartition {
  Graph g;
  Output value;
  std::string bytes;
  WedgePartition() {
    ops::QueueOptions qo;
    qo.shared_name = "wedge";
    Output q = ops::FIFOQueue(g, {DType::kFloat32}, qo, "q");
    value = ops::QueueDequeue(g, q)[0];
    REQUIRE(g.status().ok());
    bytes = GraphToBytes(g).value();
  }
  net::RegisterPartition Registration(uint64_t session, const std::string& node) const {
    net::RegisterPartition r;
    r.session_id = session;
    r.handle = 1;
    r.device = "/job:worker/task:0/device:CPU:0";
    r.tasks = {{"task0", node}};
    r.graph_def = bytes;
    r.fetches = {{g.node(value.node).name, 0}};
    r.targets = {g.node(value.node).name};
    return r;
  }
};

// A cluster session that enqueues `v` into "wedge" on task 0, or dequeues one
// (waiting up to timeout_ms); the value dequeued.
Result<float> WedgeOp(const examples::LocalCluster& c, bool enqueue, float v, int64_t timeout_ms = 0) {
  Graph g;
  auto scope = g.DeviceScope("/job:worker/task:0");
  ops::QueueOptions qo;
  qo.shared_name = "wedge";
  Output q = ops::FIFOQueue(g, {DType::kFloat32}, qo, "q");
  Operation enq = ops::QueueEnqueue(g, q, {ops::Const(g, Tensor::Scalar<float>(v))});
  Output deq = ops::QueueDequeue(g, q, timeout_ms)[0];
  if (!g.status().ok()) return g.status();
  ClusterOptions o;
  o.address = c.addresses()[0];
  o.tls_dir = c.tls_dir();
  SF_ASSIGN_OR_RETURN(auto s, ClusterSession::Connect(g, o));
  if (enqueue) {
    SF_RETURN_IF_ERROR(s->Run({}, std::vector<Output>{}, {enq}).status());
    return v;
  }
  SF_ASSIGN_OR_RETURN(auto out, s->Run({}, std::vector<Output>{deq}));
  return out[0].scalar_as<float>();
}

}  // namespace

TEST_CASE("Hostile: a client that leaves steps waiting on a queue and goes away leaves no waits behind",
          "[cluster][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  const std::string a0 = cluster.addresses()[0];
  const WedgePartition wedge;
  // Before the endpoint, so they outlive its callbacks.
  std::mutex mu;
  std::vector<Result<net::Message>> replies;
  auto e = Peer(cluster, net::Role::kSession);
  auto c = (*e)->Connect(a0);
  REQUIRE(c.ok());
  REQUIRE(net::CallStatus(*c, wedge.Registration(9, a0), 10000).ok());
  constexpr int kSteps = 8;
  for (int i = 0; i < kSteps; ++i)
    (*c)->Request(net::RunPartition{9, 1, 1000 + i, {}}, 60000, [&](Result<net::Message> r) {
      std::lock_guard<std::mutex> l(mu);
      replies.push_back(std::move(r));
    });
  // One element proves the steps wait: one of them takes it.
  REQUIRE(WedgeOp(cluster, true, 1.0f).ok());
  REQUIRE(testing::WaitFor([&] {
    std::lock_guard<std::mutex> l(mu);
    return !replies.empty();
  }, 10s));
  {
    std::lock_guard<std::mutex> l(mu);
    REQUIRE(replies[0].ok());
    auto* done = std::get_if<net::RunPartitionDone>(&replies[0]->body);
    REQUIRE(done);
    REQUIRE(done->status.ok());
    CHECK(done->fetches[0].scalar_as<float>() == 1.0f);
  }
  // The client goes, its other steps still waiting: they must not take the
  // next elements, which a later session enqueues and dequeues itself.
  (*c)->Close();
  REQUIRE(testing::WaitFor([&] {
    std::lock_guard<std::mutex> l(mu);
    return replies.size() == static_cast<size_t>(kSteps);
  }, 10s));
  for (int i = 0; i < 3; ++i) {
    REQUIRE(WedgeOp(cluster, true, 2.0f + i).ok());
    auto got = WedgeOp(cluster, false, 0, 5000);
    INFO(got.status().ToString());
    REQUIRE(got.ok());
    CHECK(*got == 2.0f + i);
  }
}

TEST_CASE("Hostile: one client may have boundedly many partition runs going on a node", "[cluster][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  const std::string a0 = cluster.addresses()[0];
  const WedgePartition wedge;
  std::mutex mu;
  std::vector<Status> refused;  // before the endpoint, so they outlive its callbacks
  auto e = Peer(cluster, net::Role::kSession);
  auto c = (*e)->Connect(a0);
  REQUIRE(c.ok());
  REQUIRE(net::CallStatus(*c, wedge.Registration(5, a0), 10000).ok());
  constexpr int kMax = 1024;  // ClusterNode's kMaxRunningPerClient
  for (int i = 0; i < kMax + 8; ++i)
    (*c)->Request(net::RunPartition{5, 1, 5000 + i, {}}, 60000, [&](Result<net::Message> r) {
      auto* done = r.ok() ? std::get_if<net::RunPartitionDone>(&r->body) : nullptr;
      std::lock_guard<std::mutex> l(mu);
      refused.push_back(done ? done->status : r.status());
    });
  REQUIRE(testing::WaitFor([&] {
    std::lock_guard<std::mutex> l(mu);
    return refused.size() == 8;
  }, 30s));
  {
    std::lock_guard<std::mutex> l(mu);
    for (const Status& s : refused) {
      INFO(s.ToString());
      CHECK(s.code() == Code::kResourceExhausted);
      CHECK(s.message().find("1024 partition runs") != std::string::npos);
    }
  }
  // Another client is not held up by this one's runs.
  Probe p;
  CHECK(p.Run(cluster).ok());
  (*c)->Close();
  REQUIRE(testing::WaitFor([&] {
    std::lock_guard<std::mutex> l(mu);
    return refused.size() == static_cast<size_t>(kMax + 8);
  }, 30s));
}

TEST_CASE("Hostile: another client can neither abort nor end a step running here, whatever session it names",
          "[cluster][hostile]") {
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  const std::string a0 = cluster.addresses()[0];
  // Session 9's partition: -x, x received from task 1 under "edge1".
  Graph g;
  Output x = ops::Recv(g, DType::kFloat32, PartialShape({2}), "edge1", "/job:worker/task:1/device:CPU:0",
                       "/job:worker/task:0/device:CPU:0", "x");
  Output y = ops::Neg(g, x);
  REQUIRE(g.status().ok());
  net::RegisterPartition reg;
  reg.session_id = 9;
  reg.handle = 1;
  reg.device = "/job:worker/task:0/device:CPU:0";
  reg.tasks = {{"task0", a0}, {"task1", ""}};  // task 1 sends here; nothing is sent to it
  reg.graph_def = GraphToBytes(g).value();
  reg.fetches = {{g.node(y.node).name, 0}};
  reg.targets = {g.node(y.node).name};
  std::mutex mu;
  std::optional<Result<net::Message>> reply;  // before the endpoints, so it outlives their callbacks
  auto owner_ep = Peer(cluster, net::Role::kSession);
  auto owner = (*owner_ep)->Connect(a0);
  REQUIRE(owner.ok());
  REQUIRE(net::CallStatus(*owner, reg, 10000).ok());
  constexpr int64_t kStep = 424242;
  (*owner)->Request(net::RunPartition{9, 1, kStep, {}}, 60000, [&](Result<net::Message> r) {
    std::lock_guard<std::mutex> l(mu);
    reply = std::move(r);
  });
  // The run has started once an ask sent behind it is answered.
  REQUIRE(net::Call(*owner, net::ListMembers{}, 10000).ok());
  // Another session's client aborts and ends the step, naming an unknown
  // session and then the owner's.
  auto rogue_ep = Peer(cluster, net::Role::kSession);
  auto rogue = (*rogue_ep)->Connect(a0);
  REQUIRE(rogue.ok());
  for (uint64_t session : {uint64_t{777}, uint64_t{9}}) {
    REQUIRE((*rogue)->Send(net::Message{0, net::AbortStep{kStep, Aborted("rogue abort"), session}}).ok());
    REQUIRE((*rogue)->Send(net::Message{0, net::CleanupStep{kStep, session}}).ok());
  }
  REQUIRE(net::Call(*rogue, net::ListMembers{}, 10000).ok());
  // The tensor the step waits for still arrives (from a node), and the step ends well.
  auto node_ep = Peer(cluster, net::Role::kNode);
  auto node = (*node_ep)->Connect(a0);
  REQUIRE(node.ok());
  net::SendTensor t{kStep, "edge1", "", 0, false, Tensor::FromVector<float>({1, -2}, {2})};
  t.session_id = 9;
  REQUIRE((*node)->Send(net::Message{0, t}).ok());
  REQUIRE(testing::WaitFor([&] {
    std::lock_guard<std::mutex> l(mu);
    return reply.has_value();
  }, 20s));
  std::lock_guard<std::mutex> l(mu);
  REQUIRE(reply->ok());
  auto* done = std::get_if<net::RunPartitionDone>(&(*reply)->body);
  REQUIRE(done);
  INFO(done->status.ToString());
  REQUIRE(done->status.ok());
  CHECK(done->fetches[0].ToVector<float>() == std::vector<float>{-1, 2});
}
