// etcd's authentication and roles for a shardflow cluster: what each
// credential may read and write in etcd (docs/CLUSTER.md, "Messages and
// security").
//
// Under PREFIX = /shardflow/CLUSTER/ (cluster/member_table.h):
//   members/NAME  a node's registration (its lease)    written by node NAME
//   drain/NAME    the operator's mark: NAME drains     written by the operator (and NAME, to clear it)
//   leader/NAME   node NAME's candidacy (election)     written by node NAME
//   map           the shard map                        written by any node (the leader, by its txn)
// etcd users are the credentials' certificate names, with passwords derived
// from their keys (cluster/etcd_identity.h):
//   admin:NAME    etcd's root role: everything, users and roles included
//   node:NAME     reads PREFIX; writes members/NAME, drain/NAME, leader/NAME, map
//   node:node     the shared default node credential, which names no one
//                 node: writes every members/, drain/ and leader/ key (any node's)
//   session:NAME  reads members/ and map; writes nothing
// etcd 3.4 permissions are key ranges, unconditional: it cannot limit the
// map to the node that leads (every node may lead).
// Thread-safety: free functions; each makes its own client.
#pragma once

#include <string>
#include <vector>

#include "cluster/etcd_identity.h"
#include "shardflow/status.h"

namespace sf {
namespace cluster {

struct EtcdAuthOptions {
  std::string etcd;                     // "host:port[,...]" of etcd (required)
  std::string tls_dir;                  // the credentials directory, with ca.key and every credential's key (required)
  std::string cluster = "default";      // the cluster whose keys the roles cover
  std::string admin = kAdminCredential; // the operator credential (made in tls_dir when missing)
  int timeout_ms = 10000;               // each etcd call
};

// What EnableEtcdAuth did: the etcd users it made or updated, "user roles...".
struct EtcdAuthReport {
  std::vector<std::string> users;
};

// Makes the operator credential and every credential's NAME.etcd.crt in
// tls_dir when missing, creates etcd's roles for the cluster and a user per
// credential of tls_dir (its password updated when it exists), and turns
// etcd's authentication on. Idempotent: run it again after issuing
// credentials (as the operator once authentication is on). The errors of
// the files (NotFound naming ca.key) or of etcd, naming the call.
Result<EtcdAuthReport> EnableEtcdAuth(const EtcdAuthOptions& options);

// The etcd role names for cluster (exposed for tests and docs).
std::string EtcdNodeRole(const std::string& cluster);
std::string EtcdMemberRole(const std::string& cluster, const std::string& name);
std::string EtcdAnyNodeRole(const std::string& cluster);
std::string EtcdSessionRole(const std::string& cluster);

// The key of the operator's drain mark for member name under prefix
// (PREFIX/drain/NAME).
std::string DrainKey(const std::string& prefix, const std::string& name);
// The key of member name's candidacy for placement leader under prefix
// (PREFIX/leader/NAME, cluster/placement_leader.cc; its value is the
// member's address, under a lease of the candidacy's own).
std::string LeaderKey(const std::string& prefix, const std::string& name);

}  // namespace cluster
}  // namespace sf
