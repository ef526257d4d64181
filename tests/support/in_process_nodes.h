// Two cluster nodes in the test's own process (ClusterNode::Start), the
// second joined to the first: for cluster tests that need the nodes to use
// the test's registries or to be inspected directly. Node processes on
// 127.0.0.1 are examples/common/local_cluster.h.
#pragma once

#include <memory>
#include <string>

#include "shardflow/cluster.h"

namespace sf::testing {

struct InProcessNodes {
  std::string secret = "0123456789abcdef0123456789abcdef";
  std::unique_ptr<ClusterNode> first, second;
  // Options for a session contacting the first node.
  ClusterOptions SessionOptions() const {
    ClusterOptions o;
    o.address = first->address();
    o.secret = secret;
    return o;
  }
};

// Starts two nodes with `base` (its secret and join are set here); the
// first start error otherwise.
inline Result<InProcessNodes> StartInProcessNodes(NodeOptions base = {}) {
  InProcessNodes n;
  base.secret = n.secret;
  base.join.clear();
  SF_ASSIGN_OR_RETURN(n.first, ClusterNode::Start(base));
  base.join = n.first->address();
  SF_ASSIGN_OR_RETURN(n.second, ClusterNode::Start(base));
  return n;
}

}  // namespace sf::testing
