// `shardflow node`: runs one cluster member in this process (docs/CLI.md).
#pragma once

#include <string>
#include <vector>

#include "shardflow/cluster.h"

namespace CLI {
class App;
}

namespace sf {

// What `shardflow node` and `shardflow node drain` were given.
struct NodeFlags {
  NodeOptions options;  // listen, etcd, name, credentials, threads and the timeouts
  double lifetime_s = 0;  // 0: serve until a stop signal
  int max_open_files = 0; // 0: leave the descriptor limit as it is
  int max_peer_buffer_mib = static_cast<int>(NodeOptions{}.max_peer_buffer_bytes >> 20);  // becomes options.max_peer_buffer_bytes
  double drain_timeout_s = NodeOptions{}.drain_timeout_ms / 1000.0;  // becomes options.drain_timeout_ms
  std::vector<std::string> drain_addresses;  // exactly one is right; checked by NodeCommand
  std::string drain_tls_dir;
  std::string drain_tls_name;
  bool drain_insecure = false;
  bool members_json = false;  // `node members --json`
  std::string join;            // the removed --join, refused with a pointer to --etcd
  std::string members_etcd;    // `node members --etcd` / `cluster members --etcd`: read etcd, not a node
  std::string members_cluster = "default";
  double wait_s = 60;  // how long drain waits for the node to go; 0: not at all
  std::vector<std::string> ns_args;  // `cluster namespaces [drop NS]`
};

// The text `shardflow node --help` prints.
extern const char kNodeUsage[];

// Declares the options of `node` and its `drain` subcommand on `node`,
// writing into *flags when parsed.
void AddNodeFlags(CLI::App& node, NodeFlags* flags);

// Starts the node and serves until SIGINT/SIGTERM or --lifetime-s, or drains
// another node when `command` (the parsed `node`) holds `drain`; the process
// exit code (2 for a usage error, 1 when the node cannot start or the drain
// fails).
int NodeCommand(const CLI::App& command, const NodeFlags& flags);

// The text `shardflow cluster --help` prints.
extern const char kClusterUsage[];
// Declares `cluster members` on `cluster`, writing into *flags.
void AddClusterFlags(CLI::App& cluster, NodeFlags* flags);
// `shardflow cluster members --etcd ...`: prints the members etcd lists; the exit code.
int ClusterCommand(const CLI::App& command, const NodeFlags& flags);

// Prints a usage error of `shardflow node` as one line; returns exit code 2.
int NodeUsageError(const std::string& msg);

}  // namespace sf
