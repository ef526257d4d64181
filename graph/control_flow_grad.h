// The gradient of a WhileLoop, used by Gradients (graph/gradients.cc) when
// its reverse walk reaches a loop's Exit. As in the TensorFlow paper: the
// forward loop pushes the values the gradient needs on per-step stacks
// (indexed by iteration), and a backward loop pops them, running the
// iterations in reverse.
#pragma once

#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "shardflow/graph.h"

namespace sf {
namespace internal {

struct LoopGradient {
  std::vector<int> loop_nodes;  // the forward loop's nodes (the walk skips them)
  // (value entering the loop, its gradient): initial loop variables and the
  // outside values the loop reads.
  std::vector<std::pair<Output, Output>> input_grads;
};

// Builds the backward loop of the loop that Exit node `exit_id` leaves.
// grad_of(o) returns the summed gradient flowing into o (invalid if none).
// A loop nested in another loop's body gets its gradient inside the
// enclosing loop's backward body (its stacks indexed by both iterations).
Result<LoopGradient> BuildWhileLoopGradient(Graph& g, int exit_id,
                                            const std::function<Output(Output)>& grad_of);

// Gradients (shardflow/gradients.h) whose walk stays among the nodes of
// `within` (all nodes when null): a loop body's gradient must not follow the
// back edges of the loops around it (through them the body's own Exit, and
// the enclosing body, reach its outputs). Errors as Gradients'.
Result<std::vector<Output>> GradientsWithin(Graph& g, const std::vector<Output>& ys,
                                            const std::vector<Output>& xs,
                                            const std::vector<Output>& grad_ys, bool allow_unconnected,
                                            const std::set<int>* within);

}  // namespace internal
}  // namespace sf
