// LocalCluster: starts `shardflow node` processes on 127.0.0.1 (ephemeral
// ports) for examples, benchmarks and tests, and stops them when destroyed.
// Each node also stops by itself after `lifetime_s` and when this process
// dies (PR_SET_PDEATHSIG), so no node outlives its owner.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "shardflow/cluster.h"
#include "shardflow/status.h"

namespace sf::examples {

class LocalCluster {
 public:
  LocalCluster() = default;
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // Starts an etcd (LocalEtcd) and n nodes that register in it, with fresh
  // TLS credentials (a cluster CA, node, session and etcd certificates) in
  // a temporary directory; the shardflow binary is found beside this
  // program (or at `binary`). Unavailable naming the node (or etcd) that
  // failed to start. Insecure clusters (SetInsecure) run etcd and the nodes
  // in plaintext.
  Status Start(int n, double lifetime_s = 600, const std::string& binary = "");
  // Starts one more node, which registers in the cluster's etcd; its
  // address. FailedPrecondition before Start. A node dies with the thread
  // that started it (PR_SET_PDEATHSIG), so start nodes from a thread that
  // lives as long as they are needed.
  Result<std::string> AddNode(double lifetime_s = 600);

  const std::vector<std::string>& addresses() const { return addresses_; }
  // The index of the node started at HOST:PORT address; -1 when none was.
  int IndexOf(const std::string& address) const {
    for (size_t i = 0; i < addresses_.size(); ++i)
      if (addresses_[i] == address) return static_cast<int>(i);
    return -1;
  }
  // The credentials directory: nodes use its "node" credential, sessions
  // pass it as ClusterOptions::tls_dir (its "session" credential).
  const std::string& tls_dir() const { return tls_dir_; }
  // Before Start: plaintext nodes without authentication (`--insecure`),
  // for measuring what TLS costs. Sessions then set ClusterOptions::insecure.
  void SetInsecure(bool insecure) { insecure_ = insecure; }
  bool insecure() const { return insecure_; }
  // The pid of node i (to stop or kill it in failure tests).
  pid_t pid(int i) const { return pids_[i]; }
  // Extra arguments for the nodes started from now on ("--peer-timeout-ms", "30000", ...).
  void SetNodeArgs(std::vector<std::string> args) { node_args_ = std::move(args); }
  // Before Start: the nodes' --replicas (2, the default: a backup of every
  // slot; 1: none, a dead node's slots come back from a checkpoint).
  void SetReplicas(int replicas) { replicas_ = replicas; }
  int replicas() const { return replicas_; }
  // Sends SIGKILL to node i and reaps it.
  void Kill(int i);
  // The cluster's etcd ("HOST:PORT"; "" before Start) and the server
  // itself (to pause or restart it in failure tests; null before Start).
  std::string etcd_endpoint() const { return etcd_ ? etcd_->endpoint() : ""; }
  LocalEtcd* etcd() { return etcd_.get(); }
  // Waits up to timeout_ms until every running node lists at least n
  // members and the shard map spans n running nodes with no slot moving
  // (Start does, for all it started); DeadlineExceeded naming the node (or
  // the map) that does not.
  Status WaitMembers(int n, int timeout_ms);
  // Waits up to timeout_ms for node i to exit by itself (after a drain) and
  // reaps it; true when it did.
  bool WaitExit(int i, int timeout_ms);
  // Waits up to timeout_ms until each of the shard map's first `slots` slots
  // has a synced backup on another node and none moves (with replicas 2);
  // DeadlineExceeded naming the first slot that has not.
  Status WaitBackups(int slots, int timeout_ms) const;
  // Node i's peak resident memory so far (VmHWM), in bytes; 0 once it exited.
  int64_t PeakRssBytes(int i) const;

 private:
  Result<std::string> Spawn(double lifetime_s);

  std::unique_ptr<LocalEtcd> etcd_;  // destroyed after the nodes are stopped (see ~LocalCluster)
  std::string binary_;
  std::string dir_;
  std::string tls_dir_;
  bool insecure_ = false;
  std::vector<pid_t> pids_;
  std::vector<std::string> addresses_;
  int replicas_ = 2;
  std::vector<std::string> node_args_;
};

// The directory of the running program ("" if unknown).
std::string ProgramDir();

}  // namespace sf::examples
