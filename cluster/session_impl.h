// The inside of a ClusterSession (include/shardflow/cluster.h), shared by
// its files: cluster_session.cc (connecting, steps, checkpoints, the public
// methods) and session_reconfigure.cc (learning the members, moving tasks
// and their variables, restoring lost ones). Not a public header.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <caf/all.hpp>

#include "actors/caf_thread_logger.h"
#include "actors/checkpoint_io.h"
#include "actors/coordinator_actor.h"
#include "cluster/remote_partition_host.h"
#include "cluster/shard_map.h"
#include "cluster/step_deadlines.h"
#include "actors/serial_queue.h"
#include "cluster/task_balance.h"
#include "graph/device_name.h"
#include "net/peer_rpc.h"
#include "runtime/coordinator.h"
#include "runtime/plan.h"
#include "shardflow/cluster.h"

namespace sf {
namespace cluster_session_detail {

// A backstop for a step and for what has no deadline of its own: dead and
// hung nodes are found by heartbeats, steps that stopped progressing by
// StepDeadlines (ClusterOptions::step_progress_timeout_ms).
inline constexpr int kStepTimeoutMs = 24 * 3600 * 1000;

using net::Call;

inline std::string TaskDevice(int task) {
  return "/job:worker/task:" + std::to_string(task) + "/device:CPU:0";
}

}  // namespace cluster_session_detail

struct ClusterSession::Impl : net::Handler {
  // What nodes tell a session (cluster_session.cc): its steps' progress
  // (on the I/O thread: it only restarts a deadline) and membership views.
  bool OnIoThread(const std::type_info& message) const override { return message == typeid(net::StepProgress); }
  void OnProgress(const net::ConnectionPtr& from, net::StepProgress p) override;
  void OnMembership(const net::ConnectionPtr& from, net::Membership m) override;

  const Graph& graph;
  ClusterOptions options;
  // Before the endpoint: its handlers report progress into it until it is gone.
  std::shared_ptr<runtime::StepDeadlines> deadlines;  // null: no no-progress deadline
  std::unique_ptr<net::Endpoint> endpoint;
  int num_tasks = 0;

  // Moving a variable waits behind the steps using its shard: as long as a step may stall.
  int VariablesTimeoutMs() const {
    return options.step_progress_timeout_ms > 0
               ? std::max(options.request_timeout_ms, options.step_progress_timeout_ms)
               : cluster_session_detail::kStepTimeoutMs;
  }

  // The assignment of tasks to members and the connections, changed only
  // while steps are paused (gate below); read under conf_mu.
  mutable std::mutex conf_mu;
  std::vector<std::string> assignment;                  // GUARDED_BY(conf_mu): member by task
  std::map<std::string, net::ConnectionPtr> conns;      // GUARDED_BY(conf_mu): by member address
  // Members dialed again after their connection went down: a node forgets
  // the partitions of a client whose connection went away, so the next
  // reconfiguration registers them anew even when no task moves.
  std::set<std::string> redialed;                       // GUARDED_BY(conf_mu)
  uint64_t session_id = 0;                              // GUARDED_BY(conf_mu)
  std::vector<ClusterChange> changes;                   // GUARDED_BY(conf_mu)
  std::set<std::string> ever_used;                      // GUARDED_BY(conf_mu): members given tasks
  // Variables that lost their member and still wait for their checkpoint value.
  std::set<std::string> pending_restore;                // GUARDED_BY(conf_mu)
  // Node checkpoints whose pieces the next SaveOnNodes of a dir has every
  // node delete (dropped by retention, or a failed save's), by dir.
  std::map<std::string, std::vector<uint64_t>> node_checkpoint_drops;  // GUARDED_BY(conf_mu)
  std::atomic<bool> restore_pending{false};

  // The cluster places by a shard map (etcd clusters): tasks go where the
  // map says and its placement leader moves their state, not this session
  // (cluster/session_map.cc). Set at Connect.
  bool map_mode = false;
  int64_t reg_epoch = 0;  // GUARDED_BY(conf_mu): the map epoch the registrations were placed by
  // A membership push came (map_cv wakes a wait for a settled map).
  std::mutex map_mu;
  std::condition_variable map_cv;

  // Hints that the membership changed (set by connection handler threads); the
  // reconfiguration before the next step finds out what exactly.
  std::atomic<bool> membership_changed{false};
  std::atomic<bool> member_down{false};
  // A node refused a step as placed by a stale shard map: the session
  // follows the map before the step runs again, elastic or not.
  std::atomic<bool> stale_map{false};
  std::atomic<int64_t> retried_steps{0};
  // Every member address seen in a membership list: when every member we
  // are connected to died, one of these may still lead to the cluster.
  std::set<std::string> known;  // GUARDED_BY(conf_mu)
  // When the connection to each member went down last (a closed socket or
  // no heartbeat): SettledMap does not dial a holder that went silent within
  // kSilentMs (a hung node would hold it for a handshake's timeout while the
  // map is about to move its slots).
  std::map<std::string, int64_t> down_since;  // GUARDED_BY(conf_mu)
  static constexpr int64_t kSilentMs = 3000;
  void Learn(const net::Membership& m) {
    std::lock_guard<std::mutex> l(conf_mu);
    for (const auto& k : m.members) known.insert(k.address);
  }

  // Steps pause while the session reconfigures: new steps wait for the
  // reconfiguration, and one that moves state itself (no shard map, a
  // checkpoint restore or save) waits for the steps in flight.
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  int active_steps = 0;        // GUARDED_BY(gate_mu)
  // Steps let through and not yet sent to their hosts (planning or
  // registering on the current session id): every reconfiguration waits
  // for them, since it drops the plans and closes that registration.
  int starting_steps = 0;      // GUARDED_BY(gate_mu)
  // Steps started and not ended, by the session id they were registered
  // under; and the ids a reconfiguration replaced while some of theirs ran,
  // with the connections to close them on once the last ends (closing
  // earlier drops the tensors their parts still send each other).
  std::map<uint64_t, int> steps_of_session;                                  // GUARDED_BY(gate_mu)
  std::map<uint64_t, std::vector<net::ConnectionPtr>> retired_sessions;      // GUARDED_BY(gate_mu)
  bool reconfiguring = false;  // GUARDED_BY(gate_mu)

  // Plans and steps; its hosts are those below.
  std::unique_ptr<runtime::Coordinator> coordinator;
  // The hosts of the current session id, by member address: a
  // reconfiguration drops them with the coordinator's plans.
  std::map<std::string, std::shared_ptr<runtime::PartitionHost>> hosts;  // GUARDED_BY(conf_mu)

  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;  // GUARDED_BY(mu)

  // RunAsync's callbacks run on this queue's thread, never on the
  // connection's I/O thread (a step's reply is handled there): a callback
  // that takes a while would stop every connection's reads and heartbeats,
  // and the nodes would look hung.
  runtime::SerialQueue callbacks;
  // The coordinator's own actor: registration and reconfiguration, which
  // wait on the network, run there, so RunAsync never blocks its caller.
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  runtime::CoordinatorActor coordinator_actor;

  Impl(const Graph& g, ClusterOptions o) : graph(g), options(std::move(o)) {}
  // Builds the coordinator over num_tasks tasks and starts its actor.
  void StartCoordinator();

  // Runs fn on the callback thread.
  void Post(std::function<void()> fn) { callbacks.Post(std::move(fn)); }
  // True when a step of signature key can start on the caller's thread
  // without waiting: no reconfiguration due or running, the plan
  // registered. A hint (the state may change right after); Start is
  // correct either way.
  bool CanStartInline(const std::string& key) {
    if (restore_pending || stale_map || (options.elastic && (membership_changed || member_down))) return false;
    {
      std::lock_guard<std::mutex> l(gate_mu);
      if (reconfiguring) return false;
    }
    return coordinator->Find(key) != nullptr;
  }
  // Starts a step of signature key, reconfiguring and registering first
  // when needed (blocking); done runs on the callback thread.
  void Start(const NamedFeeds& feeds, const std::vector<std::string>& fetches,
             const std::vector<std::string>& targets, const std::string& key,
             std::function<void(Result<std::vector<Tensor>>)> done, const RunOptions& run_options = {});
  // One run of a step (Start's, or a run again of a failed one): follows the
  // membership first when needed, then starts it under step id `step`
  // (0: a new one); finish gets its result, or the next run's.
  struct StepCall {
    NamedFeeds feeds;
    std::vector<std::string> fetches, targets;
    std::string key;
    RunOptions run_options;
    int64_t step = 0;      // the first run's step id (0: not started yet)
    int attempt = 0;
    int64_t started_ms = 0;
    int64_t map_epoch = -1;  // of the settled map the last run again followed
  };
  void Attempt(std::shared_ptr<StepCall> call, std::function<void(Result<std::vector<Tensor>>)> finish);
  // Whether a step that failed with s runs again (step_retry_ms); waits a
  // little first when the membership has not changed since.
  bool RunAgain(const Status& s, StepCall& call, bool repeatable);
  // The host of a task's device: the member the task is assigned to now.
  Result<std::shared_ptr<runtime::PartitionHost>> HostFor(const std::string& device);
  // The variables (shared names, slots included) placed on each task; the
  // placement's error when the graph cannot be placed.
  Result<std::vector<std::vector<std::string>>> TaskVariables();

  // The connection to member addr (dialed when missing or down).
  Result<net::ConnectionPtr> Conn(const std::string& addr);
  // The live members that may take tasks (not draining), in the cluster's
  // order, and the draining ones, asked of any member that answers.
  Status ListLive(std::vector<std::string>* live, std::set<std::string>* draining);
  // The membership (with the shard map) from any member that answers.
  Result<net::Membership> AskMembership();
  // Waits (up to VariablesTimeoutMs) until the map is settled for this
  // session's tasks: written, none of them moving, each held by a listed
  // member; that membership. InvalidArgument when the map has fewer slots
  // than the session's tasks.
  Result<net::Membership> SettledMap();
  // Whether the connection to member addr went down within kSilentMs and
  // none is up now.
  bool SilentLately(const std::string& addr);
  // Reconfigure's plan in map mode: the assignment before and after, the
  // session before, the map's epoch, the variables by task, and which tasks
  // moved (their state moved by the leader) or were lost (restore_names).
  Status PlanByMap(std::vector<std::string>* old, std::vector<std::string>* now, uint64_t* old_session,
                   int64_t* epoch, std::vector<std::vector<std::string>>* vars, ClusterChange* change,
                   std::set<std::string>* restore_names, std::set<std::string>* lost, std::set<std::string>* drained,
                   std::set<std::string>* added);
  // The initialised variables among names on member addr.
  Result<std::vector<std::pair<std::string, Tensor>>> ReadVariables(const std::string& addr,
                                                                    const std::vector<std::string>& names);
  // Assigns values (name, tensor) on member addr.
  Status AssignVariables(const std::string& addr, std::vector<std::pair<std::string, Tensor>> values);
  // Pauses steps: no new one starts until ResumeSteps; with drain, also
  // waits for those in flight (which may wait forever for a step that
  // cannot start, as a dequeue feeding a blocked enqueue: only callers that
  // move state themselves drain). Either way it waits for the steps being
  // started (starting_steps).
  void PauseSteps(bool drain = true);
  void ResumeSteps();
  // Closes session id `sid` on conns (one-way, best effort) once no step
  // registered under it runs; at once when none does.
  void RetireSession(uint64_t sid, std::vector<net::ConnectionPtr> conns);
  // Counts a step of session sid ended (in active_steps too); closes sid if
  // it was retired and this was its last.
  void EndStep(uint64_t sid);
  // Recover with steps paused.
  Result<ClusterChange> Reconfigure(bool roll_back_all);
  // Assigns checkpoint values on the members holding their tasks (now:
  // member by task; vars: variables by task), counting them into change.
  Status AssignToOwners(const std::vector<std::string>& now, const std::vector<std::vector<std::string>>& vars,
                        std::vector<runtime::CheckpointValue> values, ClusterChange* change);
  // Assigns the pending variables from the newest checkpoint on their
  // members (now: member by task); clears them on success.
  // Has the node of each task t (now[t]) assign names[t] from node
  // checkpoint id (-1: newest readable) in dir, all at once; what was
  // restored (variables, bytes, checkpoint id and step), or the first error.
  Result<ClusterChange> RestoreTasksFromNodes(const std::string& dir, int64_t id, const std::vector<std::string>& now,
                                              const std::vector<std::vector<std::string>>& names);
  Status RestorePending(const std::vector<std::string>& now, const std::vector<std::vector<std::string>>& vars,
                        const std::string& who, ClusterChange* change);
};

}  // namespace sf
