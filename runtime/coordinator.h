// Coordinator: plans and drives the steps of one graph, for the local
// Session and the ClusterSession alike. Per run signature it prunes,
// places over its devices (sf::Place), partitions (sf::Partition), plans
// each device's share and registers it on that device's PartitionHost,
// once; a step then runs every partition, joins them (runtime::StepJoin:
// the first real cause beats the Aborted it caused), broadcasts the abort
// to the step's hosts on the first failure and their cleanup at the end.
//
// What differs between the session kinds is only where a device's host is
// (CoordinatorOptions::host_for): an actor in this process, or a node.
// Thread-safety: every method may be called from many threads at once.
// PlanFor blocks while it registers (hosts may be remote); Find and
// StartStep never block, so a step of a known signature starts on its
// caller's thread.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/partition.h"
#include "runtime/partition_host.h"
#include "shardflow/run_args.h"
#include "shardflow/graph.h"

namespace sf {
namespace runtime {

struct CoordinatorOptions {
  // The devices the graph is placed over (at least one). With one device
  // and place_single_device false the graph is not placed at all.
  std::vector<std::string> devices;
  bool place_single_device = false;
  // The host of a device, asked while a plan registers; its error fails
  // the plan (and names the device).
  std::function<Result<std::shared_ptr<PartitionHost>>(const std::string& device)> host_for;
};

// The whole graph placed over the coordinator's devices and partitioned,
// computed once per graph size (Place does not depend on the run signature;
// a graph may grow between runs).
struct GraphPlacement {
  Status error;                        // Place's or Partition's
  std::vector<std::string> device;     // by node id
  std::map<std::string, PartitionGraph> parts;
  int num_nodes = 0;
};

class Coordinator {
 public:
  struct Plan;
  using DoneFn = std::function<void(Result<std::vector<Tensor>>)>;

  // g must outlive the coordinator.
  Coordinator(const Graph& g, CoordinatorOptions options);
  ~Coordinator();

  // The registered plan of signature key (runtime::RunSignature), or null
  // when there is none yet (or it failed). Never blocks on a registration.
  std::shared_ptr<const Plan> Find(const std::string& key);
  // The plan of a run, built and registered on first use of its signature
  // (blocking). A plan that failed is kept with its error (cycles, unknown
  // names), except when a host was unavailable or timed out: the next run
  // of the signature tries again.
  std::shared_ptr<const Plan> PlanFor(const NamedFeeds& feeds, const std::vector<std::string>& fetches,
                                      const std::vector<std::string>& targets);
  // Starts one step of plan with the run's feeds. done runs exactly once, on
  // whichever thread finishes the step (the caller's for a plan error, an
  // invalid feed or a plan with nothing to run). With options.trace_file set
  // the step's trace is written there before done runs (a write failure is
  // the step's error: Unavailable naming the file); trace_process names
  // this process's row in it.
  // attempt_of > 0 runs the step under that id (NewStepId's, plus the
  // attempt: a step run again, kernels/update_origin.h) instead of a new one.
  void StartStep(const std::shared_ptr<const Plan>& plan, const NamedFeeds& feeds, DoneFn done,
                 const RunOptions& options = {}, const std::string& trace_process = "session",
                 int64_t attempt_of = 0);
  // A new step id (they advance by the stride: SetStepIds).
  int64_t NewStepId();
  // Whether every stateful op plan runs may run again in a step run again
  // (OpDef::repeatable); false for a plan whose run could not be pruned.
  static bool Repeatable(const Plan& plan);

  // Drops every plan: the next run of each signature registers again (a
  // reconfiguration moved partitions). Steps in flight keep their plans.
  void Reset();
  // The whole graph's placement and partitions (see GraphPlacement).
  std::shared_ptr<const GraphPlacement> Placement();
  // Step ids start at first and advance by stride (sessions sharing nodes
  // draw the first at random; a cluster session leaves room between two
  // steps' ids for the attempts of one, kernels/update_origin.h).
  void SetStepIds(int64_t first, int64_t stride) {
    next_step_ = first;
    step_stride_ = stride;
  }

 private:
  std::shared_ptr<Plan> BuildPlan(const NamedFeeds& feeds, const std::vector<std::string>& fetches,
                                  const std::vector<std::string>& targets);
  std::shared_ptr<const GraphPlacement> PlacementLocked();  // REQUIRES: build_mu_

  const Graph& graph_;
  const CoordinatorOptions options_;
  std::atomic<int64_t> next_step_{1};
  int64_t step_stride_ = 1;
  std::atomic<uint64_t> next_handle_{1};

  // Held while plans are built and registered: one at a time.
  std::mutex build_mu_;
  std::shared_ptr<const GraphPlacement> placement_;  // GUARDED_BY(build_mu_)

  // Held only to look up or store a plan, never while one registers.
  std::mutex plans_mu_;
  std::map<std::string, std::shared_ptr<const Plan>> plans_;  // GUARDED_BY(plans_mu_)
};

}  // namespace runtime
}  // namespace sf
