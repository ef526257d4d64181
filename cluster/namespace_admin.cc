// Listing and dropping namespaces across a cluster's nodes (include/shardflow/cluster.h).
#include <map>

#include "cluster/admin_endpoint.h"
#include "cluster/member_registry.h"
#include "net/credentials.h"
#include "net/peer_rpc.h"
#include "shardflow/cluster.h"

namespace sf {

namespace {

// Asks every member etcd lists with request (ListNamespaces or
// DropNamespace); each node's reply, in member order. Unavailable naming
// etcd or the first node that failed.
template <class Req>
Result<std::vector<net::Namespaces>> AskEveryNode(const std::string& etcd, const std::string& tls_dir,
                                                  const std::string& cluster, const std::string& tls_name,
                                                  bool insecure, const Req& request) {
  std::optional<net::Credential> credential;
  // A node credential asks as the operator.
  SF_ASSIGN_OR_RETURN(auto endpoint, cluster::AdminEndpoint(tls_dir, tls_name, insecure, &credential));
  SF_ASSIGN_OR_RETURN(auto members, cluster::ReadMembers(etcd, credential, cluster));
  std::vector<net::Namespaces> out;
  Status failed;
  for (const cluster::MemberRecord& m : members) {
    auto c = endpoint->Connect(m.address);
    if (!c.ok()) {
      failed = c.status().WithPrefix("node " + m.name + " (" + m.address + ")");
      break;
    }
    auto reply = net::Call(*c, request, 30000);
    (*c)->Close();
    if (!reply.ok()) {
      failed = reply.status().WithPrefix("node " + m.name + " (" + m.address + ")");
      break;
    }
    out.push_back(std::move(*reply));
  }
  endpoint->Shutdown();
  if (!failed.ok()) return failed;
  return out;
}

// The nodes' states summed by namespace, by name.
std::vector<NamespaceInfo> Sum(const std::vector<net::Namespaces>& nodes) {
  std::map<std::string, NamespaceInfo> by;
  for (const net::Namespaces& n : nodes)
    for (const net::NamespaceState& s : n.namespaces) {
      NamespaceInfo& i = by[s.ns];
      i.name = s.ns;
      i.variables += s.variables;
      i.tables += s.tables;
      i.queues += s.queues;
      i.bytes += s.bytes;
      i.sessions += s.sessions;
      ++i.nodes;
    }
  std::vector<NamespaceInfo> out;
  for (auto& kv : by) out.push_back(std::move(kv.second));
  return out;
}

}  // namespace

Result<std::vector<NamespaceInfo>> ListClusterNamespaces(const std::string& etcd, const std::string& tls_dir,
                                                         const std::string& cluster, const std::string& tls_name,
                                                         bool insecure) {
  SF_ASSIGN_OR_RETURN(auto nodes, AskEveryNode(etcd, tls_dir, cluster, tls_name, insecure, net::ListNamespaces{}));
  return Sum(nodes);
}

Result<NamespaceInfo> DropClusterNamespace(const std::string& etcd, const std::string& tls_dir, const std::string& ns,
                                           const std::string& cluster, const std::string& tls_name, bool insecure) {
  SF_ASSIGN_OR_RETURN(auto nodes, AskEveryNode(etcd, tls_dir, cluster, tls_name, insecure, net::DropNamespace{ns}));
  std::vector<NamespaceInfo> all = Sum(nodes);
  NamespaceInfo dropped;
  dropped.name = ns;
  for (const NamespaceInfo& i : all)
    if (i.name == ns) dropped = i;
  return dropped;
}

}  // namespace sf
