// Step planning as pure functions of the graph: pruning to what a run needs,
// cycle detection, feed checks, placement and partitioning. The coordinator
// calls them once per run signature and caches the result.
#pragma once

#include <string>
#include <vector>

#include "runtime/executor.h"
#include "graph/partition.h"
#include "shardflow/graph.h"

namespace sf {
namespace runtime {

// The nodes the fetches and targets need (through data and control edges,
// stopping at fed nodes), producers first. InvalidArgument naming a node on
// the cycle when there is one.
Result<std::vector<int>> PruneAndSort(const Graph& g, const std::vector<Output>& feeds,
                                      const std::vector<Output>& fetches,
                                      const std::vector<int>& targets);

// A run's names resolved in g: the fed outputs, the fetched outputs and
// the target nodes, in the order given. g's construction error when it has
// one; InvalidArgument for a feed given twice; the lookup's error, naming
// the feed, fetch or target, for an unknown name.
struct ResolvedRun {
  std::vector<Output> feeds, fetches;
  std::vector<int> targets;
  std::vector<int> order;  // PlanRun: the nodes the step runs, producers first
};
Result<ResolvedRun> ResolveRun(const Graph& g,
                               const std::vector<std::pair<std::string, Tensor>>& feeds,
                               const std::vector<std::string>& fetches,
                               const std::vector<std::string>& targets);

// ResolveRun, then PruneAndSort into order: the first half of every
// coordinator's plan (errors as those two).
Result<ResolvedRun> PlanRun(const Graph& g, const std::vector<std::pair<std::string, Tensor>>& feeds,
                            const std::vector<std::string>& fetches, const std::vector<std::string>& targets);

// The key plans are cached under: feed, fetch and target names, in order.
std::string RunSignature(const std::vector<std::pair<std::string, Tensor>>& feeds,
                         const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets);

// Checks a fed value against the fed output's dtype and declared shape;
// InvalidArgument naming the feed otherwise.
Status ValidateFeed(const std::string& feed_name, const Output& target, const Tensor& value);
// ValidateFeed for every feed of a step against its plan's fed outputs.
Status ValidateFeeds(const std::vector<std::pair<std::string, Tensor>>& feeds, const std::vector<Output>& fed);

// One device's share of a step over partitioned graphs: what its executor
// runs (ids in the partition's graph), and where its feeds and fetches sit
// in the run's lists.
struct DeviceStep {
  std::string device;
  const PartitionGraph* partition = nullptr;
  ExecutorSpec spec;
  std::vector<int> feed_index;
  std::vector<int> fetch_index;
};

// Sets d->spec.fed and d->feed_index to the feeds (feed_index[i]: feeds[i]'s
// place in the run's list) whose node is among d->spec.nodes: a client may
// feed any tensor (as in TensorFlow), and the executor has no node for one
// the step does not need. Never fails.
void KeepNeededFeeds(const std::vector<Output>& feeds, const std::vector<int>& feed_index, DeviceStep* d);

// For a step whose pruned nodes `order` (original ids) were partitioned into
// `parts`: each device's nodes, closed over the _Recvs its share needs and
// the _Sends other devices receive from. Devices with nothing to run are
// left out. Errors from PruneAndSort on a partition graph.
Result<std::vector<DeviceStep>> PlanDeviceSteps(const std::map<std::string, PartitionGraph>& parts,
                                                const std::vector<int>& order,
                                                const std::vector<Output>& feeds,
                                                const std::vector<Output>& fetches);

}  // namespace runtime
}  // namespace sf
