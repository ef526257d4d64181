// Namespaces on a node (cluster/node_impl.h, graph/namespaces.h): the names
// a session's requests give are scoped to its credential's namespace, and
// each namespace's state can be listed and dropped.
#include "cluster/node_impl.h"
#include "graph/namespaces.h"

// jemalloc's control call, when the program links jemalloc (cli/malloc_conf.cc).
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen)
    __attribute__((weak));

namespace sf {

namespace {

// Hands freed pages back to the kernel now: jemalloc otherwise returns them
// only as later allocations tick its decay, which an idle node never does.
void ReturnFreedMemory() {
  ReleaseWarmTensorMemory();
  if (mallctl) mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);  // 4096: MALLCTL_ARENAS_ALL
}

// A session's namespace as the listings show it.
std::string Shown(const std::string& ns) { return ns.empty() ? kDefaultNamespace : ns; }

bool IsSession(const net::Connection& c) { return c.peer_role() == net::Role::kSession; }

}  // namespace

Status ClusterNode::Impl::ScopeNames(const net::Connection& c, std::vector<std::string>* names) const {
  if (!IsSession(c)) return Status::OK();
  for (std::string& n : *names) {
    SF_RETURN_IF_ERROR(CheckSessionName(n, "variable"));
    n = ScopedName(c.peer_namespace(), n);
  }
  return Status::OK();
}

void ClusterNode::Impl::UnscopeNames(const net::Connection& c, std::vector<std::string>* names) const {
  if (!IsSession(c)) return;
  for (std::string& n : *names) InNamespace(c.peer_namespace(), n, &n);
}

Status ClusterNode::Impl::ScopeCheckpoint(const net::Connection& c, std::string* dir,
                                          std::vector<std::string>* names) const {
  if (!IsSession(c)) return Status::OK();
  SF_RETURN_IF_ERROR(CheckSessionDir(*dir, "checkpoint directory"));
  *dir = ScopedDir(c.peer_namespace(), *dir);
  return names ? ScopeNames(c, names) : Status::OK();
}

std::vector<net::NamespaceState> ClusterNode::Impl::NamespaceStates() {
  std::map<std::string, net::NamespaceState> by_ns;
  for (const NamespaceUsage& u : quotas->Usage()) {
    net::NamespaceState& s = by_ns[u.ns];
    s.variables = u.variables;
    s.tables = u.tables;
    s.queues = u.queues;
    s.bytes = u.bytes;
  }
  {
    std::lock_guard<std::mutex> l(mu);
    for (const auto& [ns, n] : sessions.CountByNamespace()) by_ns[ns].sessions += n;
  }
  std::vector<net::NamespaceState> out;
  for (auto& [ns, s] : by_ns) {
    s.ns = Shown(ns);
    out.push_back(std::move(s));
  }
  return out;
}

void ClusterNode::Impl::ServeListNamespaces(const net::ConnectionPtr& c, net::ListNamespaces,
                                            net::Answer<net::Namespaces> done) {
  net::Namespaces reply;
  for (net::NamespaceState& s : NamespaceStates())
    if (!IsSession(*c) || s.ns == Shown(c->peer_namespace())) reply.namespaces.push_back(std::move(s));
  done(std::move(reply));
}

void ClusterNode::Impl::ServeDropNamespace(const net::ConnectionPtr& c, net::DropNamespace d,
                                           net::Answer<net::Namespaces> done) {
  const std::string ns = d.ns == kDefaultNamespace ? "" : d.ns;
  if (!ns.empty()) {
    Status valid = CheckNamespace(ns);
    if (!valid.ok()) return done(valid);
  }
  if (IsSession(*c) && ns != c->peer_namespace())
    return done(PermissionDenied("a session of namespace '" + Shown(c->peer_namespace()) +
                                 "' may not drop namespace '" + Shown(ns) +
                                 "' (only a node credential drops another namespace)"));
  net::Namespaces reply;
  for (net::NamespaceState& s : NamespaceStates())
    if (s.ns == Shown(ns)) reply.namespaces.push_back(std::move(s));
  const auto [vars, qs] = DropNamespaceHere(ns);
  Log("dropped namespace '" + Shown(ns) + "' (" + std::to_string(vars) + " variables, " + std::to_string(qs) +
      " queues) for " + c->peer_address());
  done(std::move(reply));
}

std::pair<int64_t, int64_t> ClusterNode::Impl::DropNamespaceHere(const std::string& ns) {
  auto in_ns = [&ns](const std::string& name) { return InNamespace(ns, name); };
  {
    // Its sessions close here first (their steps still running fail on the
    // dropped state; their partitions' hosts go with the last step).
    std::lock_guard<std::mutex> l(mu);
    sessions.CloseNamespace(ns);
    slot_names.DropWhere(in_ns);
    ns_last_used.erase(ns);
    idle.notify_all();
  }
  const int64_t vars = variables->DropWhere(in_ns);
  const int64_t qs = queues->DropWhere(in_ns);
  quotas->Clear(ns);
  // The shard actors free the state once they are done with requests in
  // flight; purge a little later too, so their pages go back to the kernel.
  ReturnFreedMemory();
  pool.Schedule([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ReturnFreedMemory();
  });
  return {vars, qs};
}

void ClusterNode::Impl::ExpireNamespaces(int64_t now_ms) {
  if (opts.ns_expiry_s <= 0) return;
  std::vector<std::string> idle_ns;
  {
    std::lock_guard<std::mutex> l(mu);
    const int64_t before = now_ms - opts.ns_expiry_s * 1000;
    std::set<std::string> open;
    for (const auto& kv : sessions.CountByNamespace()) open.insert(kv.first);
    for (const auto& [ns, last] : ns_last_used)
      if (last < before && !open.count(ns)) idle_ns.push_back(ns);
  }
  for (const std::string& ns : idle_ns) {
    const auto [vars, qs] = DropNamespaceHere(ns);
    Log("namespace '" + ns + "' expired: unused for " + std::to_string(opts.ns_expiry_s) + " s (" +
        std::to_string(vars) + " variables, " + std::to_string(qs) + " queues dropped)");
  }
}

}  // namespace sf
