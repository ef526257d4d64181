// PartitionHost: where a coordinator's partitions live and run, seen from
// the coordinator. One interface for the host in this process (an actor,
// actors/partition_host.h) and the host on a node (reached over the
// network, cluster/remote_partition_host.h): register, run, abort, cleanup.
// Thread-safety: every method may be called from many threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/executor.h"

namespace sf {
namespace runtime {

class PartitionHost {
 public:
  virtual ~PartitionHost() = default;

  // Registers the partition `spec` of g placed on `device` under `handle`
  // (unique per host), so later Runs can name it; keep holds what g points
  // into for as long as the host keeps the partition. Blocks until the host
  // answered; the error names the device (and the host) when it refused.
  virtual Status Register(uint64_t handle, const std::string& device, const Graph& g, const ExecutorSpec& spec,
                          std::shared_ptr<const void> keep) = 0;
  // Runs one step of partition handle with feeds in its spec.fed order;
  // done (exactly once, on any thread) gets its fetches or the error. With
  // a trace (null: none), the partition's events are in it before done runs
  // (a remote host adds its node's as a RemoteTrace); it outlives done.
  // With progress (null: none), an op that finishes here sets it to 1
  // (Executor::RunStep); a remote host ignores it (its node counts).
  virtual void Run(uint64_t handle, int64_t step_id, std::vector<Tensor> feeds, Executor::DoneFn done,
                   StepTrace* trace, std::atomic<uint64_t>* progress = nullptr) = 0;
  // Fails whatever the step's partitions here wait for (tensors from
  // partitions elsewhere), with status as the cause. One-way.
  virtual void Abort(int64_t step_id, const Status& status) = 0;
  // Forgets what the step left here (its rendezvous entries), once every
  // partition of the step reported. One-way.
  virtual void Cleanup(int64_t step_id) = 0;
};

}  // namespace runtime
}  // namespace sf
