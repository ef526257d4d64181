// Step planning as pure functions of the graph: pruning to what a run needs,
// cycle detection, feed checks, placement and partitioning. The coordinator
// calls them once per run signature and caches the result.
#pragma once

#include <string>
#include <vector>

#include "shardflow/graph.h"

namespace sf {
namespace runtime {

// The nodes the fetches and targets need (through data and control edges,
// stopping at fed nodes), producers first. InvalidArgument naming a node on
// the cycle when there is one.
Result<std::vector<int>> PruneAndSort(const Graph& g, const std::vector<Output>& feeds,
                                      const std::vector<Output>& fetches,
                                      const std::vector<int>& targets);

// Checks a fed value against the fed output's dtype and declared shape;
// InvalidArgument naming the feed otherwise.
Status ValidateFeed(const std::string& feed_name, const Output& target, const Tensor& value);

// The device of every node in `nodes` (same order). One CPU device for now.
std::vector<std::string> Place(const Graph& g, const std::vector<int>& nodes);

// One partition: the nodes placed on one device, in topological order.
struct PartitionSpec {
  std::string device;
  std::vector<int> nodes;
};

// Splits topologically ordered nodes by device; each keeps the order. An edge
// between two partitions would become a Send/Recv pair (not needed while
// there is one device): Unimplemented names it.
Result<std::vector<PartitionSpec>> Partition(const Graph& g, const std::vector<int>& nodes,
                                             const std::vector<std::string>& placement);

}  // namespace runtime
}  // namespace sf
