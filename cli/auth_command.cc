// `shardflow cluster auth` and `shardflow node drain --etcd` (cli/auth_command.h).
#include "cli/auth_command.h"

#include <iostream>

#include "cluster/cluster_auth.h"
#include "shardflow/cluster.h"

namespace sf {

int ClusterAuthCommand(const NodeFlags& f) {
  if (f.drain_tls_dir.empty() || f.drain_insecure) {
    std::cerr << "shardflow cluster auth: give --tls-dir DIR (the directory with ca.key and the credentials' keys); "
                 "an --insecure etcd has no authentication\n";
    return 2;
  }
  cluster::EtcdAuthOptions o;
  o.etcd = f.members_etcd;
  o.tls_dir = f.drain_tls_dir;
  o.cluster = f.members_cluster.empty() ? "default" : f.members_cluster;
  if (!f.drain_tls_name.empty()) o.admin = f.drain_tls_name;
  auto r = cluster::EnableEtcdAuth(o);
  if (!r.ok()) {
    std::cerr << "shardflow cluster auth: " << r.status().ToString() << "\n";
    return 1;
  }
  for (const std::string& u : r->users) std::cout << "user " << u << "\n";
  std::cout << "etcd authentication is on for cluster " << o.cluster << "; the operator credential is "
            << o.tls_dir << "/" << o.admin << " (keep it, with ca.key, off the nodes)" << std::endl;
  return 0;
}

int EtcdDrainCommand(const NodeFlags& f) {
  const std::string& member = f.drain_addresses[0];
  const double wait_s = f.wait_s;
  Status s = DrainMember(f.members_etcd, f.drain_tls_dir, member, static_cast<int>(wait_s * 1000),
                         f.members_cluster.empty() ? "default" : f.members_cluster, f.drain_tls_name,
                         f.drain_insecure);
  if (!s.ok()) {
    std::cerr << "shardflow node drain: " << s.ToString() << "\n";
    return 1;
  }
  std::cout << "node " << member << (wait_s > 0 ? " drained and left" : " is draining") << std::endl;
  return 0;
}

}  // namespace sf
