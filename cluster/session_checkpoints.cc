// A ClusterSession's node checkpoints (include/shardflow/cluster.h
// SaveOnNodes, RestoreFromNodes, and Recover's restore from
// ClusterOptions::node_checkpoint_dir): the session only says which
// variables each task's node writes or reads; the values stay on the nodes
// (cluster/node_checkpoints.h has the layout on disk).
#include <future>

#include "cluster/session_impl.h"

namespace sf {

using namespace cluster_session_detail;  // NOLINT: the session's helpers (cluster/session_impl.h)

namespace {

const char* RequestName(const net::SaveShards&) { return "SaveShards"; }
const char* RequestName(const net::CommitShards&) { return "CommitShards"; }
const char* RequestName(const net::RestoreShards&) { return "RestoreShards"; }

// Sends request (SaveShards, CommitShards, RestoreShards) to the node at
// addr and waits for its ShardsDone; the node's error, or the call's,
// naming the request and addr.
template <class Req>
Result<net::ShardsDone> AskShards(ClusterSession::Impl* impl, const std::string& addr, Req request) {
  const std::string what = std::string(RequestName(request)) + " on " + addr;
  auto c = impl->Conn(addr);
  if (!c.ok()) return c.status().WithPrefix(what);
  auto r = net::Call(*c, std::move(request), impl->VariablesTimeoutMs());
  if (!r.ok()) return r.status().WithPrefix(what);
  return r;
}

// Runs ask(t) for every task t in tasks at once; the replies by task, or the first error.
Result<std::map<int, net::ShardsDone>> ForTasks(const std::vector<int>& tasks,
                                                const std::function<Result<net::ShardsDone>(int)>& ask) {
  std::vector<std::future<Result<net::ShardsDone>>> calls;
  for (int t : tasks) calls.push_back(std::async(std::launch::async, [&ask, t] { return ask(t); }));
  std::map<int, net::ShardsDone> out;
  Status first;
  for (size_t i = 0; i < calls.size(); ++i) {
    auto r = calls[i].get();
    if (!r.ok() && first.ok()) first = r.status();
    if (r.ok()) out[tasks[i]] = std::move(r).value();
  }
  if (!first.ok()) return first;
  return out;
}

uint64_t NewToken() {
  std::random_device rd;
  uint64_t t = 0;
  while (t == 0) t = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return t;
}

}  // namespace

Result<ClusterChange> ClusterSession::Impl::RestoreTasksFromNodes(const std::string& dir, int64_t id,
                                                                  const std::vector<std::string>& now,
                                                                  const std::vector<std::vector<std::string>>& names) {
  ClusterChange change;
  std::vector<int> tasks;
  for (size_t t = 0; t < names.size() && t < now.size(); ++t)
    if (!names[t].empty()) tasks.push_back(static_cast<int>(t));
  if (tasks.empty()) return change;
  // The first task's node finds the checkpoint's record; the others read the same one.
  const int first = tasks.front();
  SF_ASSIGN_OR_RETURN(net::ShardsDone resolved,
                      AskShards(this, now[first], net::RestoreShards{dir, 0, id, first, names[first]}));
  tasks.erase(tasks.begin());
  SF_ASSIGN_OR_RETURN(auto rest, ForTasks(tasks, [&](int t) {
    return AskShards(this, now[t], net::RestoreShards{dir, resolved.token, resolved.id, t, names[t]});
  }));
  rest[first] = resolved;
  for (const auto& [t, d] : rest) {
    change.variables_restored += d.variables;
    change.bytes_restored += d.bytes;
  }
  change.checkpoint_id = resolved.id;
  change.global_step = resolved.global_step;
  return change;
}

Result<int64_t> ClusterSession::SaveOnNodes(const std::string& dir, int64_t global_step, int keep_last) {
  Impl* impl = impl_.get();
  SF_ASSIGN_OR_RETURN(std::vector<std::vector<std::string>> vars, impl->TaskVariables());
  impl->PauseSteps();
  Result<int64_t> out = [&]() -> Result<int64_t> {
    std::vector<std::string> now;
    std::vector<uint64_t> drop;
    {
      std::lock_guard<std::mutex> l(impl->conf_mu);
      if (!impl->pending_restore.empty())
        return FailedPrecondition("variable '" + *impl->pending_restore.begin() + "' (and " +
                                  std::to_string(impl->pending_restore.size() - 1) +
                                  " more) lost its member and is not restored yet: a checkpoint now would miss it");
      now = impl->assignment;
      drop = impl->node_checkpoint_drops[dir];
    }
    const uint64_t token = NewToken();
    std::vector<int> tasks;
    for (size_t t = 0; t < vars.size() && t < now.size(); ++t)
      if (!vars[t].empty()) tasks.push_back(static_cast<int>(t));
    auto pieces = ForTasks(tasks, [&](int t) {
      return AskShards(impl, now[t], net::SaveShards{dir, token, t, global_step, vars[t], drop});
    });
    if (!pieces.ok()) {
      // What this try wrote is dropped by the next one.
      std::lock_guard<std::mutex> l(impl->conf_mu);
      impl->node_checkpoint_drops[dir].push_back(token);
      return pieces.status();
    }
    SF_ASSIGN_OR_RETURN(net::ShardsDone committed,
                        AskShards(impl, now.empty() ? impl->options.address : now[0],
                                  net::CommitShards{dir, token, impl->num_tasks, global_step, std::max(0, keep_last)}));
    std::lock_guard<std::mutex> l(impl->conf_mu);
    // Told to every node with the next save: a node whose --checkpoint-dir
    // is its own deletes its pieces of them then.
    impl->node_checkpoint_drops[dir] = committed.dropped;
    return committed.id;
  }();
  impl->ResumeSteps();
  return out;
}

Status ClusterSession::RestoreFromNodes(const std::string& dir, int64_t id, int64_t* global_step) {
  Impl* impl = impl_.get();
  SF_ASSIGN_OR_RETURN(std::vector<std::vector<std::string>> vars, impl->TaskVariables());
  impl->PauseSteps();
  auto r = impl->RestoreTasksFromNodes(dir, id, tasks(), vars);
  if (r.ok()) {
    // Every variable has its checkpoint value now: nothing waits for one.
    std::lock_guard<std::mutex> l(impl->conf_mu);
    impl->pending_restore.clear();
    impl->restore_pending = false;
  }
  impl->ResumeSteps();
  if (!r.ok()) return r.status();
  if (global_step) *global_step = r->global_step;
  return Status::OK();
}

}  // namespace sf
