// Clusters: node processes that host partitions and variable shards, and the
// ClusterSession that runs a graph on them.
//
//   // On each machine (or process): build/bin/shardflow node --listen HOST:PORT
//   //   [--join HOST:PORT] --cluster-secret-file SECRET
//   sf::ClusterOptions o;
//   o.address = "127.0.0.1:7000";
//   SF_ASSIGN_OR_RETURN(o.secret, sf::ReadClusterSecret("secret"));
//   auto s = sf::ClusterSession::Connect(g, o);   // same Run API as Session
//   auto out = (*s)->Run({{"x", x}}, {"loss"});
//
// The session places the graph over the nodes' devices
// ("/job:worker/task:i/device:CPU:0", task i being the i-th member the
// contacted node lists), partitions it, registers each partition on its
// node, and runs steps; tensors between nodes travel node to node
// (net/transport.h), never through the client. Variables live on the nodes
// and outlive sessions: two sessions whose graphs name the same variable on
// the same task share it (between-graph replication).
// Thread-safety: ClusterNode and ClusterSession methods may be called from many
// threads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardflow/graph.h"
#include "shardflow/session.h"

namespace sf {

struct NodeOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT to listen on (port 0: any free one)
  std::string join;                    // a member's HOST:PORT to join ("": start a cluster)
  std::string secret;                  // the cluster secret, at least 16 bytes (required)
  std::string name;                    // "" = "node@HOST:PORT"
  int compute_threads = 0;             // compute pool size; 0 = one per core
  int heartbeat_ms = 200;              // idle time before a heartbeat
  int peer_timeout_ms = 1000;          // silence after which a peer is down
  bool log = false;                    // membership and refusals to stderr
};

// One member of a cluster: serves partitions, variable shards and tensors.
class ClusterNode {
 public:
  // Listens, joins opts.join when given (Unavailable naming it if it cannot
  // be reached, PermissionDenied when it refuses the secret) and serves until
  // Stop or destruction. InvalidArgument for a bad address or secret.
  static Result<std::unique_ptr<ClusterNode>> Start(NodeOptions opts);
  ~ClusterNode();
  // Stops serving: closes connections, fails running steps, stops actors.
  void Stop();
  // "HOST:PORT" the node listens on.
  const std::string& address() const;
  const std::string& name() const;
  // The members this node knows (itself first), as HOST:PORT.
  std::vector<std::string> Members() const;

  struct Impl;

 private:
  explicit ClusterNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct ClusterOptions {
  std::string address;            // any member's HOST:PORT (required)
  std::string secret;             // the cluster secret (required)
  int max_tasks = 0;              // place on at most this many members (0: all)
  int request_timeout_ms = 10000; // for registering partitions and membership calls
  int heartbeat_ms = 200;
  int peer_timeout_ms = 1000;
};

// Reads a cluster secret file: NotFound naming the path, InvalidArgument
// when shorter than 16 bytes, FailedPrecondition when group or others may
// read it.
Result<std::string> ReadClusterSecret(const std::string& path);

class ClusterSession : public SessionInterface {
 public:
  // Connects to options.address, learns the members and connects to each.
  // Unavailable naming an unreachable member, PermissionDenied for a wrong
  // secret. REQUIRES: g outlives the session and is not modified while it runs.
  static Result<std::unique_ptr<ClusterSession>> Connect(const Graph& g, ClusterOptions options);
  ~ClusterSession() override;
  ClusterSession(const ClusterSession&) = delete;
  ClusterSession& operator=(const ClusterSession&) = delete;

  // One step on the cluster (Run comes from SessionInterface). Besides the
  // local session's errors: Unavailable naming the node when a member of
  // the step goes down, Aborted when another part of the step failed first.
  void RunAsync(const FeedMap& feeds, const std::vector<std::string>& fetches,
                const std::vector<std::string>& targets,
                std::function<void(Result<std::vector<Tensor>>)> done) override;
  const Graph& graph() const override;
  // The members steps run on, by task index (HOST:PORT).
  std::vector<std::string> tasks() const;

  struct Impl;

 private:
  explicit ClusterSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sf
