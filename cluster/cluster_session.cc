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
#include "cluster/session_impl.h"
#include "kernels/update_origin.h"

namespace sf {

using namespace cluster_session_detail;  // NOLINT: the session's helpers (cluster/session_impl.h)

namespace {
int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

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
  {
    std::lock_guard<std::mutex> l(conf_mu);
    ro.epoch = reg_epoch;
  }
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
  // Each step's attempts number its id's low bits (kernels/update_origin.h).
  const uint64_t first = ((static_cast<uint64_t>(rd()) << 32) ^ rd()) >> 2;
  coordinator->SetStepIds(static_cast<int64_t>(first & ~static_cast<uint64_t>(kMaxStepAttempts - 1)), kMaxStepAttempts);
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

void ClusterSession::Impl::OnProgress(const net::ConnectionPtr&, net::StepProgress p) {
  if (deadlines) deadlines->Progress(p.step_id);
}

// A node tells its watchers when members join, drain or die.
void ClusterSession::Impl::OnMembership(const net::ConnectionPtr&, net::Membership m) {
  Learn(m);
  membership_changed = true;
  std::lock_guard<std::mutex> l(map_mu);
  map_cv.notify_all();
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
  // A shard remembers an update's origin for AppliedWindow::kKeepMs (120 s):
  // a step run again later could apply an update twice.
  if (options.step_retry_ms < 0 || options.step_retry_ms > 60000)
    return InvalidArgument("ClusterOptions::step_retry_ms must be in [0, 60000] (a shard remembers the updates it "
                           "applied for 120 s), not " + std::to_string(options.step_retry_ms));
  if (options.step_progress_timeout_ms < 0)
    return InvalidArgument("ClusterOptions::step_progress_timeout_ms is negative (" +
                           std::to_string(options.step_progress_timeout_ms) + ")");
  if (options.step_progress_timeout_ms > 0)
    impl->deadlines = std::make_shared<runtime::StepDeadlines>(options.step_progress_timeout_ms);
  SF_ASSIGN_OR_RETURN(
      impl->endpoint,
      net::Endpoint::Create(
          to, p,
          [p](const net::ConnectionPtr& c, const Status&) {
            p->member_down = true;
            std::lock_guard<std::mutex> l(p->conf_mu);
            if (p->down_since.size() >= 4096) p->down_since.clear();
            p->down_since[c->peer_address()] = SteadyMs();
          }));
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr first, impl->endpoint->Connect(options.address));
  auto mem = net::Call(first, net::ListMembers{}, options.request_timeout_ms);
  if (!mem.ok()) return mem.status().WithPrefix("listing the members of " + options.address);
  if (mem->members.empty()) return Unavailable("node " + options.address + " answered ListMembers with no member");
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
  impl->map_mode = mem->map_slots > 0;
  if (impl->map_mode) {
    // The shard map places the tasks (every session of the cluster alike).
    SF_ASSIGN_OR_RETURN(net::Membership settled, impl->SettledMap());
    impl->assignment.assign(settled.map_holder.begin(), settled.map_holder.begin() + impl->num_tasks);
    impl->reg_epoch = settled.map_epoch;
    for (const auto& a : impl->assignment)
      if (auto c = impl->Conn(a); !c.ok()) return c.status().WithPrefix("connecting to slot holder " + a);
    impl->ever_used.insert(impl->assignment.begin(), impl->assignment.end());
  } else {
    for (int t = 0; t < impl->num_tasks; ++t) impl->assignment.push_back(used[t % used.size()]);
    impl->ever_used.insert(used.begin(), used.end());
  }
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
  for (const auto& c : conns) net::Call(c, net::CloseSession{sid}, 2000);
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

int64_t ClusterSession::retried_steps() const { return impl_->retried_steps.load(); }

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
  auto call = std::make_shared<StepCall>();
  call->feeds = feeds;
  call->fetches = fetches;
  call->targets = targets;
  call->key = key;
  call->run_options = run_options;
  call->started_ms = SteadyMs();
  Attempt(std::move(call), std::move(finish));
}

void ClusterSession::Impl::Attempt(std::shared_ptr<StepCall> call,
                                   std::function<void(Result<std::vector<Tensor>>)> finish) {
  // A member joined, drains or died since the last step: follow it first.
  if (restore_pending || stale_map || (options.elastic && (membership_changed || member_down))) {
    // With a shard map the leader moved the state (fencing the old holders)
    // and steps in flight finish on their old registration (a node keeps
    // what a running step uses after its session closed): following the map
    // waits for none of them. One may wait for this very step, as an
    // enqueue into a full queue waits for the dequeue queued here.
    PauseSteps(/*drain=*/!map_mode);
    Result<ClusterChange> r = ClusterChange{};
    if (restore_pending || stale_map || membership_changed || member_down) {
      stale_map = false;
      r = Reconfigure(false);
    }
    ResumeSteps();
    // Tried again before the next step: what failed it may pass by then.
    if (!r.ok()) member_down = true;
    if (!r.ok()) {
      if (call->step != 0 && RunAgain(r.status(), *call, true)) {
        ++call->attempt;
        return Post([this, call, finish] { Attempt(call, finish); });
      }
      return finish(r.status().WithPrefix("reconfiguring the session"));
    }
  }
  uint64_t sid = 0;  // stable until the step is sent: a reconfiguration waits for starting_steps
  {
    std::unique_lock<std::mutex> l(gate_mu);
    gate_cv.wait(l, [&] { return !reconfiguring; });
    ++active_steps;
    ++starting_steps;
    {
      std::lock_guard<std::mutex> c(conf_mu);  // lock order: gate_mu, then conf_mu
      sid = session_id;
    }
    ++steps_of_session[sid];
  }
  // Looked up with steps let through: a reconfiguration before drops the
  // plans. Registration is rare (once per signature) and serialized.
  auto plan = coordinator->Find(call->key);
  if (!plan) plan = coordinator->PlanFor(call->feeds, call->fetches, call->targets);
  const bool repeatable = runtime::Coordinator::Repeatable(*plan);
  if (call->step == 0 && repeatable && map_mode && options.step_retry_ms > 0) call->step = coordinator->NewStepId();
  Impl* impl = this;
  auto step_done = [impl, finish, call, repeatable, sid](Result<std::vector<Tensor>> r) {
    impl->EndStep(sid);
    // A node refused a part of the step as placed by a stale shard map:
    // the next step follows the new map first (elastic or not).
    if (!r.ok() && cluster::IsStaleEpoch(r.status())) impl->stale_map = true;
    if (!r.ok() && call->step != 0) {
      // Run again (off this thread: following the map blocks); the parts
      // that applied their updates apply them once (kernels/update_origin.h).
      const Status why = r.status();
      impl->Post([impl, finish, call, repeatable, why] {
        if (!impl->RunAgain(why, *call, repeatable)) return finish(why);
        ++call->attempt;
        ++impl->retried_steps;
        impl->Attempt(call, finish);
      });
      return;
    }
    finish(std::move(r));
  };
  coordinator->StartStep(plan, call->feeds, std::move(step_done), call->run_options, "coordinator",
                         call->step == 0 ? 0 : call->step + call->attempt);
  // Its runs are sent (on the registration it planned by): a
  // reconfiguration may close that registration now.
  std::lock_guard<std::mutex> l(gate_mu);
  if (--starting_steps == 0) gate_cv.notify_all();
}

bool ClusterSession::Impl::RunAgain(const Status& s, StepCall& call, bool repeatable) {
  if (!repeatable || call.step == 0 || call.attempt + 1 >= kMaxStepAttempts) return false;
  if (!cluster::IsStaleEpoch(s) && s.code() != Code::kUnavailable) return false;
  if (SteadyMs() - call.started_ms >= options.step_retry_ms) return false;
  // Once the map settled (the leader moved a dead holder's slots), run
  // again only when no slot of the session lost its state, unless the
  // session is elastic: a slot restored from a checkpoint rolls its
  // variables back, which a session that is not elastic tells the user by
  // the step's failure (they call Recover); an elastic one restores it
  // before the next run by itself and reports it in Changes().
  auto m = SettledMap();
  if (!m.ok()) return false;
  if (!options.elastic) {
    std::lock_guard<std::mutex> l(conf_mu);
    for (int t = 0; t < num_tasks && t < static_cast<int>(m->map_lost_after.size()); ++t)
      if (m->map_lost_after[t] > 0 && m->map_lost_after[t] >= reg_epoch) return false;
  }
  if (m->map_epoch == call.map_epoch) {
    // The map has not changed since the last run failed: a node of the step
    // may hang (its lease not over yet). Wait for news of the membership,
    // longer each time (100 ms doubling to 2 s), so that the runs again span
    // the retry budget instead of failing at once in a row.
    const int64_t left = options.step_retry_ms - (SteadyMs() - call.started_ms);
    const int64_t backoff = std::min<int64_t>({left, 2000, int64_t{100} << std::min(call.attempt, 5)});
    membership_changed = false;
    std::unique_lock<std::mutex> l(map_mu);
    map_cv.wait_for(l, std::chrono::milliseconds(std::max<int64_t>(0, backoff)),
                    [&] { return membership_changed.load(); });
  }
  call.map_epoch = m->map_epoch;
  stale_map = true;  // follow the map before the next run, elastic or not
  return true;
}

const Graph& ClusterSession::graph() const { return impl_->graph; }

}  // namespace sf
