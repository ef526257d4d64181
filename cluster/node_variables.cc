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

void ClusterNode::Impl::ServeReadVariables(const net::ConnectionPtr& c, net::ReadVariables r,
                                           net::Answer<net::VariableValues> done) {
  Status scoped = ScopeVariableNames(*c, &r.names);
  if (!scoped.ok()) return done(scoped);
  if (r.names.empty() && c->peer_role() == net::Role::kSession) {
    // "Every variable" is every variable of the session's namespace.
    const std::string& ns = c->peer_namespace();
    r.names = variables->NamesWhere([&ns](const std::string& n) { return InNamespace(ns, n); });
    if (r.names.empty()) return done(net::VariableValues{});
  }
  variables->ReadNamed(r.names, [this, c, done](std::vector<std::pair<std::string, Tensor>> values) {
    auto out = std::make_shared<net::VariableValues>();
    for (auto& [name, value] : values) {
      out->names.push_back(std::move(name));
      out->values.push_back(std::move(value));
    }
    UnscopeNames(*c, &out->names);
    pool.Schedule([done, out] { done(std::move(*out)); });
  });
}

void ClusterNode::Impl::ServeAssignVariables(const net::ConnectionPtr& c, net::AssignVariables a,
                                             net::Answer<net::StatusReply> done) {
  Status scoped = ScopeVariableNames(*c, &a.names);
  if (!scoped.ok()) return done(scoped);
  if (a.names.size() != a.values.size())  // the decoder refuses it first; never read past values
    return done(InvalidArgument("AssignVariables: names and values differ in number"));
  std::vector<std::string> names = a.names;
  std::vector<std::pair<std::string, Tensor>> values;
  values.reserve(a.names.size());
  for (size_t i = 0; i < a.names.size(); ++i) values.emplace_back(std::move(a.names[i]), std::move(a.values[i]));
  // Acknowledged once the assigned slots are on their backups too.
  variables->AssignNamed(std::move(values), [this, done, names = std::move(names)](Status s) {
    pool.Schedule([this, done, s, names] {
      auto reply = [this, done](Status r) { done(r.WithPrefix("node " + opts.name)); };
      if (!s.ok()) return reply(s);
      ReplicateSlotsOf(names, reply);
    });
  });
}

namespace {

// node_checkpoints' result as the request's answer.
cluster::NodeCheckpoints::Done Forward(net::Answer<net::ShardsDone> done) {
  return [done](Result<net::ShardsDone> d) {
    if (d.ok()) done(std::move(d).value());
    else done(d.status());
  };
}

}  // namespace

void ClusterNode::Impl::ServeSaveShards(const net::ConnectionPtr& c, net::SaveShards r,
                                        net::Answer<net::ShardsDone> done) {
  Status scoped = ScopeCheckpoint(*c, &r.dir, &r.names);
  if (!scoped.ok()) return done(scoped.WithPrefix("node " + opts.name));
  Status queued = node_checkpoints->Post(std::move(r), Forward(done));
  if (!queued.ok()) done(queued);
}

void ClusterNode::Impl::ServeCommitShards(const net::ConnectionPtr& c, net::CommitShards r,
                                          net::Answer<net::ShardsDone> done) {
  Status scoped = ScopeCheckpoint(*c, &r.dir, nullptr);
  if (!scoped.ok()) return done(scoped.WithPrefix("node " + opts.name));
  Status queued = node_checkpoints->Post(std::move(r), Forward(done));
  if (!queued.ok()) done(queued);
}

void ClusterNode::Impl::ServeRestoreShards(const net::ConnectionPtr& c, net::RestoreShards r,
                                           net::Answer<net::ShardsDone> done) {
  Status scoped = ScopeCheckpoint(*c, &r.dir, &r.names);
  if (!scoped.ok()) return done(scoped.WithPrefix("node " + opts.name));
  const int restored = r.task;
  // A restored slot is on its backup before the restore is acknowledged.
  Status queued = node_checkpoints->Post(std::move(r), [this, done, restored](Result<net::ShardsDone> d) {
    if (!d.ok()) return done(d.status());
    auto piece = std::make_shared<net::ShardsDone>(std::move(d).value());
    ReplicateSlots({restored}, [this, done, piece](Status s) {
      if (!s.ok()) return done(s.WithPrefix("node " + opts.name + " replicating a restore"));
      done(std::move(*piece));
    });
  });
  if (!queued.ok()) done(queued);
}

}  // namespace sf
