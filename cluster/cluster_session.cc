// ClusterSession (include/shardflow/cluster.h): the client's side of a graph
// on a cluster. Planning and steps are the local Session's coordinator
// (runtime/coordinator.h) over the tasks' devices, each device's partitions
// hosted on the member its task is assigned to (cluster/remote_partition_host.h):
// per run signature it prunes, places, partitions and registers once; a step
// is one RunPartition request per partition, and the first failing partition
// aborts the step on every node of the step, so no partition waits for a
// tensor that will never come. What is this file's own is the membership.
//
// Tasks are logical: the graph is placed over `tasks` devices once, and
// each task is assigned to a member. Reconfiguring (Recover, or before a
// step after the membership changed) changes only that assignment: moved
// tasks take their variables along (read from the old member and assigned
// on the new one, or restored from the checkpoint when the old one died),
// and partitions are registered again under a new session id, because the
// nodes' rendezvous map tasks to members per session.
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
#include "cluster/step_deadlines.h"
#include "actors/serial_queue.h"
#include "cluster/task_balance.h"
#include "graph/device_name.h"
#include "net/peer_rpc.h"
#include "runtime/coordinator.h"
#include "runtime/plan.h"
#include "shardflow/cluster.h"

namespace sf {

namespace {

// A backstop for a step and for what has no deadline of its own: dead and
// hung nodes are found by heartbeats, steps that stopped progressing by
// StepDeadlines (ClusterOptions::step_progress_timeout_ms).
constexpr int kStepTimeoutMs = 24 * 3600 * 1000;

using net::Call;
using net::CallStatus;

std::string TaskDevice(int task) {
  return "/job:worker/task:" + std::to_string(task) + "/device:CPU:0";
}

}  // namespace

struct ClusterSession::Impl {
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
               : kStepTimeoutMs;
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
  std::atomic<bool> restore_pending{false};

  // Hints that the membership changed (set by connection handler threads); the
  // reconfiguration before the next step finds out what exactly.
  std::atomic<bool> membership_changed{false};
  std::atomic<bool> member_down{false};
  // Every member address seen in a membership list: when every member we
  // are connected to died, one of these may still lead to the cluster.
  std::set<std::string> known;  // GUARDED_BY(conf_mu)
  void Learn(const net::Membership& m) {
    std::lock_guard<std::mutex> l(conf_mu);
    for (const auto& k : m.members) known.insert(k.address);
  }

  // Steps pause while the session reconfigures: a reconfiguration waits for
  // the steps in flight, and steps wait for it.
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  int active_steps = 0;        // GUARDED_BY(gate_mu)
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
    if (restore_pending || (options.elastic && (membership_changed || member_down))) return false;
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
  // The initialised variables among names on member addr.
  Result<std::vector<std::pair<std::string, Tensor>>> ReadVariables(const std::string& addr,
                                                                    const std::vector<std::string>& names);
  // Assigns values (name, tensor) on member addr.
  Status AssignVariables(const std::string& addr, std::vector<std::pair<std::string, Tensor>> values);
  // Pauses steps (waits for those in flight) / lets them go on.
  void PauseSteps();
  void ResumeSteps();
  // Recover with steps paused.
  Result<ClusterChange> Reconfigure(bool roll_back_all);
  // Assigns checkpoint values on the members holding their tasks (now:
  // member by task; vars: variables by task), counting them into change.
  Status AssignToOwners(const std::vector<std::string>& now, const std::vector<std::vector<std::string>>& vars,
                        std::vector<runtime::CheckpointValue> values, ClusterChange* change);
  // Assigns the pending variables from the newest checkpoint on their
  // members (now: member by task); clears them on success.
  Status RestorePending(const std::vector<std::string>& now, const std::vector<std::vector<std::string>>& vars,
                        const std::string& who, ClusterChange* change);
};

Result<net::ConnectionPtr> ClusterSession::Impl::Conn(const std::string& addr) {
  {
    std::lock_guard<std::mutex> l(conf_mu);
    auto it = conns.find(addr);
    if (it != conns.end() && it->second->is_up()) return it->second;
  }
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, endpoint->Connect(addr));
  // Listing the members makes the node tell us when they change.
  auto r = Call(c, net::ListMembers{}, options.request_timeout_ms);
  if (!r.ok()) return r.status().WithPrefix("listing the members of " + addr);
  std::lock_guard<std::mutex> l(conf_mu);
  auto& slot = conns[addr];
  if (slot) redialed.insert(addr);
  slot = c;
  return c;
}

Status ClusterSession::Impl::ListLive(std::vector<std::string>* live, std::set<std::string>* draining) {
  std::vector<std::string> candidates;
  {
    std::lock_guard<std::mutex> l(conf_mu);
    for (const auto& kv : conns)
      if (kv.second->is_up()) candidates.push_back(kv.first);
    // Then members we only heard of (they joined after our last look).
    for (const auto& k : known)
      if (std::find(candidates.begin(), candidates.end(), k) == candidates.end()) candidates.push_back(k);
  }
  Status last = Unavailable("no member of the session is alive");
  for (const auto& addr : candidates) {
    auto c = Conn(addr);
    if (!c.ok()) {
      last = c.status();
      continue;
    }
    auto r = Call(*c, net::ListMembers{}, options.request_timeout_ms);
    if (!r.ok()) {
      last = r.status();
      continue;
    }
    auto* mem = std::get_if<net::Membership>(&r->body);
    if (!mem) {
      last = Internal(std::string("unexpected reply ") + net::BodyName(r->body) + " to ListMembers");
      continue;
    }
    Learn(*mem);
    live->clear();
    draining->clear();
    for (const auto& m : mem->leaving) draining->insert(m.address);
    for (const auto& m : mem->members)
      if (!draining->count(m.address)) live->push_back(m.address);
    if (!live->empty()) return Status::OK();
    last = Unavailable("every member is draining");
  }
  return last;
}

Result<std::vector<std::pair<std::string, Tensor>>> ClusterSession::Impl::ReadVariables(
    const std::string& addr, const std::vector<std::string>& names) {
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, Conn(addr));
  std::vector<std::pair<std::string, Tensor>> out;
  // One variable per message: a big table and its slots together could pass
  // a frame's limit.
  for (const std::string& name : names) {
    auto r = Call(c, net::Variables{false, {name}, {}}, VariablesTimeoutMs());
    if (!r.ok()) return r.status().WithPrefix("reading variable '" + name + "' from " + addr);
    if (auto* e = std::get_if<net::StatusReply>(&r->body); e && !e->status.ok())
      return e->status.WithPrefix("reading variable '" + name + "' from " + addr);
    auto* v = std::get_if<net::Variables>(&r->body);
    if (!v || v->names.size() != v->values.size())
      return Internal("reading variable '" + name + "' from " + addr + ": unexpected reply " +
                      net::BodyName(r->body));
    for (size_t i = 0; i < v->names.size(); ++i) out.emplace_back(std::move(v->names[i]), std::move(v->values[i]));
  }
  return out;
}

Status ClusterSession::Impl::AssignVariables(const std::string& addr,
                                             std::vector<std::pair<std::string, Tensor>> values) {
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, Conn(addr));
  // Variables before their slots, so a slot lands in its variable's shard actor.
  std::sort(values.begin(), values.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [name, value] : values) {
    Status s = CallStatus(c, net::Variables{true, {name}, {std::move(value)}}, VariablesTimeoutMs());
    if (!s.ok()) return s.WithPrefix("assigning variable '" + name + "' on " + addr);
  }
  return Status::OK();
}

void ClusterSession::Impl::PauseSteps() {
  std::unique_lock<std::mutex> l(gate_mu);
  gate_cv.wait(l, [&] { return !reconfiguring; });
  reconfiguring = true;
  gate_cv.wait(l, [&] { return active_steps == 0; });
}

void ClusterSession::Impl::ResumeSteps() {
  std::lock_guard<std::mutex> l(gate_mu);
  reconfiguring = false;
  gate_cv.notify_all();
}

Result<ClusterChange> ClusterSession::Impl::Reconfigure(bool roll_back_all) {
  const auto t0 = std::chrono::steady_clock::now();
  ClusterChange change;
  // Cleared first: a change that lands while we work sets them again.
  membership_changed = false;
  member_down = false;
  std::vector<std::string> live;
  std::set<std::string> draining;
  SF_RETURN_IF_ERROR(ListLive(&live, &draining));
  // Only members we can reach take tasks.
  std::vector<std::string> usable;
  for (const auto& m : live)
    if (Conn(m).ok()) usable.push_back(m);
  if (usable.empty()) return Unavailable("no live member of the cluster can be reached");
  if (options.max_tasks > 0 && static_cast<int>(usable.size()) > options.max_tasks) {
    // Keep the members already in use first, so capping never moves tasks needlessly.
    std::vector<std::string> kept;
    std::set<std::string> current;
    {
      std::lock_guard<std::mutex> l(conf_mu);
      current.insert(assignment.begin(), assignment.end());
    }
    for (const auto& m : usable)
      if (current.count(m) && static_cast<int>(kept.size()) < options.max_tasks) kept.push_back(m);
    for (const auto& m : usable)
      if (!current.count(m) && static_cast<int>(kept.size()) < options.max_tasks) kept.push_back(m);
    usable = kept;
  }
  std::vector<std::string> old;
  uint64_t old_session = 0;
  {
    std::lock_guard<std::mutex> l(conf_mu);
    old = assignment;
    old_session = session_id;
  }
  std::vector<std::string> now = runtime::BalanceTasks(old, usable);
  // A graph that cannot be placed has no variables on any task to move.
  std::vector<std::vector<std::string>> vars;
  if (auto v = TaskVariables(); v.ok()) vars = std::move(v).value();
  vars.resize(static_cast<size_t>(num_tasks));
  std::set<std::string> alive(live.begin(), live.end());
  for (const auto& d : draining) alive.insert(d);
  // Moves between live members first: they cannot fail for want of a checkpoint.
  std::set<std::string> restore_names;
  std::set<std::string> lost, drained, added;
  for (int t = 0; t < num_tasks; ++t) {
    if (old[t] == now[t]) continue;
    auto c = Conn(old[t]);
    const bool old_alive = alive.count(old[t]) && c.ok();
    {
      std::lock_guard<std::mutex> l(conf_mu);
      if (!ever_used.count(now[t])) added.insert(now[t]);
    }
    if (!old_alive) {
      lost.insert(old[t]);
      change.restored_tasks.push_back(t);
      restore_names.insert(vars[t].begin(), vars[t].end());
      continue;
    }
    if (draining.count(old[t])) drained.insert(old[t]);
    change.moved_tasks.push_back(t);
    if (roll_back_all) continue;  // everything comes from the checkpoint
    SF_ASSIGN_OR_RETURN(auto values, ReadVariables(old[t], vars[t]));
    change.variables_moved += static_cast<int64_t>(values.size());
    for (const auto& v : values) change.bytes_moved += static_cast<int64_t>(v.second.bytes());
    SF_RETURN_IF_ERROR(AssignVariables(now[t], std::move(values)));
  }
  // The new assignment and session id; the old registrations are dropped.
  std::vector<net::ConnectionPtr> old_conns;
  bool register_again = change.changed() || roll_back_all;
  {
    std::lock_guard<std::mutex> l(conf_mu);
    for (const auto& a : now) register_again = register_again || redialed.count(a);
    redialed.clear();
    assignment = now;
    ever_used.insert(now.begin(), now.end());
    if (register_again) {
      std::random_device rd;
      session_id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    for (const auto& kv : conns)
      if (kv.second->is_up()) old_conns.push_back(kv.second);
    if (register_again) hosts.clear();
  }
  if (register_again) {
    for (const auto& c : old_conns) CallStatus(c, net::CloseSession{old_session}, 2000);  // best effort
    coordinator->Reset();
  }
  change.lost.assign(lost.begin(), lost.end());
  change.drained.assign(drained.begin(), drained.end());
  change.added.assign(added.begin(), added.end());
  // Variables of lost tasks (or all of them) come from the checkpoint. They
  // stay pending until a restore succeeds: a restore that fails is tried
  // again before every step, and no checkpoint is written without them.
  std::string who;
  for (const auto& l : lost) who += (who.empty() ? "" : ", ") + l;
  {
    std::lock_guard<std::mutex> l(conf_mu);
    if (roll_back_all)
      for (const auto& v : vars) pending_restore.insert(v.begin(), v.end());
    pending_restore.insert(restore_names.begin(), restore_names.end());
    restore_pending = !pending_restore.empty();
  }
  Status restored = RestorePending(now, vars, who, &change);
  const Code rc = restored.code();
  if (!restored.ok() && rc != Code::kUnavailable && rc != Code::kAborted && rc != Code::kDeadlineExceeded) {
    // Trying again cannot help (no checkpoint, or it lacks the variables):
    // the error is reported once and the variables stay uninitialised until
    // the program initialises or restores them.
    std::lock_guard<std::mutex> l(conf_mu);
    pending_restore.clear();
    restore_pending = false;
  }
  change.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> l(conf_mu);
    if (change.changed() || roll_back_all) changes.push_back(change);
  }
  if (!restored.ok()) return restored;
  return change;
}

Status ClusterSession::Impl::AssignToOwners(const std::vector<std::string>& now,
                                           const std::vector<std::vector<std::string>>& vars,
                                           std::vector<runtime::CheckpointValue> values, ClusterChange* change) {
  std::map<std::string, int> owner;
  for (size_t t = 0; t < vars.size(); ++t)
    for (const auto& n : vars[t]) owner[n] = static_cast<int>(t);
  std::map<std::string, std::vector<std::pair<std::string, Tensor>>> by_member;
  for (auto& v : values) {
    auto it = owner.find(v.name);
    if (it == owner.end() || it->second >= static_cast<int>(now.size())) continue;
    ++change->variables_restored;
    change->bytes_restored += static_cast<int64_t>(v.value.bytes());
    by_member[now[it->second]].emplace_back(v.name, std::move(v.value));
  }
  for (auto& kv : by_member) SF_RETURN_IF_ERROR(AssignVariables(kv.first, std::move(kv.second)));
  return Status::OK();
}

Status ClusterSession::Impl::RestorePending(const std::vector<std::string>& now,
                                           const std::vector<std::vector<std::string>>& vars,
                                           const std::string& who, ClusterChange* change) {
  std::set<std::string> names;
  {
    std::lock_guard<std::mutex> l(conf_mu);
    names = pending_restore;
  }
  if (names.empty()) return Status::OK();
  if (options.checkpoint_dir.empty())
    return FailedPrecondition((who.empty() ? std::string("rolling back:") : "member " + who + " went down, and") +
                              " the variables of its tasks (" + *names.begin() +
                              (names.size() > 1 ? " and " + std::to_string(names.size() - 1) + " more" : "") +
                              ") have no checkpoint to restore from: ClusterOptions::checkpoint_dir is empty");
  auto ckpt = runtime::ReadCheckpointForGraph(graph, options.checkpoint_dir, -1, &names);
  if (!ckpt.ok())
    return ckpt.status().WithPrefix("restoring the variables of the tasks of " +
                                    (who.empty() ? std::string("the session") : who));
  change->checkpoint_id = ckpt->id;
  change->global_step = ckpt->global_step;
  SF_RETURN_IF_ERROR(AssignToOwners(now, vars, std::move(ckpt->values), change));
  std::lock_guard<std::mutex> c(conf_mu);
  for (const auto& n : names) pending_restore.erase(n);
  restore_pending = !pending_restore.empty();
  return Status::OK();
}

Result<std::vector<std::vector<std::string>>> ClusterSession::Impl::TaskVariables() {
  std::shared_ptr<const runtime::GraphPlacement> p = coordinator->Placement();
  if (!p->error.ok()) return p->error;
  std::vector<std::vector<std::string>> out(static_cast<size_t>(num_tasks));
  for (int i = 0; i < graph.num_nodes() && i < static_cast<int>(p->device.size()); ++i) {
    const Node& n = graph.node(i);
    if (n.op != "VarHandle") continue;
    auto name = n.attrs.Get<std::string>("shared_name");
    auto dev = ParseDeviceName(p->device[i]);
    if (name.ok() && dev.ok() && dev->has_task && dev->task >= 0 && dev->task < num_tasks)
      out[dev->task].push_back(*name);
  }
  return out;
}

Result<std::shared_ptr<runtime::PartitionHost>> ClusterSession::Impl::HostFor(const std::string& device) {
  auto name = ParseDeviceName(device);
  std::string where;
  uint64_t sid = 0;
  std::vector<net::Member> tasks;
  {
    std::lock_guard<std::mutex> l(conf_mu);
    if (!name.ok() || !name->has_task || name->task < 0 || name->task >= static_cast<int>(assignment.size()))
      return InvalidArgument("device " + device + " is not a device of the cluster's " +
                             std::to_string(assignment.size()) + " tasks");
    where = assignment[name->task];
    auto it = hosts.find(where);
    if (it != hosts.end()) return it->second;
    sid = session_id;
    for (size_t i = 0; i < assignment.size(); ++i) tasks.push_back({"task" + std::to_string(i), assignment[i]});
  }
  auto conn = Conn(where);
  if (!conn.ok()) return conn.status().WithPrefix("registering the partition for " + device);
  runtime::RemoteHostOptions ro;
  ro.conn = *conn;
  ro.where = where;
  ro.session_id = sid;
  ro.tasks = std::move(tasks);
  ro.request_timeout_ms = options.request_timeout_ms;
  ro.step_timeout_ms = kStepTimeoutMs;
  ro.deadlines = deadlines;
  // A member the step needed is gone: the next step reconfigures first
  // (its connection's down report may have come before a failed
  // reconfiguration used it up).
  ro.on_unavailable = [this] { member_down = true; };
  auto host = runtime::NewRemotePartitionHost(std::move(ro));
  std::lock_guard<std::mutex> l(conf_mu);
  if (session_id != sid) return Unavailable("the session reconfigured while registering for " + device);
  return hosts.emplace(where, std::move(host)).first->second;
}

void ClusterSession::Impl::StartCoordinator() {
  ForgetCafThreadLogger forget;  // the system is made and spawns on the caller's thread
  runtime::CoordinatorOptions co;
  for (int i = 0; i < num_tasks; ++i) co.devices.push_back(TaskDevice(i));
  // A single task is placed too: a node pinned to another task is an error.
  co.place_single_device = true;
  co.host_for = [this](const std::string& device) { return HostFor(device); };
  coordinator = std::make_unique<runtime::Coordinator>(graph, std::move(co));
  // Step ids are unique across the sessions sharing the nodes' rendezvous.
  std::random_device rd;
  coordinator->SetFirstStepId(static_cast<int64_t>(((static_cast<uint64_t>(rd()) << 32) ^ rd()) >> 2));
  // The actor is detached: CAF's own threads only idle, so one, and parked
  // (the default work-stealing workers poll, taking a core from the steps).
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", static_cast<size_t>(1));
  system = std::make_unique<caf::actor_system>(cfg);
  coordinator_actor = runtime::SpawnCoordinatorActor(*system, [this](runtime::RunCall& call) {
    Start(call.feeds, call.fetches, call.targets, runtime::RunSignature(call.feeds, call.fetches, call.targets),
          std::move(call.done), call.options);
  });
}

Result<std::unique_ptr<ClusterSession>> ClusterSession::Connect(const Graph& g, ClusterOptions options) {
  if (options.address.empty()) return InvalidArgument("ClusterOptions::address is empty");
  if (options.tasks < 0) return InvalidArgument("ClusterOptions::tasks is negative (" + std::to_string(options.tasks) + ")");
  auto impl = std::make_unique<Impl>(g, options);
  Impl* p = impl.get();
  net::EndpointOptions to;
  to.tls_dir = options.tls_dir;
  to.tls_name = options.tls_name;
  to.insecure = options.insecure;
  to.role = net::Role::kSession;
  to.heartbeat_ms = options.heartbeat_ms;
  to.peer_timeout_ms = options.peer_timeout_ms;
  to.handler_threads = 2;
  // A node's progress report only restarts a deadline: no thread hop.
  to.handle_inline = [](const net::Message& m) { return std::holds_alternative<net::StepProgress>(m.body); };
  if (options.step_progress_timeout_ms < 0)
    return InvalidArgument("ClusterOptions::step_progress_timeout_ms is negative (" +
                           std::to_string(options.step_progress_timeout_ms) + ")");
  if (options.step_progress_timeout_ms > 0)
    impl->deadlines = std::make_shared<runtime::StepDeadlines>(options.step_progress_timeout_ms);
  SF_ASSIGN_OR_RETURN(
      impl->endpoint,
      net::Endpoint::Create(
          to,
          [p](const net::ConnectionPtr&, net::Message m) {
            if (auto* sp = std::get_if<net::StepProgress>(&m.body)) {
              if (p->deadlines) p->deadlines->Progress(sp->step_id);
              return;
            }
            // A node tells its watchers when members join, drain or die.
            if (auto* mem = std::get_if<net::Membership>(&m.body)) {
              p->Learn(*mem);
              p->membership_changed = true;
            }
          },
          [p](const net::ConnectionPtr&, const Status&) { p->member_down = true; }));
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr first, impl->endpoint->Connect(options.address));
  auto reply = Call(first, net::ListMembers{}, options.request_timeout_ms);
  if (!reply.ok()) return reply.status().WithPrefix("listing the members of " + options.address);
  auto* mem = std::get_if<net::Membership>(&reply->body);
  if (!mem || mem->members.empty())
    return Unavailable("node " + options.address + " answered ListMembers with " + net::BodyName(reply->body));
  impl->Learn(*mem);
  std::set<std::string> draining;
  for (const net::Member& m : mem->leaving) draining.insert(m.address);
  std::vector<std::string> used;
  impl->conns[mem->members[0].address] = first;  // the contacted node lists itself first
  for (const net::Member& m : mem->members) {
    if (options.max_tasks > 0 && static_cast<int>(used.size()) >= options.max_tasks) break;
    if (draining.count(m.address)) continue;
    auto c = impl->Conn(m.address);
    if (!c.ok()) return c.status().WithPrefix("connecting to member " + m.name);
    used.push_back(m.address);
  }
  if (used.empty()) return Unavailable("every member of the cluster at " + options.address + " is draining");
  impl->num_tasks = options.tasks > 0 ? options.tasks : static_cast<int>(used.size());
  for (int t = 0; t < impl->num_tasks; ++t) impl->assignment.push_back(used[t % used.size()]);
  impl->ever_used.insert(used.begin(), used.end());
  std::random_device rd;
  impl->session_id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  impl->StartCoordinator();
  // What happened while connecting is already known.
  impl->membership_changed = false;
  impl->member_down = false;
  return std::unique_ptr<ClusterSession>(new ClusterSession(std::move(impl)));
}

ClusterSession::ClusterSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClusterSession::~ClusterSession() {
  {
    std::unique_lock<std::mutex> l(impl_->mu);
    impl_->cv.wait(l, [&] { return impl_->in_flight == 0; });
  }
  std::vector<net::ConnectionPtr> conns;
  uint64_t sid;
  {
    std::lock_guard<std::mutex> l(impl_->conf_mu);
    for (const auto& kv : impl_->conns)
      if (kv.second->is_up()) conns.push_back(kv.second);
    sid = impl_->session_id;
  }
  for (const auto& c : conns) CallStatus(c, net::CloseSession{sid}, 2000);
  if (impl_->system) {
    caf::anon_send_exit(impl_->coordinator_actor, caf::exit_reason::user_shutdown);
    impl_->coordinator_actor = nullptr;  // a detached actor's thread ends with its last reference
    impl_->system.reset();  // joins the coordinator's thread
  }
  impl_->endpoint->Shutdown();
  impl_->callbacks.Stop();
}

std::vector<std::string> ClusterSession::tasks() const {
  std::lock_guard<std::mutex> l(impl_->conf_mu);
  return impl_->assignment;
}

std::vector<ClusterChange> ClusterSession::Changes() const {
  std::lock_guard<std::mutex> l(impl_->conf_mu);
  return impl_->changes;
}

Result<ClusterChange> ClusterSession::Recover(bool roll_back_all) {
  impl_->PauseSteps();
  auto r = impl_->Reconfigure(roll_back_all);
  impl_->ResumeSteps();
  return r;
}

Result<int64_t> ClusterSession::Save(const std::string& dir, int64_t global_step, int keep_last) {
  SF_ASSIGN_OR_RETURN(std::vector<std::vector<std::string>> vars, impl_->TaskVariables());
  std::vector<std::string> tasks = this->tasks();
  {
    std::lock_guard<std::mutex> l(impl_->conf_mu);
    if (!impl_->pending_restore.empty())
      return FailedPrecondition("variable '" + *impl_->pending_restore.begin() + "' (and " +
                                std::to_string(impl_->pending_restore.size() - 1) +
                                " more) lost its member and is not restored yet: a checkpoint now would miss it");
  }
  // The writer holds the directory (one RocksDB open per process).
  SF_ASSIGN_OR_RETURN(auto writer, runtime::GraphCheckpointWriter::Begin(&impl_->graph, dir, global_step));
  for (size_t t = 0; t < vars.size() && t < tasks.size(); ++t) {
    for (const std::string& name : vars[t]) {
      // Read one at a time and write at once: a checkpoint never holds the
      // whole model in the client's memory.
      SF_ASSIGN_OR_RETURN(auto values, impl_->ReadVariables(tasks[t], {name}));
      for (const auto& v : values) SF_RETURN_IF_ERROR(writer->Add(v.first, v.second));
    }
  }
  return writer->Commit(keep_last);
}

Status ClusterSession::Restore(const std::string& dir, int64_t id, int64_t* global_step) {
  SF_ASSIGN_OR_RETURN(std::vector<std::vector<std::string>> vars, impl_->TaskVariables());
  SF_ASSIGN_OR_RETURN(runtime::GraphCheckpoint ckpt, runtime::ReadCheckpointForGraph(impl_->graph, dir, id));
  impl_->PauseSteps();
  // The assignment read with steps paused: no reconfiguration moves a task meanwhile.
  ClusterChange unused;
  Status s = impl_->AssignToOwners(this->tasks(), vars, std::move(ckpt.values), &unused);
  if (s.ok()) {
    // Every variable has its checkpoint value now: nothing waits for one.
    std::lock_guard<std::mutex> l(impl_->conf_mu);
    impl_->pending_restore.clear();
    impl_->restore_pending = false;
  }
  impl_->ResumeSteps();
  if (s.ok() && global_step) *global_step = ckpt.global_step;
  return s;
}

void ClusterSession::StartRun(const RunOptions& options, NamedFeeds feeds, std::vector<std::string> fetches,
                              std::vector<std::string> targets, std::function<void(Result<std::vector<Tensor>>)> done) {
  Impl* impl = impl_.get();
  const std::string key = runtime::RunSignature(feeds, fetches, targets);
  if (impl->CanStartInline(key)) return impl->Start(feeds, fetches, targets, key, std::move(done), options);
  // Counted while queued, so the destructor waits for it too.
  {
    std::lock_guard<std::mutex> l(impl->mu);
    ++impl->in_flight;
  }
  auto finish = [impl, done = std::move(done)](Result<std::vector<Tensor>> r) {
    done(std::move(r));
    std::lock_guard<std::mutex> l(impl->mu);
    if (--impl->in_flight == 0) impl->cv.notify_all();
  };
  caf::anon_send(impl->coordinator_actor, runtime::RunCall{std::move(feeds), std::move(fetches), std::move(targets),
                                                           std::move(finish), options});
}

void ClusterSession::Impl::Start(const NamedFeeds& feeds, const std::vector<std::string>& fetches,
                                 const std::vector<std::string>& targets, const std::string& key,
                                 std::function<void(Result<std::vector<Tensor>>)> done, const RunOptions& run_options) {
  {
    std::lock_guard<std::mutex> l(mu);
    ++in_flight;
  }
  Impl* impl = this;
  // Callbacks run on the callback thread, never on a connection's I/O thread.
  auto finish = [impl, done = std::move(done)](Result<std::vector<Tensor>> r) {
    impl->Post([impl, done, r = std::make_shared<Result<std::vector<Tensor>>>(std::move(r))] {
      done(std::move(*r));
      std::lock_guard<std::mutex> l(impl->mu);
      if (--impl->in_flight == 0) impl->cv.notify_all();
    });
  };
  // A member joined, drains or died since the last step: follow it first.
  if (restore_pending || (options.elastic && (membership_changed || member_down))) {
    PauseSteps();
    Result<ClusterChange> r = ClusterChange{};
    if (restore_pending || membership_changed || member_down) r = Reconfigure(false);
    ResumeSteps();
    // Tried again before the next step: what failed it may pass by then.
    if (!r.ok()) member_down = true;
    if (!r.ok()) return finish(r.status().WithPrefix("reconfiguring the session"));
  }
  {
    std::unique_lock<std::mutex> l(gate_mu);
    gate_cv.wait(l, [&] { return !reconfiguring; });
    ++active_steps;
  }
  auto step_done = [impl, finish](Result<std::vector<Tensor>> r) {
    {
      std::lock_guard<std::mutex> l(impl->gate_mu);
      if (--impl->active_steps == 0) impl->gate_cv.notify_all();
    }
    finish(std::move(r));
  };
  // Looked up with steps let through: a reconfiguration before drops the
  // plans. Registration is rare (once per signature) and serialized.
  auto plan = coordinator->Find(key);
  if (!plan) plan = coordinator->PlanFor(feeds, fetches, targets);
  coordinator->StartStep(plan, feeds, std::move(step_done), run_options, "coordinator");
}

const Graph& ClusterSession::graph() const { return impl_->graph; }

}  // namespace sf
