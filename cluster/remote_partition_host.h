// The PartitionHost of a cluster session on one node: partitions register
// and run over the session's connection to the member (net/messages.h's
// RegisterPartition, RunPartition, AbortStep, CleanupStep); the node serves
// them with its partition host actor (cluster/cluster_node.cc).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/step_deadlines.h"
#include "net/peer_rpc.h"
#include "runtime/partition_host.h"

namespace sf {
namespace runtime {

struct RemoteHostOptions {
  net::ConnectionPtr conn;       // to the member
  std::string where;             // its address, for errors
  uint64_t session_id = 0;       // the registrations' session
  int64_t epoch = 0;             // the shard map epoch the tasks were placed by (0: none)
  std::vector<net::Member> tasks;  // the session's tasks: task i's member
  int request_timeout_ms = 10000;  // for a registration
  int step_timeout_ms = 0;         // a backstop for a step (failures are found by heartbeats)
  // The session's no-progress deadlines (null: only the backstop): a run
  // asks its node for progress reports and fails with DeadlineExceeded when
  // the step's partitions all went quiet for deadlines->timeout_ms().
  std::shared_ptr<StepDeadlines> deadlines;
  // Called when a step finds the member unavailable (the session then
  // reconfigures before its next step).
  std::function<void()> on_unavailable;
};

// A host reaching partitions on a member; every error of a step says which
// step and which task and member it came from.
std::shared_ptr<PartitionHost> NewRemotePartitionHost(RemoteHostOptions options);

}  // namespace runtime
}  // namespace sf
