// A ClusterSession's membership: learning the members from a node, and
// reconfiguring (Recover, or before a step after the membership changed):
// moved tasks take their variables along, read from the old member and
// assigned on the new one, or restored from the checkpoint when the old one
// died (cluster/session_impl.h).
#include "cluster/session_impl.h"

namespace sf {

using namespace cluster_session_detail;  // NOLINT: this file's share of the session's helpers

Result<net::ConnectionPtr> ClusterSession::Impl::Conn(const std::string& addr) {
  {
    std::lock_guard<std::mutex> l(conf_mu);
    auto it = conns.find(addr);
    if (it != conns.end() && it->second->is_up()) return it->second;
  }
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, endpoint->Connect(addr));
  // Listing the members makes the node tell us when they change.
  auto r = net::Call(c, net::ListMembers{}, options.request_timeout_ms);
  if (!r.ok()) return r.status().WithPrefix("listing the members of " + addr);
  std::lock_guard<std::mutex> l(conf_mu);
  auto& slot = conns[addr];
  if (slot) redialed.insert(addr);
  slot = c;
  return c;
}

Status ClusterSession::Impl::ListLive(std::vector<std::string>* live, std::set<std::string>* draining) {
  SF_ASSIGN_OR_RETURN(net::Membership mem, AskMembership());
  live->clear();
  draining->clear();
  for (const auto& m : mem.leaving) draining->insert(m.address);
  for (const auto& m : mem.members)
    if (!draining->count(m.address)) live->push_back(m.address);
  if (live->empty()) return Unavailable("every member is draining");
  return Status::OK();
}

Result<std::vector<std::pair<std::string, Tensor>>> ClusterSession::Impl::ReadVariables(
    const std::string& addr, const std::vector<std::string>& names) {
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, Conn(addr));
  std::vector<std::pair<std::string, Tensor>> out;
  // One variable per message: a big table and its slots together could pass
  // a frame's limit.
  for (const std::string& name : names) {
    auto v = net::Call(c, net::ReadVariables{{name}}, VariablesTimeoutMs());
    if (!v.ok()) return v.status().WithPrefix("reading variable '" + name + "' from " + addr);
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
    Status s = net::Call(c, net::AssignVariables{{name}, {std::move(value)}}, VariablesTimeoutMs()).status();
    if (!s.ok()) return s.WithPrefix("assigning variable '" + name + "' on " + addr);
  }
  return Status::OK();
}

void ClusterSession::Impl::PauseSteps(bool drain) {
  std::unique_lock<std::mutex> l(gate_mu);
  gate_cv.wait(l, [&] { return !reconfiguring; });
  reconfiguring = true;
  gate_cv.wait(l, [&] { return (drain ? active_steps : starting_steps) == 0; });
}

void ClusterSession::Impl::ResumeSteps() {
  std::lock_guard<std::mutex> l(gate_mu);
  reconfiguring = false;
  gate_cv.notify_all();
}

namespace {

void CloseOn(uint64_t sid, const std::vector<net::ConnectionPtr>& conns) {
  for (const auto& c : conns) net::Ask(c, net::CloseSession{sid}, 2000, [](Result<net::StatusReply>) {});
}

}  // namespace

void ClusterSession::Impl::RetireSession(uint64_t sid, std::vector<net::ConnectionPtr> conns) {
  {
    std::lock_guard<std::mutex> l(gate_mu);
    if (steps_of_session.count(sid)) {
      retired_sessions[sid] = std::move(conns);
      return;
    }
  }
  CloseOn(sid, conns);
}

void ClusterSession::Impl::EndStep(uint64_t sid) {
  std::vector<net::ConnectionPtr> conns;
  {
    std::lock_guard<std::mutex> l(gate_mu);
    if (--active_steps == 0) gate_cv.notify_all();
    auto it = steps_of_session.find(sid);
    if (it == steps_of_session.end() || --it->second > 0) return;
    steps_of_session.erase(it);
    auto r = retired_sessions.find(sid);
    if (r == retired_sessions.end()) return;
    conns = std::move(r->second);
    retired_sessions.erase(r);
  }
  CloseOn(sid, conns);
}

Result<ClusterChange> ClusterSession::Impl::Reconfigure(bool roll_back_all) {
  const auto t0 = std::chrono::steady_clock::now();
  ClusterChange change;
  // Cleared first: a change that lands while we work sets them again.
  membership_changed = false;
  member_down = false;
  std::vector<std::string> old, now;
  uint64_t old_session = 0;
  int64_t epoch = 0;
  std::vector<std::vector<std::string>> vars;
  std::set<std::string> restore_names, lost, drained, added;
  if (map_mode) {
    // The shard map places the tasks and its leader moved their state:
    // this session only follows it.
    SF_RETURN_IF_ERROR(PlanByMap(&old, &now, &old_session, &epoch, &vars, &change, &restore_names, &lost, &drained,
                                 &added));
  } else {
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
    {
      std::lock_guard<std::mutex> l(conf_mu);
      old = assignment;
      old_session = session_id;
    }
    now = runtime::BalanceTasks(old, usable);
    // A graph that cannot be placed has no variables on any task to move.
    if (auto v = TaskVariables(); v.ok()) vars = std::move(v).value();
    vars.resize(static_cast<size_t>(num_tasks));
    std::set<std::string> alive(live.begin(), live.end());
    for (const auto& d : draining) alive.insert(d);
    // Moves between live members first: they cannot fail for want of a checkpoint.
    for (int t = 0; t < num_tasks; ++t) {
      if (old[t] == now[t]) continue;
      auto c = Conn(old[t]);
      bool old_alive = alive.count(old[t]) && c.ok();
      if (!old_alive && c.ok()) {
        // etcd no longer lists it (its lease ended while etcd or the node
        // stalled), but if it answers, its variables are intact: they move by
        // messages, never rolled back to the checkpoint (which would lose
        // acknowledged updates). A hung node does not answer within the
        // heartbeat timeout and is restored as before.
        old_alive = net::Call(*c, net::ListMembers{}, std::max(1, 2 * options.peer_timeout_ms)).ok();
      }
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
  }
  // The new assignment and session id; the old registrations are dropped.
  std::vector<net::ConnectionPtr> old_conns;
  bool register_again = change.changed() || roll_back_all;
  {
    std::lock_guard<std::mutex> l(conf_mu);
    for (const auto& a : now) register_again = register_again || redialed.count(a);
    // A newer map may have fenced a slot that moved away and back meanwhile.
    register_again = register_again || epoch != reg_epoch;
    redialed.clear();
    assignment = now;
    reg_epoch = epoch;
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
    // Its steps still in flight (following a shard map waits for none) go
    // on sending each other tensors under it: it closes after the last.
    RetireSession(old_session, std::move(old_conns));
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
  if (!options.node_checkpoint_dir.empty()) {
    // The nodes now holding the tasks read their variables themselves.
    std::vector<std::vector<std::string>> wanted(vars.size());
    for (size_t t = 0; t < vars.size(); ++t)
      for (const auto& n : vars[t])
        if (names.count(n)) wanted[t].push_back(n);
    auto r = RestoreTasksFromNodes(options.node_checkpoint_dir, -1, now, wanted);
    if (!r.ok())
      return r.status().WithPrefix("restoring the variables of the tasks of " +
                                   (who.empty() ? std::string("the session") : who) + " from node checkpoint '" +
                                   options.node_checkpoint_dir + "'");
    change->checkpoint_id = r->checkpoint_id;
    change->global_step = r->global_step;
    change->variables_restored += r->variables_restored;
    change->bytes_restored += r->bytes_restored;
    std::lock_guard<std::mutex> c(conf_mu);
    for (const auto& n : names) pending_restore.erase(n);
    restore_pending = !pending_restore.empty();
    return Status::OK();
  }
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

}  // namespace sf
