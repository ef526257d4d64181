// The partition host actor's protocol (actor-private: includes CAF; include
// it only from actors/). A partition host keeps the partitions registered
// on it (one executor each) and runs their steps: its run handler starts
// the executor, whose ops run on the compute pool, so being an actor costs
// a step no extra thread hop. In a Session one host serves the session's
// devices; on a node one host serves each cluster session.
//
// One C++ type per message. The requesters are the coordinator (blocking
// for a registration) or a node's network thread, not actors, so each
// request carries its reply as one typed callback, `done`, run exactly
// once. In-process only (callbacks, graphs and tensors by reference): the
// cross-process form is a network message (net/), not these types.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "runtime/executor.h"

namespace sf {
namespace runtime {

// Builds partition `handle`'s executor for spec over *graph; keep holds
// what graph points into. done gets the executor's error, if any.
struct RegisterPartition {
  uint64_t handle = 0;
  std::string device;
  const Graph* graph = nullptr;
  ExecutorSpec spec;
  std::shared_ptr<const void> keep;
  std::function<void(Status)> done;
};
// One step of partition handle; done gets its fetches or the error.
struct RunPartition {
  uint64_t handle = 0;
  int64_t step_id = 0;
  std::vector<Tensor> feeds;
  Executor::DoneFn done;
  StepTrace* trace = nullptr;  // null: none; else outlives done
};
// Fails what the step's partitions here wait for. No reply.
struct AbortPartitionStep {
  int64_t step_id = 0;
  Status status;
};
// Forgets the step's rendezvous entries here. No reply.
struct CleanupPartitionStep {
  int64_t step_id = 0;
};

}  // namespace runtime
}  // namespace sf

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::RegisterPartition)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::RunPartition)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::AbortPartitionStep)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::CleanupPartitionStep)

namespace sf {
namespace runtime {

using PartitionHostActor =
    caf::typed_actor<caf::reacts_to<RegisterPartition>, caf::reacts_to<RunPartition>,
                     caf::reacts_to<AbortPartitionStep>, caf::reacts_to<CleanupPartitionStep>>;

}  // namespace runtime
}  // namespace sf
