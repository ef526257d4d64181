// Clusters: node processes that host partitions and variable shards, and the
// ClusterSession that runs a graph on them.
//
//   // Once: build/bin/shardflow certs init tls   (a cluster CA and credentials)
//   // On each machine (or process): build/bin/shardflow node --listen HOST:PORT
//   //   --etcd ETCD_HOST:PORT --tls-dir tls   (etcd holds the membership)
//   sf::ClusterOptions o;
//   o.address = "127.0.0.1:7000";
//   o.tls_dir = "tls";
//   auto s = sf::ClusterSession::Connect(g, o);   // same Run API as Session
//   auto out = (*s)->Run({{"x", x}}, {"loss"});
//
// The session places the graph over the nodes' devices
// ("/job:worker/task:i/device:CPU:0", task i being the i-th member the
// contacted node lists), partitions it, registers each partition on its
// node, and runs steps; tensors between nodes travel node to node
// (Cap'n Proto RPC over mutual TLS, net/peer_rpc.h), never through the client. Variables live on the nodes
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

class KernelRegistry;
class OpRegistry;

// The text of the Aborted error a node answers a run placed by a shard map
// that has moved on (its slot moved or failed over): nothing of that part
// ran there, and the session follows the new map before its next run.
inline constexpr char kStaleShardMap[] = "placed by a stale shard map epoch";
// True when s is that error: the same run may pass once run again.
inline bool IsStaleShardMap(const Status& s) {
  return s.code() == Code::kAborted && s.message().find(kStaleShardMap) != std::string::npos;
}

struct NodeOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT to listen on (port 0: any free one)
  // etcd's client addresses, "HOST:PORT[,HOST:PORT...]": the cluster's
  // membership lives there (the node registers under a lease, and every
  // member and session follows the same list). "": a cluster of this node alone.
  std::string etcd;
  std::string cluster = "default";     // the cluster's name in etcd (several may share one etcd)
  int lease_ttl_s = 2;                 // with etcd: a hung node is gone after about this long
  // With etcd: the slots of the cluster's shard map (logical tasks a
  // session may place on: ClusterOptions::tasks is at most this). Every node
  // of a cluster must be given the same.
  int map_slots = 64;
  // With etcd: 2 (the default) gives every slot of the map a backup on
  // another member (with two or more), sent every change of the slot before
  // a step is acknowledged, which takes the slot over when its holder dies
  // or hangs: no acknowledged update is lost (docs/CLUSTER.md). 1: none (a
  // dead holder's slots come back from a checkpoint). Every node of a
  // cluster must be given the same.
  int replicas = 2;
  // A slot's whole copy to a new backup or a move's new holder goes at most
  // this fast (MiB/s; 0: unlimited), so that it leaves the steps beside it
  // their network and cores.
  int copy_mib_per_s = 256;
  // What each namespace (a session credential's; graph/namespaces.h) may
  // make this node hold; past one a request is refused with
  // ResourceExhausted naming the namespace and the quota. Defaults let a
  // node hold several jobs (a quarter of its 262,144 variables each).
  int64_t ns_max_variables = int64_t{1} << 16;
  int64_t ns_max_tables = 4096;
  int64_t ns_max_queues = 4096;
  int64_t ns_max_bytes = int64_t{16} << 30;
  // A namespace other than the default one that no session used here (no
  // registration, step, read or assign, and no replication round for it)
  // for this long, while none of its sessions is open here, is dropped (its
  // state is gone). 0: never.
  int64_t ns_expiry_s = 0;
  // The cluster's credentials (`shardflow certs init DIR`): this node uses
  // tls_name.crt/.key ("" = "node"), whose certificate must be a node's.
  std::string tls_dir;
  std::string tls_name;
  // Plaintext, no authentication (logged as a warning): trusted networks
  // and measuring what TLS costs only.
  bool insecure = false;
  std::string name;                    // "" = "node@HOST:PORT"
  int compute_threads = 0;             // compute pool size; 0 = one per core
  int heartbeat_ms = 200;              // idle time before a heartbeat
  int peer_timeout_ms = 1000;          // silence after which a peer is down
  // What one peer may leave here before its bytes stop being read: its calls
  // not yet answered, and our replies it has not taken (docs/CLUSTER.md).
  int64_t max_peer_buffer_bytes = int64_t{32} << 20;
  // Authenticated peers that dialed the node, in all and per credential
  // (certificate): past a cap the least recently used connection of the
  // same credential, or of the one holding the most, makes room.
  int max_connections = 1024;
  int max_connections_per_credential = 256;
  int max_connections_per_source = 256;  // from one address; past it a new one is refused
  int drain_timeout_ms = 60000;        // a draining node leaves after this even if still used
  bool log = false;                    // membership and refusals to stderr
  // The largest tensor an op of a partition here may allocate; past it the
  // step fails with ResourceExhausted naming the node (a peer's graph
  // cannot take the process's memory). 0: the machine's physical memory.
  int64_t max_tensor_bytes = 0;
  // Where in-graph SaveCheckpoint and RestoreCheckpoint ops of partitions
  // here write and read: their dir attr is a relative path under it (no
  // "..", not absolute), so a peer's graph cannot reach other files of the
  // node's user. "" = those ops fail with FailedPrecondition. A session's
  // Save and Restore (which write on the session's side) do not use it.
  std::string checkpoint_root;
  // Where a session's graph may keep and read the node's data files: a hash
  // table's cold tier (cold_dir) and a reader's input files are relative
  // paths under it (no "..", not absolute), checked when a partition is
  // registered and where a cold tier is opened. "" = ops naming such files
  // fail with FailedPrecondition naming --data-dir (graph/path_attrs.h).
  std::string data_root;
  // The ops partitions sent here may use (null: StandardOpRegistry()) and
  // the kernels they are built from (null: StandardKernelRegistry()); a
  // program serving ops of its own passes both. Must outlive the node.
  const OpRegistry* ops = nullptr;
  const KernelRegistry* kernels = nullptr;
};

// One member of a cluster: serves partitions, variable shards and tensors.
class ClusterNode {
 public:
  // Listens, registers in opts.etcd when given (Unavailable / PermissionDenied
  // naming etcd when it cannot be reached, FailedPrecondition naming the
  // holder when a live node has this name) and serves until Stop or
  // destruction. InvalidArgument for a bad address, NotFound /
  // FailedPrecondition / InvalidArgument for credentials (net/credentials.h).
  static Result<std::unique_ptr<ClusterNode>> Start(NodeOptions opts);
  ~ClusterNode();
  // Stops serving: closes connections, fails running steps, stops actors.
  void Stop();
  // "HOST:PORT" the node listens on.
  const std::string& address() const;
  const std::string& name() const;
  // The members this node knows (itself first), as HOST:PORT.
  std::vector<std::string> Members() const;
  // Starts draining: members and sessions are told; sessions move this
  // node's tasks (and their variables) away before their next step.
  void Drain();
  // Waits up to timeout_ms for a draining node to have left (no session uses
  // it any more, or the drain timeout passed), or for a replaced one (below)
  // to give up; true when it has.
  bool WaitLeft(int timeout_ms);
  // Why the node left when it was replaced: it was away (stopped, cut off)
  // and, rejoining, found a newer node of its name at another address,
  // which took its place. "" when it was not replaced.
  std::string ReplacedBy() const;

  struct Impl;

 private:
  explicit ClusterNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct ClusterOptions {
  std::string address;            // any member's HOST:PORT (required)
  // The cluster's credentials: tls_name.crt/.key in tls_dir ("" =
  // "session"), a session's certificate; or insecure (plaintext).
  std::string tls_dir;
  std::string tls_name;
  bool insecure = false;
  int max_tasks = 0;              // place on at most this many members (0: all)
  // Logical tasks the graph is placed over ("/job:worker/task:i"); 0: one
  // per member used at connect. Tasks are spread over the members (several
  // may share one) and move between members as a whole, with their
  // variables, when members join, drain or die. On a cluster with a shard
  // map (nodes with --etcd) task i is the map's slot i (at most the nodes'
  // --map-slots) and goes where the map puts it, the same for every session.
  int tasks = 0;
  int request_timeout_ms = 10000; // for registering partitions and membership calls
  // A step fails with DeadlineExceeded once no op of it finished on any
  // node for this long (ops that wait, on an empty queue or a tensor that
  // never comes, are no progress); a step that keeps computing runs as long
  // as it needs. Moving variables waits as long. 0: no such deadline.
  int step_progress_timeout_ms = 60000;
  int heartbeat_ms = 200;
  int peer_timeout_ms = 1000;
  // Where Recover restores a lost member's variables from (the newest
  // committed checkpoint Save wrote there); "" = no checkpoint.
  std::string checkpoint_dir;
  // Where Recover restores them from instead, when set: a node checkpoint
  // directory (relative to the nodes' --checkpoint-dir) that SaveOnNodes
  // wrote, whose pieces the nodes read themselves.
  std::string node_checkpoint_dir;
  // Before a step, follow membership changes by themselves: spread tasks
  // onto members that joined, move them off draining ones (state moved by
  // messages), and recover tasks of members that died (Recover(false)).
  // On a cluster with a shard map (etcd) the map decides, for every session
  // alike: a session that is not elastic follows it when a node refuses a
  // step as placed by a stale map (the step then runs again on the new
  // holders, by itself), and recovers lost tasks only when Recover is called.
  bool elastic = true;
  // On a cluster with a shard map: a step that failed because a node holding
  // part of it went down (Unavailable) or refused it as placed by a stale
  // map (a move or failover) runs again by itself, after the session
  // followed the map (an elastic session restores a slot whose state was
  // lost from its checkpoint first; one that is not elastic fails such a
  // step), for up to this long from its start and at most 15 times more. Each of its updates is applied once over all its runs
  // (kernels/update_origin.h). Steps with ops that cannot run again (queues,
  // readers, checkpoint ops, synchronous replicas, all-reduce) fail as they
  // did. 0: never run again; at most 60000 (shards remember 120 s of
  // updates), else Connect returns InvalidArgument.
  int step_retry_ms = 30000;
};

// What one reconfiguration of a ClusterSession did.
struct ClusterChange {
  std::vector<std::string> lost;      // members found dead (their tasks were restored)
  std::vector<std::string> drained;   // draining members whose tasks moved away
  std::vector<std::string> added;     // members that took tasks for the first time
  std::vector<int> moved_tasks;       // tasks moved from a live member (state by messages)
  std::vector<int> restored_tasks;    // tasks whose variables came from the checkpoint
  // Variables (and slots) this session moved by messages: 0 on a cluster
  // with a shard map (etcd), where the placement leader moves them (its
  // node logs each move).
  int64_t variables_moved = 0;
  int64_t variables_restored = 0;     // variables (and slots) assigned from the checkpoint
  int64_t bytes_moved = 0;            // their sizes
  int64_t bytes_restored = 0;
  int64_t checkpoint_id = -1;         // the checkpoint restored from (-1: none)
  int64_t global_step = -1;           // its global step (-1: none)
  double seconds = 0;                 // time taken, steps paused
  bool changed() const { return !moved_tasks.empty() || !restored_tasks.empty(); }
};

// What one namespace (a session credential's: `shardflow certs issue
// --namespace`) holds on a cluster's nodes, summed over them.
struct NamespaceInfo {
  std::string name;  // "default" for the default namespace
  int64_t variables = 0;
  int64_t tables = 0;
  int64_t queues = 0;
  int64_t bytes = 0;     // declared bytes of its dense variables and RAM of its hash tables' rows
  int64_t sessions = 0;  // sessions with partitions on the nodes
  int64_t nodes = 0;     // nodes holding some of it
};

// Each namespace's state on the members of cluster `cluster` that etcd
// lists (`shardflow cluster namespaces`), asked with credential tls_name in
// tls_dir ("" = "session": a session credential sees its own namespace only)
// or insecure. Unavailable naming etcd or the first node that cannot be asked.
Result<std::vector<NamespaceInfo>> ListClusterNamespaces(const std::string& etcd, const std::string& tls_dir,
                                                         const std::string& cluster = "default",
                                                         const std::string& tls_name = "", bool insecure = false);

// Drops namespace ns on every member etcd lists (`shardflow cluster
// namespaces drop NS`): its sessions there close, its variables, tables and
// queues go; what it held, as ListClusterNamespaces counts it. A session
// credential may drop only its own namespace (PermissionDenied otherwise);
// Unavailable naming the first node that could not be asked (the others
// dropped it: run it again).
Result<NamespaceInfo> DropClusterNamespace(const std::string& etcd, const std::string& tls_dir, const std::string& ns,
                                           const std::string& cluster = "default", const std::string& tls_name = "",
                                           bool insecure = false);

// One member in a node's view of the membership.
struct MemberInfo {
  std::string name;
  std::string address;       // HOST:PORT
  uint64_t incarnation = 0;  // its life: its key's revision in etcd (new when it registers again)
  std::string state;         // "alive" or "leaving" (draining)
};

// The members the node at address knows, itself first (`shardflow node
// members`), asked with credential tls_name in tls_dir ("" = "session"; any
// role may list) or insecure. Unavailable naming the address when it cannot
// be reached, PermissionDenied when TLS fails.
Result<std::vector<MemberInfo>> ListClusterMembers(const std::string& address, const std::string& tls_dir,
                                                   const std::string& tls_name = "", bool insecure = false);

// The members of cluster `cluster` as etcd lists them (`shardflow cluster
// members --etcd`), in the order they joined; incarnation is each one's life
// (its key's revision in etcd). etcd is "HOST:PORT[,HOST:PORT...]", reached
// with credential tls_name in tls_dir ("" = "session") or, insecure, in
// plaintext. Unavailable / PermissionDenied naming etcd when it cannot be read.
Result<std::vector<MemberInfo>> ListEtcdMembers(const std::string& etcd, const std::string& tls_dir,
                                                const std::string& cluster = "default",
                                                const std::string& tls_name = "", bool insecure = false);

// Turns on etcd's authentication for cluster `cluster` (`shardflow cluster
// auth`): makes the operator credential "admin" in tls_dir when missing, an
// etcd user per credential of tls_dir (its password derived from its key)
// with what its role may read and write (docs/CLUSTER.md, "Messages and
// security"), and turns authentication on. Run it where the CA key is, again
// after issuing credentials; idempotent. NotFound naming ca.key, or etcd's
// errors naming the call.
Status EnableClusterAuth(const std::string& etcd, const std::string& tls_dir, const std::string& cluster = "default");

// Drains member `member` (its name or HOST:PORT) of cluster `cluster`
// through etcd (`shardflow node drain --etcd`): writes the operator's drain
// mark, on which the node marks itself leaving, sessions move its tasks away
// and it leaves. With credential tls_name in tls_dir ("" = "admin", the
// operator's; etcd refuses any node's or session's mark of another node),
// or insecure (plaintext etcd). Waits up to wait_ms for it to be gone (0:
// not at all). NotFound naming the member when etcd lists none such,
// PermissionDenied when etcd refuses the credential, DeadlineExceeded when
// it is still a member after wait_ms.
Status DrainMember(const std::string& etcd, const std::string& tls_dir, const std::string& member, int wait_ms,
                   const std::string& cluster = "default", const std::string& tls_name = "", bool insecure = false);

// The cluster's shard map as etcd holds it (`shardflow cluster map`): which
// member serves each slot (logical task "/job:worker/task:S"), decided by
// the cluster's placement leader; epoch is its revision in etcd (0: no map
// written yet). A slot with a moving_from entry is being moved.
struct ShardMapInfo {
  int64_t epoch = 0;
  std::vector<std::string> holder;       // by slot: HOST:PORT
  std::vector<std::string> moving_from;  // by slot: "" or the HOST:PORT it moves from
  std::vector<int64_t> lost_after;       // by slot: 0, or the epoch after which its state was lost
  std::vector<std::string> backup;       // by slot: "" or the HOST:PORT holding its replica (--replicas 2)
  std::vector<uint8_t> synced;           // by slot: 1 once the backup holds the slot's whole state
};
// Reads it, with credential tls_name in tls_dir ("" = "session") or
// insecure; Unavailable / PermissionDenied naming etcd when it cannot be
// read, DataLoss when the map does not parse.
Result<ShardMapInfo> ReadClusterMap(const std::string& etcd, const std::string& tls_dir,
                                    const std::string& cluster = "default", const std::string& tls_name = "",
                                    bool insecure = false);

// Creates a cluster CA with the credentials "node" and "session" in dir
// (`shardflow certs init`); FailedPrecondition when dir already has a CA.
Status InitClusterCredentials(const std::string& dir);
// Issues credential name for role "node" or "session" in dir, valid for
// hosts, a session's in namespace ns ("": the default one) (`shardflow certs
// issue`); InvalidArgument for a bad name, role or namespace.
Status IssueClusterCredential(const std::string& dir, const std::string& role, const std::string& name,
                              const std::vector<std::string>& hosts = {}, const std::string& ns = "");
// Makes fresh credentials in a new temporary directory (for local clusters
// that need no setup step); its path. The caller removes it.
Result<std::string> MakeTemporaryClusterCredentials();

// An etcd server (Debian's etcd 3.4) run as a child process on 127.0.0.1
// with mutual TLS from a cluster credentials directory, for local clusters
// and tests that need no setup step: nodes take `--etcd endpoint()`. It
// keeps its data in a temporary directory removed when it is destroyed, and
// dies with this process. Thread-safety: methods may be called from any thread.
class LocalEtcd {
 public:
  // Starts etcd (issuing its credential "etcd" in tls_dir when missing) and
  // waits until it answers; Unavailable with the end of etcd's log when it
  // does not start, NotFound when /usr/bin/etcd is missing (apt-get install
  // etcd-server). insecure: plain HTTP without credentials (tls_dir unused),
  // for clusters whose nodes run insecure.
  static Result<std::unique_ptr<LocalEtcd>> Start(const std::string& tls_dir, bool insecure = false);
  ~LocalEtcd();
  // "127.0.0.1:PORT", its client address (the same after Restart).
  const std::string& endpoint() const;
  // SIGSTOP / SIGCONT (a hung etcd), a restart on the same data and port,
  // SIGKILL; FailedPrecondition when it does not run.
  Status Pause();
  Status Resume();
  Status Restart();
  Status Kill();

  struct Impl;

 private:
  explicit LocalEtcd(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class ClusterSession : public SessionInterface {
 public:
  // Connects to options.address, learns the members and connects to each.
  // Unavailable naming an unreachable member, PermissionDenied when TLS with
  // a member fails. REQUIRES: g outlives the session and is not modified while it runs.
  static Result<std::unique_ptr<ClusterSession>> Connect(const Graph& g, ClusterOptions options);
  ~ClusterSession() override;
  ClusterSession(const ClusterSession&) = delete;
  ClusterSession& operator=(const ClusterSession&) = delete;

  // Steps run through SessionInterface's Run and RunAsync. Besides the
  // local session's errors: Unavailable naming the node when a member of
  // the step goes down, Aborted when another part of the step failed first.
  const Graph& graph() const override;
  // The members steps run on, by task index (HOST:PORT).
  std::vector<std::string> tasks() const;
  // How many times a failed step ran again (ClusterOptions::step_retry_ms).
  int64_t retried_steps() const;

  // Checkpoints every initialised variable (and slot) of the graph, read
  // from the nodes that hold them, into the RocksDB store in dir under
  // global_step, then keeps the newest keep_last (<= 0: all). Each variable
  // is read atomically; call it between steps for a consistent checkpoint.
  // Returns the id; Unavailable naming the member or dir on failure.
  Result<int64_t> Save(const std::string& dir, int64_t global_step, int keep_last = 0);
  // Assigns the graph's variables on their nodes from checkpoint id in dir
  // (-1: newest readable); errors as Session::Restore (nothing is assigned
  // when the checkpoint does not fit the graph).
  Status Restore(const std::string& dir, int64_t id = -1, int64_t* global_step = nullptr);
  // Node checkpoints: every node writes the variables (and slots) of its
  // tasks into its own --checkpoint-dir under dir (relative to it), all
  // nodes at once with steps paused, then task 0's node commits the
  // checkpoint and keeps the newest keep_last (<= 0: all). No value passes
  // through this process. Returns the checkpoint's id; FailedPrecondition
  // when a node has no --checkpoint-dir, InvalidArgument for an absolute
  // dir or one with "..", a node's error naming it otherwise (nothing is
  // committed then).
  Result<int64_t> SaveOnNodes(const std::string& dir, int64_t global_step, int keep_last = 0);
  // Has the node of every task assign the task's variables from node
  // checkpoint id in dir (-1: the newest readable), all at once with steps
  // paused. A task restored on another node than the one that wrote it
  // reads that node's piece: the nodes' --checkpoint-dir must be storage
  // they share (one machine, a shared file system). NotFound naming the
  // checkpoint, piece or variable (a graph whose tables are sharded
  // differently restores through Restore); the node's error naming it.
  Status RestoreFromNodes(const std::string& dir, int64_t id = -1, int64_t* global_step = nullptr);
  // SessionInterface's checkpoints: Save and Restore.
  Result<int64_t> SaveCheckpoint(const std::string& dir, int64_t global_step, int keep_last = 0) override {
    return Save(dir, global_step, keep_last);
  }
  // A cluster does not track changed rows: every checkpoint is full.
  Result<int64_t> SaveIncrementalCheckpoint(const std::string& dir, int64_t global_step, int keep_last = 0) override {
    return Save(dir, global_step, keep_last);
  }
  Status RestoreCheckpoint(const std::string& dir, int64_t id = -1, int64_t* global_step = nullptr) override {
    return Restore(dir, id, global_step);
  }
  // Re-forms the session over the members alive now, pausing steps: tasks of
  // dead members move to live ones and get their variables from the newest
  // checkpoint in ClusterOptions::node_checkpoint_dir (read by the nodes) or
  // else ClusterOptions::checkpoint_dir (the others keep their live
  // state, or, with roll_back_all, every variable is restored from it, for
  // exact replay from its global step); tasks of draining members move
  // (state by messages), and tasks spread onto new members. FailedPrecondition
  // naming the variables when a dead member's variables have no checkpoint
  // (the tasks still moved: the variables are uninitialised), Unavailable
  // when no member is alive.
  Result<ClusterChange> Recover(bool roll_back_all = false);
  // The reconfigurations done so far (by Recover or before steps), oldest first.
  std::vector<ClusterChange> Changes() const;

  // What CompareReplicas found.
  struct ReplicaComparison {
    int slots = 0;                          // the session's slots compared (with a synced backup)
    int64_t variables = 0;                  // variables compared on a holder and its backup
    int64_t bytes = 0;                      // bytes compared
    std::vector<int> unsynced;              // tasks whose backup is being copied (not compared)
    std::vector<std::string> differences;   // one line per variable that differs; empty: identical
  };
  // Reads every variable of the session's tasks (optimizer slots and hash
  // tables with their counters included) from the holder of each task's
  // slot in `map` (ReadClusterMap) and from its synced backup, one variable
  // at a time, and compares them bit for bit. Call it with no step running,
  // or what a step changes between the two reads differs. Unavailable naming
  // the member that cannot be read; FailedPrecondition for a map of fewer
  // slots than the session has tasks.
  Result<ReplicaComparison> CompareReplicas(const ShardMapInfo& map);

  struct Impl;

 protected:
  void StartRun(const RunOptions& options, NamedFeeds feeds, std::vector<std::string> fetches,
                std::vector<std::string> targets, std::function<void(Result<std::vector<Tensor>>)> done) override;

 private:
  explicit ClusterSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sf
