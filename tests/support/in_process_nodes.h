// Two cluster nodes in the test's own process (ClusterNode::Start), both
// registered in the test process's etcd: for cluster tests that need the
// nodes to use the test's registries or to be inspected directly. Node
// processes on 127.0.0.1 are examples/common/local_cluster.h.
#pragma once

#include <memory>
#include <string>

#include "shardflow/cluster.h"
#include "tests/support/test_credentials.h"
#include "tests/support/test_etcd.h"

namespace sf::testing {

struct InProcessNodes {
  std::string tls_dir = TestTlsDir();
  std::unique_ptr<ClusterNode> first, second;
  // Options for a session contacting the first node.
  ClusterOptions SessionOptions() const {
    ClusterOptions o;
    o.address = first->address();
    o.tls_dir = tls_dir;
    return o;
  }
};

// Starts two nodes with `base` (its credentials, etcd and a cluster name of
// their own are set here); the first start error otherwise.
inline Result<InProcessNodes> StartInProcessNodes(NodeOptions base = {}) {
  static int clusters = 0;  // each pair is a cluster of its own in the one etcd
  InProcessNodes n;
  base.tls_dir = n.tls_dir;
  base.etcd = TestEtcd();
  base.cluster = "in-process-" + std::to_string(++clusters);
  base.lease_ttl_s = 1;
  // etcd's roles are per cluster: the test etcd's operator grants this one's.
  SF_RETURN_IF_ERROR(EnableClusterAuth(base.etcd, n.tls_dir, base.cluster));
  SF_ASSIGN_OR_RETURN(n.first, ClusterNode::Start(base));
  SF_ASSIGN_OR_RETURN(n.second, ClusterNode::Start(base));
  return n;
}

}  // namespace sf::testing
