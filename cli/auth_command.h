// The operator's commands on etcd's side of a cluster: `shardflow cluster
// auth` (etcd's users and roles, cluster/cluster_auth.h) and `shardflow node
// drain --etcd` (the operator's drain mark).
#pragma once

#include "cli/node_command.h"

namespace sf {

// `shardflow cluster auth --etcd ... --tls-dir DIR [--cluster NAME] [--tls-name ADMIN]`; the exit code.
int ClusterAuthCommand(const NodeFlags& flags);
// `shardflow node drain NAME|HOST:PORT --etcd ... (--tls-dir DIR [--tls-name NAME] | --insecure)`; the exit code.
int EtcdDrainCommand(const NodeFlags& flags);

}  // namespace sf
