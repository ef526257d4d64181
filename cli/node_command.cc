#include "cli/node_command.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <iostream>

#include "shardflow/cluster.h"

namespace sf {
namespace {

constexpr char kNodeUsage[] =
    "usage: shardflow node --listen HOST:PORT --cluster-secret-file FILE\n"
    "                      [--join HOST:PORT] [--name NAME] [--threads N]\n"
    "                      [--lifetime-s SECONDS] [--drain-timeout-s SECONDS]\n"
    "                      [--heartbeat-ms MS] [--peer-timeout-ms MS]\n"
    "                      [--watch-timeout-ms MS] [--log]\n"
    "       shardflow node drain HOST:PORT --cluster-secret-file FILE [--wait-s SECONDS]\n"
    "\n"
    "Runs one member of a shardflow cluster: it hosts graph partitions, variable\n"
    "shards and queues for cluster sessions (sf::ClusterSession). Prints\n"
    "'shardflow node NAME listening on HOST:PORT' once it serves, then serves\n"
    "until SIGINT or SIGTERM.\n"
    "\n"
    "  --listen HOST:PORT          where to listen (port 0 picks a free port)\n"
    "  --cluster-secret-file FILE  the shared secret (at least 16 bytes, readable only\n"
    "                              by its owner); peers without it are refused\n"
    "  --join HOST:PORT            a member of the cluster to join\n"
    "  --name NAME                 the member's name (default node@HOST:PORT)\n"
    "  --threads N                 compute threads (default: one per core)\n"
    "  --lifetime-s SECONDS        stop by itself after this long (tests)\n"
    "  --heartbeat-ms MS           idle time before a heartbeat (default 200)\n"
    "  --peer-timeout-ms MS        silence after which a peer is down (default 1000)\n"
    "  --watch-timeout-ms MS       the same for the members' CAF monitors (default:\n"
    "                              --peer-timeout-ms)\n"
    "  --drain-timeout-s SECONDS   when drained, leave after this long even if a\n"
    "                              session still uses the node (default 60)\n"
    "  --log                       log membership changes and refused peers\n"
    "\n"
    "'node drain' asks a running node to leave: the sessions using it move its\n"
    "tasks and their variables to other members before their next step, then\n"
    "the node exits. It waits up to --wait-s (default 60) for the node to go.\n";

int Usage(const std::string& msg) {
  std::cerr << "shardflow node: " << msg << " (see 'shardflow node --help')\n";
  return 2;
}

// `shardflow node drain HOST:PORT ...`.
int DrainCommand(const std::vector<std::string>& argv) {
  std::string address, secret_file;
  double wait_s = 60;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) {
      if (!address.empty()) return Usage("drain takes one address (got '" + address + "' and '" + a + "')");
      address = a;
      continue;
    }
    if (i + 1 >= argv.size()) return Usage("option " + a + " needs a value");
    const std::string& v = argv[++i];
    if (a == "--cluster-secret-file") secret_file = v;
    else if (a == "--wait-s") wait_s = std::atof(v.c_str());
    else return Usage("unknown option " + a + " for drain");
  }
  if (address.empty()) return Usage("drain needs the node's HOST:PORT");
  if (secret_file.empty()) return Usage("--cluster-secret-file is required");
  auto secret = ReadClusterSecret(secret_file);
  if (!secret.ok()) {
    std::cerr << "shardflow node drain: " << secret.status().ToString() << "\n";
    return 1;
  }
  Status s = DrainNode(address, *secret, static_cast<int>(wait_s * 1000));
  if (!s.ok()) {
    std::cerr << "shardflow node drain: " << s.ToString() << "\n";
    return 1;
  }
  std::cout << "node " << address << (wait_s > 0 ? " drained and left" : " is draining") << std::endl;
  return 0;
}

}  // namespace

int NodeCommand(const std::vector<std::string>& argv) {
  if (!argv.empty() && argv[0] == "drain") return DrainCommand({argv.begin() + 1, argv.end()});
  NodeOptions o;
  o.listen.clear();
  std::string secret_file;
  double lifetime = 0;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kNodeUsage;
      return 0;
    }
    if (a == "--log") {
      o.log = true;
      continue;
    }
    if (i + 1 >= argv.size()) return Usage("option " + a + " needs a value");
    const std::string& v = argv[++i];
    if (a == "--listen") o.listen = v;
    else if (a == "--join") o.join = v;
    else if (a == "--cluster-secret-file") secret_file = v;
    else if (a == "--name") o.name = v;
    else if (a == "--threads") o.compute_threads = std::atoi(v.c_str());
    else if (a == "--lifetime-s") lifetime = std::atof(v.c_str());
    else if (a == "--heartbeat-ms") o.heartbeat_ms = std::atoi(v.c_str());
    else if (a == "--peer-timeout-ms") o.peer_timeout_ms = std::atoi(v.c_str());
    else if (a == "--watch-timeout-ms") o.watch_timeout_ms = std::atoi(v.c_str());
    else if (a == "--drain-timeout-s") o.drain_timeout_ms = static_cast<int>(std::atof(v.c_str()) * 1000);
    else return Usage("unknown option " + a);
  }
  if (o.listen.empty()) return Usage("--listen HOST:PORT is required");
  if (o.heartbeat_ms < 1 || o.peer_timeout_ms <= o.heartbeat_ms || o.watch_timeout_ms < 0 ||
      (o.watch_timeout_ms > 0 && o.watch_timeout_ms <= o.heartbeat_ms))
    return Usage("--heartbeat-ms must be at least 1 and below --peer-timeout-ms and --watch-timeout-ms");
  if (secret_file.empty()) return Usage("--cluster-secret-file is required");
  auto secret = ReadClusterSecret(secret_file);
  if (!secret.ok()) {
    std::cerr << "shardflow node: " << secret.status().ToString() << "\n";
    return 1;
  }
  o.secret = *secret;
  // Block the stop signals before any thread starts, so only sigtimedwait sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  // The launcher may close our stdout after the first line; a later write
  // must not kill the node.
  signal(SIGPIPE, SIG_IGN);
  // This process is only a node: big tensors arrive over the network every
  // step, so it keeps their memory warm (see KeepTensorMemoryWarm).
  KeepTensorMemoryWarm();
  auto node = ClusterNode::Start(o);
  if (!node.ok()) {
    std::cerr << "shardflow node: " << node.status().ToString() << "\n";
    return 1;
  }
  std::cout << "shardflow node " << (*node)->name() << " listening on " << (*node)->address()
            << std::endl;
  // Wakes every 100 ms: a drained node leaves by itself.
  const auto start = std::chrono::steady_clock::now();
  timespec tick{0, 100 * 1000 * 1000};
  for (;;) {
    const int sig = sigtimedwait(&stop, nullptr, &tick);
    if (sig > 0) break;  // a stop signal
    if ((*node)->WaitLeft(0)) {
      std::cerr << "shardflow node " << (*node)->name() << ": drained, leaving\n";
      break;
    }
    const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (lifetime > 0 && up >= lifetime) break;
  }
  (*node)->Stop();
  return 0;
}

}  // namespace sf
