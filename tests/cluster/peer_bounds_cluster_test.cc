// Bounds that fit a node (issue 36, item 5), against `shardflow node`
// processes with a low descriptor limit: a peer that sends 1 MiB calls and
// never reads the replies, 1,023 idle authenticated connections of one
// session credential, and a flood of silent connections from one address.
// During each, a join and a session step from another source address
// (127.0.0.1; the attackers bind 127.0.0.2 and up, all loopback on Linux)
// must succeed. Each test is bounded by deadlines and prints what it
// measured (WARN lines).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/local_cluster.h"
#include "net/peer_rpc.h"
#include "shardflow/cluster.h"
#include "shardflow/ops.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// A field of /proc/PID/status in KiB ("VmRSS", "VmHWM"); 0 when unknown.
int64_t StatusKib(pid_t pid, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return 0;
}

// A one-op step on task 0 through a new session from 127.0.0.1: its time
// in seconds, or the failure.
Result<double> SessionStep(const examples::LocalCluster& c) {
  Graph g;
  Output y;
  {
    auto s = g.DeviceScope("/job:worker/task:0");
    y = ops::Mul(g, ops::Const(g, Tensor::FromVector<float>({1, 2}, {2})),
                 ops::Const(g, Tensor::FromVector<float>({3, 4}, {2})));
  }
  const auto t0 = Clock::now();
  ClusterOptions o;
  o.address = c.addresses()[0];
  o.tls_dir = c.tls_dir();
  o.request_timeout_ms = 20000;
  SF_ASSIGN_OR_RETURN(auto session, ClusterSession::Connect(g, o));
  SF_ASSIGN_OR_RETURN(auto out, session->Run({}, std::vector<Output>{y}));
  if (out[0].ToVector<float>() != std::vector<float>{3, 8}) return Internal("wrong result");
  return Seconds(t0);
}

// A node joining the cluster (a new process, dialing from 127.0.0.1): the
// seconds until every node lists it, or the failure.
Result<double> Join(examples::LocalCluster& c, int members_after) {
  const auto t0 = Clock::now();
  SF_RETURN_IF_ERROR(c.AddNode(120).status());
  SF_RETURN_IF_ERROR(c.WaitMembers(members_after, 60000));
  return Seconds(t0);
}

// A plain TCP socket to `to` ("127.0.0.1:PORT") from local IP `from`,
// blocking; the descriptor or -1.
int DialFrom(const std::string& from, const std::string& to) {
  std::string host;
  uint16_t port = 0;
  if (!net::ParseAddress(to, &host, &port).ok()) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in local{}, remote{};
  local.sin_family = remote.sin_family = AF_INET;
  ::inet_pton(AF_INET, from.c_str(), &local.sin_addr);
  ::inet_pton(AF_INET, host.c_str(), &remote.sin_addr);
  remote.sin_port = htons(port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A TCP relay on 127.0.0.1 to a node, dialing it from 127.0.0.2, that
// passes both ways until Mute(): from then on it never reads the node's
// bytes again (a peer that stops reading), while still passing the
// client's. Closes everything when destroyed.
class MutingRelay {
 public:
  explicit MutingRelay(const std::string& node) : node_(node) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listen_fd_, 16) == 0);
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    address_ = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~MutingRelay() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    {
      std::lock_guard<std::mutex> l(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    acceptor_.join();
    for (auto& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
    ::close(listen_fd_);
  }
  const std::string& address() const { return address_; }
  // Stops reading what the node sends, on every connection from now on.
  void Mute() { muted_ = true; }
  void Unmute() { muted_ = false; }

 private:
  void Accept() {
    while (!stop_) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      const int node = DialFrom("127.0.0.2", node_);
      std::lock_guard<std::mutex> l(mu_);
      fds_.push_back(client);
      if (node < 0) {
        ::shutdown(client, SHUT_RDWR);
        continue;
      }
      fds_.push_back(node);
      pumps_.emplace_back([this, client, node] { Pump(client, node, false); });
      pumps_.emplace_back([this, client, node] { Pump(node, client, true); });
    }
  }
  // Copies from -> to until either end closes; a pump of the node's bytes
  // stops reading while muted.
  void Pump(int from, int to, bool from_node) {
    std::vector<char> buf(64 << 10);
    while (!stop_) {
      if (from_node && muted_) {
        // Not reading, but passing on that the node closed the connection.
        pollfd p{from, POLLRDHUP, 0};
        if (::poll(&p, 1, 20) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) break;
        continue;
      }
      pollfd p{from, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::read(from, buf.data(), buf.size());
      if (n <= 0) break;
      ssize_t off = 0;
      while (off < n) {
        const ssize_t w = ::send(to, buf.data() + off, n - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += w;
      }
      if (off < n) break;
    }
    ::shutdown(to, SHUT_WR);
    ::shutdown(from, SHUT_RDWR);
    // The node is gone: take what the client still writes, so its own end
    // of the connection sees the close (it waits for its writes first).
    if (from_node) {
      while (!stop_) {
        pollfd p{to, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        if (::read(to, buf.data(), buf.size()) <= 0) break;
      }
    }
  }

  std::string node_;
  std::string address_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<bool> muted_{false};
  std::mutex mu_;
  std::vector<int> fds_;  // GUARDED_BY(mu_)
  std::vector<std::thread> pumps_;
  std::thread acceptor_;
};

// The cluster's session credential, dialing from local address `from`,
// patient enough to stay connected whatever the node does (only the node's
// bounds may end its connections).
std::unique_ptr<net::Endpoint> Attacker(const examples::LocalCluster& c, const std::string& from) {
  net::EndpointOptions o;
  o.role = net::Role::kSession;
  o.tls_dir = c.tls_dir();
  o.local_address = from;
  o.log = false;
  o.handler_threads = 1;
  o.heartbeat_ms = 60000;
  o.peer_timeout_ms = 600000;
  o.write_timeout_ms = 600000;
  o.connect_timeout_ms = 20000;
  auto e = net::Endpoint::Create(o, nullptr, nullptr);
  REQUIRE(e.ok());
  return std::move(*e);
}

}  // namespace

TEST_CASE("Bounds: a peer that sends 1 MiB calls and never reads the replies costs the node under 256 MiB",
          "[cluster][hostile][bounds]") {
  examples::LocalCluster cluster;
  cluster.SetNodeArgs({"--max-open-files", "256"});
  REQUIRE(cluster.Start(1, 120).ok());
  const pid_t node = cluster.pid(0);
  REQUIRE(SessionStep(cluster).ok());  // warm: the node's pools and first step are not the attack's
  const int64_t rss_before = StatusKib(node, "VmRSS");
  MutingRelay relay(cluster.addresses()[0]);
  auto attacker = Attacker(cluster, "127.0.0.1");
  Tensor mib(DType::kFloat32, {int64_t{1} << 18});
  std::memset(mib.raw_data(), 0, mib.bytes());
  // Ten seconds of attack, dialing again whenever the node drops it: each
  // connection asks for 1 MiB echoes as fast as the node reads them.
  const auto t0 = Clock::now();
  int connections = 0, dropped = 0;
  int64_t sent_mib = 0, rss_peak = rss_before;
  while (Clock::now() - t0 < 10s) {
    relay.Unmute();  // the handshake needs both ways
    auto c = attacker->Connect(relay.address());
    if (!c.ok()) continue;
    ++connections;
    relay.Mute();
    // Up to 512 MiB of calls per connection (they wait in this process
    // until the node reads them): the node used to read 2 GiB of them.
    for (int batch = 0; batch < 8 && (*c)->is_up() && Clock::now() - t0 < 10s; ++batch) {
      for (int i = 0; i < 64; ++i) (*c)->Request(net::Echo{mib}, 600000, [](Result<net::Message>) {});
      sent_mib += 64;
      // Paces the batches; a drop ends the wait early.
      (void)testing::WaitFor([&] { return !(*c)->is_up(); }, 300ms);
      rss_peak = std::max(rss_peak, StatusKib(node, "VmRSS"));
    }
    (void)testing::WaitFor([&] {
      rss_peak = std::max(rss_peak, StatusKib(node, "VmRSS"));
      return !(*c)->is_up() || Clock::now() - t0 > 10s;
    }, 10s, 50ms);
    dropped += (*c)->is_up() ? 0 : 1;
    (*c)->Close();
  }
  const int64_t hwm = StatusKib(node, "VmHWM");
  rss_peak = std::max(rss_peak, StatusKib(node, "VmRSS"));
  WARN("never-reading peer: " << connections << " connections (" << dropped << " dropped by the node), "
                              << sent_mib << " MiB of calls queued by the attacker; node RSS before "
                              << rss_before / 1024 << " MiB, peak seen " << rss_peak / 1024 << " MiB (growth "
                              << (rss_peak - rss_before) / 1024 << " MiB), VmHWM " << hwm / 1024 << " MiB");
  CHECK(connections >= 1);
  CHECK(rss_peak - rss_before < 256 * 1024);
  CHECK(hwm - rss_before < 256 * 1024);
  // The node still serves.
  auto step = SessionStep(cluster);
  INFO(step.status().ToString());
  CHECK(step.ok());
}

TEST_CASE("Bounds: 1023 idle authenticated connections of one session credential lock no new peer out",
          "[cluster][hostile][bounds]") {
  // The node's descriptors (1024) are fewer than the attacker's connections
  // plus its own: it must make room, never run out.
  for (const bool per_credential_cap : {true, false}) {
    DYNAMIC_SECTION((per_credential_cap ? "with the default per-credential cap" : "with no per-credential cap")) {
      examples::LocalCluster cluster;
      std::vector<std::string> args = {"--max-open-files", "1024"};
      if (!per_credential_cap) args.insert(args.end(), {"--max-connections-per-credential", "100000"});
      cluster.SetNodeArgs(args);
      REQUIRE(cluster.Start(1, 300).ok());
      // 1,023 connections from 127.0.0.2 to 127.0.0.5 (256 per address, the
      // per-source cap), each through hello, then idle.
      std::vector<std::unique_ptr<net::Endpoint>> attackers;
      std::vector<net::ConnectionPtr> conns;
      int refused = 0;
      const auto t0 = Clock::now();
      for (int i = 0; i < 1023 && Clock::now() - t0 < 120s; ++i) {
        if (i % 256 == 0) attackers.push_back(Attacker(cluster, "127.0.0." + std::to_string(2 + i / 256)));
        auto c = attackers.back()->Connect(cluster.addresses()[0]);
        if (c.ok()) conns.push_back(*c);
        else ++refused;
      }
      const double fill_s = Seconds(t0);
      // The node dropped what it had to; what is still up is idle and stays.
      REQUIRE(testing::WaitFor([&] {
        return net::Call(conns.back(), net::ListMembers{}, 5000).ok();
      }, 10s));
      auto up = [&] {
        int n = 0;
        for (auto& c : conns) n += c->is_up() ? 1 : 0;
        return n;
      };
      // A connection the node closed is down here once this side's loop
      // reads the close, which under load lags the node by a moment: wait
      // for that (with a deadline) before counting.
      if (per_credential_cap) testing::WaitFor([&] { return up() <= 256; }, 10s);
      const int held = up();
      auto join = Join(cluster, 2);
      INFO(join.status().ToString());
      CHECK(join.ok());
      auto step = SessionStep(cluster);
      INFO(step.status().ToString());
      CHECK(step.ok());
      WARN((per_credential_cap ? "default caps" : "no per-credential cap")
           << ": 1,023 idle session connections made in " << fill_s << " s (" << conns.size() << " through hello, "
           << refused << " refused), " << held << " still open before the join, " << up()
           << " after; join " << (join.ok() ? std::to_string(*join) + " s" : join.status().ToString())
           << ", session step " << (step.ok() ? std::to_string(*step) + " s" : step.status().ToString()));
      if (per_credential_cap) CHECK(held <= 256);
      for (auto& c : conns) c->Close();
      conns.clear();
      attackers.clear();
    }
  }
}

namespace {

// Opens silent TCP connections to `to` from local address `from` as fast
// as one thread can, keeping the newest `keep` open (each then closed with
// a reset, so no port lingers in TIME_WAIT), until stopped.
struct SilentFlood {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> opened{0};
  std::thread thread;
  // one_byte: each sends a byte once connected (a TLS record begun), so
  // the node accepts it; else nothing at all.
  void Start(const std::string& from, const std::string& to, size_t keep, bool one_byte) {
    thread = std::thread([this, from, to, keep, one_byte] {
      std::string host;
      uint16_t port = 0;
      if (!net::ParseAddress(to, &host, &port).ok()) return;
      sockaddr_in local{}, remote{};
      local.sin_family = remote.sin_family = AF_INET;
      ::inet_pton(AF_INET, from.c_str(), &local.sin_addr);
      ::inet_pton(AF_INET, host.c_str(), &remote.sin_addr);
      remote.sin_port = htons(port);
      const linger reset{1, 0};
      std::deque<int> open;
      auto close_one = [&] {
        ::setsockopt(open.front(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
        ::close(open.front());
        open.pop_front();
      };
      while (!stop.load(std::memory_order_relaxed)) {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
          if (!open.empty()) close_one();
          continue;
        }
        if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
          ::close(fd);
          if (!open.empty()) close_one();
          continue;
        }
        const int r = ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote);
        if (r == 0 || errno == EINPROGRESS) opened.fetch_add(1, std::memory_order_relaxed);
        open.push_back(fd);
        // Sixteen connections later this one is through its TCP handshake.
        if (one_byte && open.size() > 16) ::send(open[open.size() - 17], "\x16", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (open.size() > keep) close_one();
      }
      while (!open.empty()) close_one();
    });
  }
  void Stop() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

// The kernel's count of connections dropped because a listener's accept
// queue was full (TcpExt ListenOverflows, all sockets), or -1.
int64_t ListenOverflows() {
  std::ifstream f("/proc/net/netstat");
  std::string names, values;
  while (std::getline(f, names) && std::getline(f, values)) {
    if (names.rfind("TcpExt:", 0) != 0) continue;
    std::istringstream n(names), v(values);
    std::string name, value;
    while (n >> name && v >> value)
      if (name == "ListenOverflows") return std::stoll(value);
  }
  return -1;
}

}  // namespace

TEST_CASE("Bounds: a flood of silent connections from one address keeps no handshake from another out",
          "[cluster][hostile][bounds]") {
  // Silent, the kernel holds them (TCP_DEFER_ACCEPT). SF_FLOOD_ONE_BYTE=1
  // measures a flood of connections that send one byte each instead (the
  // node accepts them): at this machine's rate they overflow the kernel's
  // accept queue, which drops every address's new connections alike, so
  // that variant is not asserted by default (docs/CLUSTER.md).
  const char* env = std::getenv("SF_FLOOD_ONE_BYTE");
  const bool one_byte = env && std::string(env) == "1";
  {
  examples::LocalCluster cluster;
  cluster.SetNodeArgs({"--max-open-files", "512"});
  REQUIRE(cluster.Start(1, 300).ok());
  SilentFlood flood;
  const auto start = Clock::now();
  flood.Start("127.0.0.2", cluster.addresses()[0], 4096, one_byte);
  // Let it reach its rate before the legitimate peers come.
  REQUIRE(testing::WaitFor([&] { return flood.opened.load() > 50000; }, 30s));
  const int64_t opened0 = flood.opened.load();
  const int64_t overflows0 = ListenOverflows();
  const double alone_rate = opened0 / Seconds(start);
  const auto t0 = Clock::now();
  std::vector<Result<double>> steps;
  for (int i = 0; i < 8; ++i) steps.push_back(SessionStep(cluster));
  auto join = Join(cluster, 2);
  const double secs = Seconds(t0);
  const double rate = (flood.opened.load() - opened0) / secs;
  const int64_t overflows = ListenOverflows() - overflows0;
  flood.Stop();
  int failed = 0;
  double slowest = 0;
  for (auto& s : steps) {
    if (!s.ok()) {
      ++failed;
      UNSCOPED_INFO(s.status().ToString());
    } else {
      slowest = std::max(slowest, *s);
    }
  }
  WARN((one_byte ? "one-byte" : "silent") << " flood from 127.0.0.2 at " << static_cast<int64_t>(alone_rate) << " connections/s (one thread) alone, "
                                         << static_cast<int64_t>(rate) << " while the peers below ran, for " << secs
                                         << " s: " << (8 - failed) << " of 8 session steps succeeded (slowest "
                                         << slowest << " s), join "
                                         << (join.ok() ? std::to_string(*join) + " s" : join.status().ToString())
                                         << "; the kernel dropped " << overflows
                                         << " connections meanwhile for a full accept queue");
  CHECK(failed == 0);
  INFO(join.status().ToString());
  CHECK(join.ok());
  // And after it.
  CHECK(SessionStep(cluster).ok());
  }
}
