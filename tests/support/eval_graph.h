// A small synchronous reference evaluator for tests: runs the nodes a fetch
// needs in topological order, one at a time, on the standard kernels, with
// in-memory variables. Conds (Switch/Merge, dead values) run here too; a
// graph with a loop (an Enter) runs on the partition executor instead, which
// alone implements frames and iterations. Independent of the actor runtime, so op, kernel and
// gradient tests do not depend on it (and the runtime can be checked
// against it).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/in_memory_variables.h"
#include "shardflow/graph.h"

namespace sf {
namespace testing {

using Feeds = std::vector<std::pair<Output, Tensor>>;

// Evaluates fetches (and runs targets) with feeds; the first kernel error is
// returned prefixed with the node and op. vars may be null (a fresh store).
Result<std::vector<Tensor>> EvalGraph(const Graph& g, const Feeds& feeds,
                                      const std::vector<Output>& fetches,
                                      const ControlDeps& targets = {},
                                      InMemoryVariables* vars = nullptr);

// Evaluates one output; REQUIRES-style helper for tests: returns the error.
Result<Tensor> Eval(const Graph& g, Output fetch, const Feeds& feeds = {},
                    InMemoryVariables* vars = nullptr);

}  // namespace testing
}  // namespace sf
