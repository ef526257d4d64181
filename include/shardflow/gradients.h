// Automatic differentiation: adds the backward subgraph to a graph.
#pragma once

#include <vector>

#include "shardflow/graph.h"

namespace sf {

// Adds nodes computing d(sum of ys)/d(x) for each x, walking back from ys
// (breadth first) through each op's registered gradient; gradients reaching
// one output from several consumers are summed with AddN. grad_ys, when
// given, seeds each y (default: ones). Returns one Output per x; an x that
// no y depends on (or only through non-differentiable ops) gets an invalid
// Output when allow_unconnected, and InvalidArgument naming it otherwise.
Result<std::vector<Output>> Gradients(Graph& g, const std::vector<Output>& ys,
                                      const std::vector<Output>& xs,
                                      const std::vector<Output>& grad_ys = {},
                                      bool allow_unconnected = false);

}  // namespace sf
