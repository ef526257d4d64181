#include "cli/node_command.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>

#include "shardflow/cluster.h"

namespace sf {
namespace {

constexpr char kNodeUsage[] =
    "usage: shardflow node --listen HOST:PORT --cluster-secret-file FILE\n"
    "                      [--join HOST:PORT] [--name NAME] [--threads N]\n"
    "                      [--lifetime-s SECONDS] [--log]\n"
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
    "  --log                       log membership changes and refused peers\n";

int Usage(const std::string& msg) {
  std::cerr << "shardflow node: " << msg << " (see 'shardflow node --help')\n";
  return 2;
}

}  // namespace

int NodeCommand(const std::vector<std::string>& argv) {
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
    else return Usage("unknown option " + a);
  }
  if (o.listen.empty()) return Usage("--listen HOST:PORT is required");
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
  auto node = ClusterNode::Start(o);
  if (!node.ok()) {
    std::cerr << "shardflow node: " << node.status().ToString() << "\n";
    return 1;
  }
  std::cout << "shardflow node " << (*node)->name() << " listening on " << (*node)->address()
            << std::endl;
  timespec ts{};
  timespec* timeout = nullptr;
  if (lifetime > 0) {
    ts.tv_sec = static_cast<time_t>(lifetime);
    ts.tv_nsec = static_cast<long>((lifetime - static_cast<double>(ts.tv_sec)) * 1e9);
    timeout = &ts;
  }
  for (;;) {
    const int sig = sigtimedwait(&stop, nullptr, timeout);
    if (sig > 0 || errno == EAGAIN) break;  // a stop signal, or the lifetime is over
  }
  (*node)->Stop();
  return 0;
}

}  // namespace sf
