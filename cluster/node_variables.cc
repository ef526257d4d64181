// A node's variable store as its peers use it (cluster/node_impl.h): a
// session's reads and assigns by name, and node checkpoint requests, one
// method per message. Replies are sent from the pool: a large one must not
// hold a shard actor's thread while it is written.
#include "cluster/node_impl.h"
#include "graph/namespaces.h"

namespace sf {

Status ClusterNode::Impl::ScopeVariableNames(const net::Connection& c, std::vector<std::string>* names) {
  // A session names, reads and changes only its namespace's variables.
  SF_RETURN_IF_ERROR(ScopeNames(c, names).WithPrefix("node " + opts.name));
  if (c.peer_role() == net::Role::kSession) {
    std::lock_guard<std::mutex> l(mu);
    TouchNamespaceLocked(c.peer_namespace());
  }
  return Status::OK();
}

void ClusterNode::Impl::ServeReadVariables(const net::ConnectionPtr& c, uint64_t id, net::ReadVariables r) {
  Status scoped = ScopeVariableNames(*c, &r.names);
  if (!scoped.ok()) return Reply(c, id, net::StatusReply{scoped});
  if (r.names.empty() && c->peer_role() == net::Role::kSession) {
    // "Every variable" is every variable of the session's namespace.
    const std::string& ns = c->peer_namespace();
    r.names = variables->NamesWhere([&ns](const std::string& n) { return InNamespace(ns, n); });
    if (r.names.empty()) return Reply(c, id, net::VariableValues{});
  }
  variables->ReadNamed(r.names, [this, c, id](std::vector<std::pair<std::string, Tensor>> values) {
    auto out = std::make_shared<net::VariableValues>();
    for (auto& [name, value] : values) {
      out->names.push_back(std::move(name));
      out->values.push_back(std::move(value));
    }
    UnscopeNames(*c, &out->names);
    pool.Schedule([this, c, id, out] { Reply(c, id, std::move(*out)); });
  });
}

void ClusterNode::Impl::ServeAssignVariables(const net::ConnectionPtr& c, uint64_t id, net::AssignVariables a) {
  Status scoped = ScopeVariableNames(*c, &a.names);
  if (!scoped.ok()) return Reply(c, id, net::StatusReply{scoped});
  if (a.names.size() != a.values.size())  // the decoder refuses it first; never read past values
    return Reply(c, id, net::StatusReply{InvalidArgument("AssignVariables: names and values differ in number")});
  std::vector<std::string> names = a.names;
  std::vector<std::pair<std::string, Tensor>> values;
  values.reserve(a.names.size());
  for (size_t i = 0; i < a.names.size(); ++i) values.emplace_back(std::move(a.names[i]), std::move(a.values[i]));
  // Acknowledged once the assigned slots are on their backups too.
  variables->AssignNamed(std::move(values), [this, c, id, names = std::move(names)](Status s) {
    pool.Schedule([this, c, id, s, names] {
      auto reply = [this, c, id](Status r) { Reply(c, id, net::StatusReply{r.WithPrefix("node " + opts.name)}); };
      if (!s.ok()) return reply(s);
      ReplicateSlotsOf(names, reply);
    });
  });
}

void ClusterNode::Impl::ServeCheckpoint(const net::ConnectionPtr& c, uint64_t id, net::Body request) {
  Status scoped = ScopeCheckpoint(*c, &request);
  if (!scoped.ok()) return Reply(c, id, net::StatusReply{scoped.WithPrefix("node " + opts.name)});
  const auto* restore = std::get_if<net::RestoreShards>(&request);
  const int restored = restore ? restore->task : -1;
  Status queued = node_checkpoints->Post(std::move(request), [this, c, id, restored](net::Body reply) {
    // A restored slot is on its backup before the restore is acknowledged.
    if (restored < 0 || std::holds_alternative<net::StatusReply>(reply)) return Reply(c, id, std::move(reply));
    auto r = std::make_shared<net::Body>(std::move(reply));
    ReplicateSlots({restored}, [this, c, id, r](Status s) {
      if (!s.ok()) return Reply(c, id, net::StatusReply{s.WithPrefix("node " + opts.name + " replicating a restore")});
      Reply(c, id, std::move(*r));
    });
  });
  if (!queued.ok()) Reply(c, id, net::StatusReply{queued});
}

}  // namespace sf
