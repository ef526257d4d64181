#include "examples/common/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <chrono>

#include "shardflow/cluster.h"

namespace sf::examples {

std::string ProgramDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : p.parent_path().string();
}

LocalCluster::~LocalCluster() {
  for (pid_t p : pids_) {
    if (p <= 0) continue;
    ::kill(p, SIGTERM);
  }
  for (pid_t p : pids_) {
    if (p <= 0) continue;
    ::kill(p, SIGCONT);  // a stopped node cannot act on SIGTERM
    int st;
    // A node stops within its shutdown; after 5 s it is killed.
    for (int i = 0; i < 500; ++i) {
      if (::waitpid(p, &st, WNOHANG) == p) {
        p = 0;
        break;
      }
      ::usleep(10000);
    }
    if (p > 0) {
      ::kill(p, SIGKILL);
      ::waitpid(p, &st, 0);
    }
  }
  etcd_.reset();  // after the nodes: they leave etcd as they stop
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void LocalCluster::Kill(int i) {
  if (i < 0 || i >= static_cast<int>(pids_.size()) || pids_[i] <= 0) return;
  ::kill(pids_[i], SIGKILL);
  int st;
  ::waitpid(pids_[i], &st, 0);
  pids_[i] = 0;
}

bool LocalCluster::WaitExit(int i, int timeout_ms) {
  if (i < 0 || i >= static_cast<int>(pids_.size()) || pids_[i] <= 0) return false;
  int st;
  for (int waited = 0;; waited += 10) {
    if (::waitpid(pids_[i], &st, WNOHANG) == pids_[i]) {
      pids_[i] = 0;
      return true;
    }
    if (waited >= timeout_ms) return false;
    ::usleep(10 * 1000);
  }
}

Status LocalCluster::Start(int n, double lifetime_s, const std::string& binary) {
  if (n < 1) return InvalidArgument("a local cluster needs at least one node (got " + std::to_string(n) + ")");
  binary_ = binary.empty() ? ProgramDir() + "/shardflow" : binary;
  if (::access(binary_.c_str(), X_OK) != 0)
    return NotFound("the shardflow binary '" + binary_ + "' is missing (build target shardflow_cli)");
  char tmpl[] = "/tmp/shardflow-cluster-XXXXXX";
  if (!::mkdtemp(tmpl)) return Unavailable(std::string("mkdtemp: ") + std::strerror(errno));
  dir_ = tmpl;
  tls_dir_ = dir_ + "/tls";
  SF_RETURN_IF_ERROR(InitClusterCredentials(tls_dir_));
  auto etcd = LocalEtcd::Start(tls_dir_, insecure_);
  if (!etcd.ok()) return etcd.status().WithPrefix("starting the local cluster's etcd");
  etcd_ = std::move(*etcd);
  for (int i = 0; i < n; ++i) {
    auto a = Spawn(lifetime_s);
    if (!a.ok()) return a.status();
  }
  return WaitMembers(n, 20000);
}

Status LocalCluster::WaitBackups(int slots, int timeout_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto m = ReadClusterMap(etcd_endpoint(), tls_dir_, "default", "", insecure_);
    Status last = m.status();
    if (m.ok()) {
      if (static_cast<int>(m->holder.size()) < slots) last = FailedPrecondition("the shard map has too few slots");
      for (int s = 0; last.ok() && s < slots; ++s)
        if (m->backup[s].empty() || !m->synced[s] || !m->moving_from[s].empty() || m->backup[s] == m->holder[s])
          last = FailedPrecondition("slot " + std::to_string(s) + " (epoch " + std::to_string(m->epoch) +
                                    ") has no synced backup");
      if (last.ok()) return last;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return DeadlineExceeded("after " + std::to_string(timeout_ms) + " ms: " + last.ToString());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int64_t LocalCluster::PeakRssBytes(int i) const {
  if (i < 0 || i >= static_cast<int>(pids_.size()) || pids_[i] <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pids_[i]) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;  // "VmHWM:   123 kB"
  return 0;
}

Status LocalCluster::WaitMembers(int n, int timeout_ms) {
  // Each node registered before it said it listens, but the others learn it
  // from etcd's watch a moment later: a session connecting now would place
  // its tasks over fewer members.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Status last;
  for (size_t i = 0; i < addresses_.size(); ++i) {
    if (pids_[i] <= 0) continue;
    for (;;) {
      auto m = ListClusterMembers(addresses_[i], tls_dir_, "", insecure_);
      if (m.ok() && static_cast<int>(m->size()) >= n) break;
      last = m.ok() ? FailedPrecondition("it lists " + std::to_string(m->size()) + " members") : m.status();
      if (std::chrono::steady_clock::now() >= deadline)
        return DeadlineExceeded("node " + addresses_[i] + " does not list all " + std::to_string(n) +
                                " members after " + std::to_string(timeout_ms) + " ms: " + last.ToString());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // And the placement leader spread the shard map over them all, so a
  // session connecting now is not moved at once.
  for (;;) {
    auto m = ReadClusterMap(etcd_endpoint(), tls_dir_, "default", "", insecure_);
    if (m.ok()) {
      std::set<std::string> holders(m->holder.begin(), m->holder.end());
      bool moving = false;
      for (const auto& f : m->moving_from) moving = moving || !f.empty();
      // A slot moves by first copying it to its new holder as a backup:
      // with one replica any backup is such a move; with two, one not synced
      // yet may be.
      const bool one_replica = replicas_ < 2;
      for (size_t s = 0; s < m->backup.size(); ++s)
        moving = moving || (!m->backup[s].empty() && (one_replica || s >= m->synced.size() || !m->synced[s]));
      int live = 0;
      for (size_t i = 0; i < addresses_.size(); ++i) live += pids_[i] > 0 && holders.count(addresses_[i]);
      if (!moving && live >= n) return Status::OK();
      last = FailedPrecondition("the shard map (epoch " + std::to_string(m->epoch) + ") spans " +
                                std::to_string(live) + " of the nodes" + (moving ? ", moving" : ""));
    } else {
      last = m.status();
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return DeadlineExceeded("the shard map does not span all " + std::to_string(n) + " nodes after " +
                              std::to_string(timeout_ms) + " ms: " + last.ToString());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Result<std::string> LocalCluster::AddNode(double lifetime_s) {
  if (!etcd_) return FailedPrecondition("the local cluster is not started");
  return Spawn(lifetime_s);
}

Result<std::string> LocalCluster::Spawn(double lifetime_s) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Unavailable(std::string("pipe: ") + std::strerror(errno));
  const std::string lifetime = std::to_string(lifetime_s);
  std::vector<std::string> args = {binary_, "node", "--listen", "127.0.0.1:0", "--lifetime-s", lifetime,
                                   "--threads", "1"};
  if (insecure_) {
    args.push_back("--insecure");
  } else {
    args.push_back("--tls-dir");
    args.push_back(tls_dir_);
  }
  // A 1 s lease: a hung node is gone for everyone within about a second.
  args.insert(args.end(), {"--etcd", etcd_->endpoint(), "--lease-ttl-s", "1", "--replicas", std::to_string(replicas_)});
  args.insert(args.end(), node_args_.begin(), node_args_.end());
  // SF_NODE_LOG=1: every node logs its placement, moves and failovers on stderr.
  if (const char* log = std::getenv("SF_NODE_LOG"); log && *log && std::string(log) != "0") args.push_back("--log");
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Unavailable(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(out[1], 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary_.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  pids_.push_back(pid);
  // The node prints "shardflow node NAME listening on HOST:PORT" once it serves.
  std::string line;
  char c;
  while (line.size() < 4096) {
    const ssize_t r = ::read(out[0], &c, 1);
    if (r == 1) {
      if (c == '\n') break;
      line += c;
    } else if (r == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(out[0]);
  const std::string marker = " listening on ";
  const size_t at = line.find(marker);
  if (at == std::string::npos)
    return Unavailable("node " + std::to_string(pids_.size() - 1) + " did not start (said: '" + line +
                       "'; its errors are on stderr)");
  addresses_.push_back(line.substr(at + marker.size()));
  return addresses_.back();
}

}  // namespace sf::examples
