// ClusterSession (include/shardflow/cluster.h): the client's coordinator for
// a graph on a cluster. Per run signature it prunes, places over the tasks'
// devices, partitions, and registers each device's partition on its node
// (once); a step is one RunPartition request per partition. The first
// failing partition aborts the step on every node of the step, so no
// partition waits for a tensor that will never come.
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
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "actors/checkpoint_io.h"
#include "runtime/plan.h"
#include "runtime/step_join.h"
#include "graph/device_name.h"
#include "shardflow/graph_io.h"
#include "graph/partition.h"
#include "graph/placement.h"
#include "net/transport.h"
#include "shardflow/cluster.h"

namespace sf {

namespace {

// How long a step may take: failures are found by heartbeats, not by this.
constexpr int kStepTimeoutMs = 24 * 3600 * 1000;

// Blocks until a request's reply.
Result<net::Message> Call(const net::ConnectionPtr& c, net::Body body, int timeout_ms) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<net::Message>> reply;
  c->Request(std::move(body), timeout_ms, [&](Result<net::Message> r) {
    std::lock_guard<std::mutex> l(mu);
    reply.emplace(std::move(r));
    cv.notify_all();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return reply.has_value(); });
  return std::move(*reply);
}

// The status a request returned (StatusReply), or why there is none.
Status CallStatus(const net::ConnectionPtr& c, net::Body body, int timeout_ms) {
  auto r = Call(c, std::move(body), timeout_ms);
  if (!r.ok()) return r.status();
  if (auto* s = std::get_if<net::StatusReply>(&r->body)) return s->status;
  return Internal(std::string("unexpected reply ") + net::BodyName(r->body));
}

// One thread running posted functions in order, started by the first Post.
class SerialQueue {
 public:
  ~SerialQueue() { Stop(); }
  // Runs fn on the queue's thread after what was posted before.
  // REQUIRES: Stop has not been called (the session stops its queues only
  // once no step is in flight, so nothing posts after).
  void Post(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(fn));
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    cv_.notify_one();
  }
  // Runs what is queued, then ends the thread.
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      l.unlock();
      fn();
      l.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // GUARDED_BY(mu_)
  bool stop_ = false;                        // GUARDED_BY(mu_)
  std::thread thread_;
};

std::string TaskDevice(int task) {
  return "/job:worker/task:" + std::to_string(task) + "/device:CPU:0";
}

struct Plan {
  Status error;
  std::shared_ptr<const void> partitions;  // keeps the partition graphs it was built from
  std::vector<Output> feeds;
  size_t num_fetches = 0;
  struct Part {
    int task = 0;
    net::ConnectionPtr conn;  // to the member the task was on when registered
    std::string where;        // that member's address
    uint64_t handle = 0;
    std::vector<int> feed_index;
    std::vector<int> fetch_index;
  };
  std::vector<Part> parts;
  uint64_t session_id = 0;  // the registrations' session (a reconfiguration drops the plan)
};

// Spreads tasks over members keeping as many where they are as balance
// allows: tasks of members not in `members` go to the least loaded, then
// tasks move from the most to the least loaded until loads differ by at most
// one. Deterministic for equal inputs. REQUIRES: members non-empty.
std::vector<std::string> BalanceTasks(const std::vector<std::string>& old,
                                      const std::vector<std::string>& members) {
  std::map<std::string, std::vector<int>> load;
  for (const auto& m : members) load[m];
  std::vector<std::string> out(old.size());
  std::vector<int> homeless;
  for (size_t t = 0; t < old.size(); ++t) {
    if (load.count(old[t])) {
      load[old[t]].push_back(static_cast<int>(t));
      out[t] = old[t];
    } else {
      homeless.push_back(static_cast<int>(t));
    }
  }
  auto least = [&] {
    const std::string* best = &members[0];
    for (const auto& m : members)
      if (load[m].size() < load[*best].size()) best = &m;
    return *best;
  };
  auto most = [&] {
    const std::string* best = &members[0];
    for (const auto& m : members)
      if (load[m].size() > load[*best].size()) best = &m;
    return *best;
  };
  for (int t : homeless) {
    const std::string m = least();
    load[m].push_back(t);
    out[t] = m;
  }
  for (;;) {
    const std::string hi = most(), lo = least();
    if (load[hi].size() <= load[lo].size() + 1) break;
    const int t = load[hi].back();  // the highest task moves: the low ones stay put
    load[hi].pop_back();
    load[lo].push_back(t);
    out[t] = lo;
  }
  return out;
}

}  // namespace

struct ClusterSession::Impl {
  const Graph& graph;
  ClusterOptions options;
  std::unique_ptr<net::Transport> transport;
  int num_tasks = 0;

  // The assignment of tasks to members and the connections, changed only
  // while steps are paused (gate below); read under conf_mu.
  mutable std::mutex conf_mu;
  std::vector<std::string> assignment;                  // GUARDED_BY(conf_mu): member by task
  std::map<std::string, net::ConnectionPtr> conns;      // GUARDED_BY(conf_mu): by member address
  uint64_t session_id = 0;                              // GUARDED_BY(conf_mu)
  std::vector<ClusterChange> changes;                   // GUARDED_BY(conf_mu)
  std::set<std::string> ever_used;                      // GUARDED_BY(conf_mu): members given tasks
  // Variables that lost their member and still wait for their checkpoint value.
  std::set<std::string> pending_restore;                // GUARDED_BY(conf_mu)
  std::atomic<bool> restore_pending{false};

  // Hints that the membership changed (set by transport threads); the
  // reconfiguration before the next step finds out what exactly.
  std::atomic<bool> membership_changed{false};
  std::atomic<bool> member_down{false};
  // Every member address seen in a membership list: when every member we
  // are connected to died, one of these may still lead to the cluster.
  std::mutex known_mu;
  std::set<std::string> known;  // GUARDED_BY(known_mu)
  void Learn(const net::Membership& m) {
    std::lock_guard<std::mutex> l(known_mu);
    for (const auto& k : m.members) known.insert(k.address);
  }

  // Steps pause while the session reconfigures: a reconfiguration waits for
  // the steps in flight, and steps wait for it.
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  int active_steps = 0;        // GUARDED_BY(gate_mu)
  bool reconfiguring = false;  // GUARDED_BY(gate_mu)

  std::mutex plan_mu;
  std::map<std::string, std::shared_ptr<Plan>> plans;  // GUARDED_BY(plan_mu)
  // Placement and partitions of the whole graph: computed once per graph
  // size (Place does not depend on the run signature; a graph may grow
  // between runs). Plans keep the partitions they were built from alive.
  std::shared_ptr<Result<std::map<std::string, PartitionGraph>>> partitions;  // GUARDED_BY(plan_mu)
  int partitioned_nodes = -1;                      // GUARDED_BY(plan_mu)
  std::map<std::string, std::string> graph_bytes;  // GUARDED_BY(plan_mu), by device
  // The variables (shared names, slots included) placed on each task.
  std::vector<std::vector<std::string>> task_variables;  // GUARDED_BY(plan_mu)
  uint64_t next_handle = 1;                        // GUARDED_BY(plan_mu)

  std::mutex ckpt_mu;  // one RocksDB open of a directory at a time

  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;      // GUARDED_BY(mu)
  int64_t next_step = 0;  // GUARDED_BY(mu)

  // RunAsync's callbacks run on this queue's thread, never on the
  // transport's: a callback that takes a while would stop its connection's
  // reader (or the timer) and the node would look hung (its heartbeats go
  // unread).
  SerialQueue callbacks;
  // The coordinator's own thread: registration and reconfiguration, which
  // wait on the network, run here, so RunAsync never blocks its caller.
  SerialQueue coordinator;

  Impl(const Graph& g, ClusterOptions o) : graph(g), options(std::move(o)) {}

  // Runs fn on the callback thread.
  void Post(std::function<void()> fn) { callbacks.Post(std::move(fn)); }
  // True when a step of this signature can start on the caller's thread
  // without waiting: no reconfiguration due or running, the plan registered.
  // A hint (the state may change right after); Start is correct either way.
  bool CanStartInline(const std::string& key) {
    if (restore_pending || (options.elastic && (membership_changed || member_down))) return false;
    {
      std::lock_guard<std::mutex> l(gate_mu);
      if (reconfiguring) return false;
    }
    std::unique_lock<std::mutex> l(plan_mu, std::try_to_lock);  // held while a plan registers
    return l.owns_lock() && plans.count(key) && plans[key]->error.ok();
  }
  // Starts a step; done runs on the callback thread when post, else on
  // whatever thread finishes the step.
  void Start(const NamedFeeds& feeds, const std::vector<std::string>& fetches,
             const std::vector<std::string>& targets, bool post,
             std::function<void(Result<std::vector<Tensor>>)> done);

  // Places and partitions the whole graph when it is new or grew, recording
  // each task's variables. REQUIRES: plan_mu held.
  void EnsurePartitions();
  std::shared_ptr<Plan> BuildPlan(const NamedFeeds& feed_map, const std::vector<std::string>& fetch_names,
                                  const std::vector<std::string>& target_names);
  void StartStep(const std::shared_ptr<Plan>& plan, const NamedFeeds& feeds,
                 std::function<void(Result<std::vector<Tensor>>)> done);
  // Sends a one-way message to the tasks of a step.
  void Broadcast(const std::shared_ptr<Plan>& plan, const net::Body& body);

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
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, transport->Connect(addr));
  // Listing the members makes the node tell us when they change.
  auto r = Call(c, net::ListMembers{}, options.request_timeout_ms);
  if (!r.ok()) return r.status().WithPrefix("listing the members of " + addr);
  std::lock_guard<std::mutex> l(conf_mu);
  conns[addr] = c;
  return c;
}

Status ClusterSession::Impl::ListLive(std::vector<std::string>* live, std::set<std::string>* draining) {
  std::vector<std::string> candidates;
  {
    std::lock_guard<std::mutex> l(conf_mu);
    for (const auto& kv : conns)
      if (kv.second->is_up()) candidates.push_back(kv.first);
  }
  {
    // Then members we only heard of (they joined after our last look).
    std::lock_guard<std::mutex> l(known_mu);
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
    auto r = Call(c, net::Variables{false, {name}, {}}, kStepTimeoutMs);
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
    Status s = CallStatus(c, net::Variables{true, {name}, {std::move(value)}}, kStepTimeoutMs);
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
  std::vector<std::string> now = BalanceTasks(old, usable);
  std::vector<std::vector<std::string>> vars;
  {
    std::lock_guard<std::mutex> l(plan_mu);
    EnsurePartitions();
    vars = task_variables;
  }
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
  {
    std::lock_guard<std::mutex> l(conf_mu);
    assignment = now;
    ever_used.insert(now.begin(), now.end());
    if (change.changed() || roll_back_all) {
      std::random_device rd;
      session_id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    for (const auto& kv : conns)
      if (kv.second->is_up()) old_conns.push_back(kv.second);
  }
  if (change.changed() || roll_back_all) {
    for (const auto& c : old_conns) CallStatus(c, net::CloseSession{old_session}, 2000);  // best effort
    std::lock_guard<std::mutex> l(plan_mu);
    plans.clear();
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
  std::lock_guard<std::mutex> l(ckpt_mu);
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

void ClusterSession::Impl::EnsurePartitions() {
  if (partitions && partitioned_nodes == graph.num_nodes()) return;
  std::vector<std::string> devices;
  for (int i = 0; i < num_tasks; ++i) devices.push_back(TaskDevice(i));
  auto placement = Place(graph, devices);
  task_variables.assign(static_cast<size_t>(num_tasks), {});
  if (!placement.ok()) {
    partitions = std::make_shared<Result<std::map<std::string, PartitionGraph>>>(placement.status());
  } else {
    partitions = std::make_shared<Result<std::map<std::string, PartitionGraph>>>(Partition(graph, *placement));
    for (int i = 0; i < graph.num_nodes(); ++i) {
      const Node& n = graph.node(i);
      if (n.op != "VarHandle") continue;
      auto name = n.attrs.Get<std::string>("shared_name");
      auto dev = ParseDeviceName((*placement)[i]);
      if (name.ok() && dev.ok() && dev->has_task && dev->task >= 0 && dev->task < num_tasks)
        task_variables[dev->task].push_back(*name);
    }
  }
  partitioned_nodes = graph.num_nodes();
  graph_bytes.clear();
}

std::shared_ptr<Plan> ClusterSession::Impl::BuildPlan(const NamedFeeds& feed_map,
                                                      const std::vector<std::string>& fetch_names,
                                                      const std::vector<std::string>& target_names) {
  auto plan = std::make_shared<Plan>();
  auto fail = [&](Status s) {
    plan->error = std::move(s);
    return plan;
  };
  auto run = runtime::PlanRun(graph, feed_map, fetch_names, target_names);
  if (!run.ok()) return fail(run.status());
  plan->feeds = run->feeds;
  const std::vector<Output>& fetches = run->fetches;
  const std::vector<int>* order = &run->order;
  plan->num_fetches = fetches.size();
  EnsurePartitions();
  plan->partitions = partitions;
  if (!partitions->ok()) return fail(partitions->status());
  auto steps = runtime::PlanDeviceSteps(**partitions, *order, plan->feeds, fetches);
  if (!steps.ok()) return fail(steps.status());
  std::vector<std::string> tasks;
  uint64_t sid;
  {
    std::lock_guard<std::mutex> l(conf_mu);
    tasks = assignment;
    sid = session_id;
  }
  plan->session_id = sid;
  std::vector<net::Member> members;
  for (size_t i = 0; i < tasks.size(); ++i) members.push_back({"task" + std::to_string(i), tasks[i]});
  for (const runtime::DeviceStep& d : *steps) {
    auto name = ParseDeviceName(d.device);
    if (!name.ok() || !name->has_task || name->task < 0 || name->task >= static_cast<int>(tasks.size()))
      return fail(InvalidArgument("device " + d.device + " is not a device of the cluster's " +
                                  std::to_string(tasks.size()) + " tasks"));
    auto& bytes = graph_bytes[d.device];
    if (bytes.empty()) {
      auto b = GraphToBytes(*d.partition->graph);
      if (!b.ok()) return fail(b.status().WithPrefix("partition for " + d.device));
      bytes = std::move(*b);
    }
    const Graph& pg = *d.partition->graph;
    net::RegisterPartition r;
    r.session_id = sid;
    r.handle = next_handle++;
    r.device = d.device;
    r.tasks = members;
    r.graph_def = bytes;
    for (const Output& o : d.spec.fed) r.feeds.push_back({pg.node(o.node).name, o.index});
    for (const Output& o : d.spec.fetches) r.fetches.push_back({pg.node(o.node).name, o.index});
    for (int id : d.spec.nodes) r.targets.push_back(pg.node(id).name);
    Plan::Part part;
    part.task = name->task;
    part.where = tasks[part.task];
    part.handle = r.handle;
    part.feed_index = d.feed_index;
    part.fetch_index = d.fetch_index;
    auto conn = Conn(part.where);
    if (!conn.ok()) return fail(conn.status().WithPrefix("registering the partition for " + d.device));
    part.conn = *conn;
    Status s = CallStatus(part.conn, std::move(r), options.request_timeout_ms);
    if (!s.ok()) return fail(s.WithPrefix("registering the partition for " + d.device + " on " + part.where));
    plan->parts.push_back(std::move(part));
  }
  return plan;
}

void ClusterSession::Impl::Broadcast(const std::shared_ptr<Plan>& plan, const net::Body& body) {
  std::set<std::string> sent;
  for (const Plan::Part& p : plan->parts) {
    if (!sent.insert(p.where).second) continue;
    net::Message m;
    m.body = body;
    p.conn->Send(m);  // a node that is down has nothing to abort or clean
  }
}

void ClusterSession::Impl::StartStep(const std::shared_ptr<Plan>& plan, const NamedFeeds& feeds,
                                     std::function<void(Result<std::vector<Tensor>>)> done) {
  if (Status s = runtime::ValidateFeeds(feeds, plan->feeds); !s.ok()) return done(s);
  if (plan->parts.empty()) return done(std::vector<Tensor>(plan->num_fetches));
  int64_t step_id;
  {
    std::lock_guard<std::mutex> l(mu);
    step_id = next_step++;
  }
  const uint64_t sid = plan->session_id;
  auto join = std::make_shared<runtime::StepJoin>(
      static_cast<int>(plan->parts.size()), plan->num_fetches, std::move(done),
      [this, plan, step_id](const Status& s) {
        Broadcast(plan, net::AbortStep{step_id, Aborted("step aborted: " + s.message())});
      },
      [this, plan, step_id] { Broadcast(plan, net::CleanupStep{step_id}); });
  for (const Plan::Part& part : plan->parts) {
    net::RunPartition r;
    r.session_id = sid;
    r.handle = part.handle;
    r.step_id = step_id;
    for (int i : part.feed_index) r.feeds.push_back(feeds[i].second);
    const Plan::Part* pp = &part;  // the plan outlives its steps
    const std::string where = part.where;
    // Every error of the step says which step and which member it came from.
    const std::string prefix = "step " + std::to_string(step_id) + " on task " +
                               std::to_string(part.task) + " (" + where + ")";
    part.conn->Request(std::move(r), kStepTimeoutMs, [this, join, pp, where, prefix](Result<net::Message> reply) {
      Status s;
      std::vector<Tensor> out;
      if (!reply.ok()) {
        s = reply.status();
      } else if (auto* d = std::get_if<net::RunPartitionDone>(&reply->body)) {
        s = std::move(d->status);
        out = std::move(d->fetches);
        if (s.ok() && out.size() != pp->fetch_index.size())
          s = Internal("node " + where + " returned " + std::to_string(out.size()) + " fetches, expected " +
                       std::to_string(pp->fetch_index.size()));
      } else if (auto* e = std::get_if<net::StatusReply>(&reply->body); e && !e->status.ok()) {
        s = e->status;  // the node could not send its answer (too large for a frame)
      } else {
        s = Internal(std::string("unexpected reply ") + net::BodyName(reply->body) + " from " + where);
      }
      if (!s.ok()) s = s.WithPrefix(prefix);
      // A member the step needed is gone: the next step reconfigures first
      // (its connection's down report may have come before a failed
      // reconfiguration used it up).
      if (s.code() == Code::kUnavailable) member_down = true;
      join->Report(std::move(s), std::move(out), pp->fetch_index);
    });
  }
}

Result<std::unique_ptr<ClusterSession>> ClusterSession::Connect(const Graph& g, ClusterOptions options) {
  if (options.address.empty()) return InvalidArgument("ClusterOptions::address is empty");
  if (options.tasks < 0) return InvalidArgument("ClusterOptions::tasks is negative (" + std::to_string(options.tasks) + ")");
  auto impl = std::make_unique<Impl>(g, options);
  Impl* p = impl.get();
  net::TransportOptions to;
  to.secret = options.secret;
  to.heartbeat_ms = options.heartbeat_ms;
  to.peer_timeout_ms = options.peer_timeout_ms;
  SF_ASSIGN_OR_RETURN(
      impl->transport,
      net::Transport::Create(
          to,
          [p](const net::ConnectionPtr&, net::Message m) {
            // A node tells its watchers when members join, drain or die.
            if (auto* mem = std::get_if<net::Membership>(&m.body)) {
              p->Learn(*mem);
              p->membership_changed = true;
            }
          },
          [p](const net::ConnectionPtr&, const Status&) { p->member_down = true; }));
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr first, impl->transport->Connect(options.address));
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
  // Step ids are unique across the sessions sharing the nodes' rendezvous.
  impl->next_step = static_cast<int64_t>(((static_cast<uint64_t>(rd()) << 32) ^ rd()) >> 2);
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
  impl_->transport->Shutdown();
  impl_->coordinator.Stop();
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
  std::vector<std::string> tasks;
  std::vector<std::vector<std::string>> vars;
  {
    std::lock_guard<std::mutex> l(impl_->plan_mu);
    impl_->EnsurePartitions();
    if (!impl_->partitions->ok()) return impl_->partitions->status();
    vars = impl_->task_variables;
  }
  tasks = this->tasks();
  {
    std::lock_guard<std::mutex> l(impl_->conf_mu);
    if (!impl_->pending_restore.empty())
      return FailedPrecondition("variable '" + *impl_->pending_restore.begin() + "' (and " +
                                std::to_string(impl_->pending_restore.size() - 1) +
                                " more) lost its member and is not restored yet: a checkpoint now would miss it");
  }
  std::lock_guard<std::mutex> l(impl_->ckpt_mu);
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
  std::vector<std::vector<std::string>> vars;
  {
    std::lock_guard<std::mutex> l(impl_->plan_mu);
    impl_->EnsurePartitions();
    if (!impl_->partitions->ok()) return impl_->partitions->status();
    vars = impl_->task_variables;
  }
  runtime::GraphCheckpoint ckpt;
  {
    std::lock_guard<std::mutex> l(impl_->ckpt_mu);
    SF_ASSIGN_OR_RETURN(ckpt, runtime::ReadCheckpointForGraph(impl_->graph, dir, id));
  }
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

void ClusterSession::StartRun(NamedFeeds feeds, std::vector<std::string> fetches, std::vector<std::string> targets,
                              std::function<void(Result<std::vector<Tensor>>)> done) {
  Impl* impl = impl_.get();
  if (impl->CanStartInline(runtime::RunSignature(feeds, fetches, targets)))
    return impl->Start(feeds, fetches, targets, /*post=*/true, std::move(done));
  // Counted while queued, so the destructor waits for it too.
  {
    std::lock_guard<std::mutex> l(impl->mu);
    ++impl->in_flight;
  }
  impl->coordinator.Post([impl, feeds = std::move(feeds), fetches = std::move(fetches),
                          targets = std::move(targets), done = std::move(done)]() mutable {
    impl->Start(feeds, fetches, targets, /*post=*/true, std::move(done));
    std::lock_guard<std::mutex> l(impl->mu);
    if (--impl->in_flight == 0) impl->cv.notify_all();
  });
}

void ClusterSession::Impl::Start(const NamedFeeds& feeds, const std::vector<std::string>& fetches,
                                 const std::vector<std::string>& targets, bool post,
                                 std::function<void(Result<std::vector<Tensor>>)> done) {
  {
    std::lock_guard<std::mutex> l(mu);
    ++in_flight;
  }
  Impl* impl = this;
  auto finish = [impl, post, done = std::move(done)](Result<std::vector<Tensor>> r) {
    auto call = [impl, done, r = std::make_shared<Result<std::vector<Tensor>>>(std::move(r))] {
      done(std::move(*r));
      std::lock_guard<std::mutex> l(impl->mu);
      if (--impl->in_flight == 0) impl->cv.notify_all();
    };
    if (post) impl->Post(std::move(call));
    else call();
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
  const std::string key = runtime::RunSignature(feeds, fetches, targets);
  std::shared_ptr<Plan> plan;
  {
    // Registration is rare (once per signature) and serialized.
    std::lock_guard<std::mutex> l(impl->plan_mu);
    auto& p = impl->plans[key];
    if (!p) p = impl->BuildPlan(feeds, fetches, targets);
    plan = p;
    // A plan that failed for want of a node (a timeout, a member down) is
    // not kept: the next run of this signature tries again.
    const Code c = p->error.code();
    if (c == Code::kUnavailable || c == Code::kDeadlineExceeded) impl->plans.erase(key);
  }
  if (!plan->error.ok()) return step_done(plan->error);
  impl->StartStep(plan, feeds, std::move(step_done));
}

const Graph& ClusterSession::graph() const { return impl_->graph; }

}  // namespace sf
