// Dynamic control flow: conditionals and loops inside one graph (the
// TensorFlow paper's Switch/Merge/Enter/Exit/NextIteration/LoopCond).
//
//   auto r = sf::Cond(g, ops::Less(g, x, zero),
//                     [&](Graph& g) { return std::vector<Output>{ops::Neg(g, x)}; },
//                     [&](Graph& g) { return std::vector<Output>{x}; });
//   auto loop = sf::WhileLoop(g,
//       [](Graph& g, const std::vector<Output>& v) { return ops::Less(g, v[0], ops::Const(g, 10)); },
//       [](Graph& g, const std::vector<Output>& v) {
//         return std::vector<Output>{ops::Add(g, v[0], ops::Const(g, 1))}; },
//       {ops::Const(g, 0)}, {"count"});
//
// Values from outside a branch or loop body may be used freely inside it: the
// builders route them through a Switch (branches) or a constant Enter (loops).
// The executor runs the primitives with dead tensors and frames; iterations
// of a loop overlap up to parallel_iterations.
//
// Gradients (gradients.h) flow through a Cond's taken branch only, and
// through a WhileLoop by a backward loop that runs the iterations in reverse,
// popping the forward values it needs from per-step stacks the forward loop
// pushes to. A loop nested in another loop's body gets its backward loop
// inside the enclosing backward body, its stacks indexed by the iterations of
// both (of every enclosing loop, at any depth).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "shardflow/graph.h"

namespace sf {

namespace ops {

// Forwards data to output 1 when pred (bool scalar) is true, else to output
// 0; the other output is dead.
std::vector<Output> Switch(Graph& g, Output data, Output pred, const std::string& name = "");
// Forwards its first live input (output 0) and that input's index (output 1,
// int32); dead only when every input is dead.
std::vector<Output> Merge(Graph& g, const std::vector<Output>& inputs, const std::string& name = "");
// Moves data into the child frame `frame_name` (iteration 0, or every
// iteration when is_constant).
Output Enter(Graph& g, Output data, const std::string& frame_name, bool is_constant = false,
             int64_t parallel_iterations = 10, const std::string& name = "");
// Moves data from a loop's frame back to its parent frame.
Output Exit(Graph& g, Output data, const std::string& name = "");
// Moves data to the next iteration of its frame.
Output NextIteration(Graph& g, Output data, const std::string& name = "");
// The loop predicate (bool scalar); maximum_iterations < 0 means no limit.
Output LoopCond(Graph& g, Output pred, const std::string& loop_name = "",
                int64_t maximum_iterations = -1, const std::string& name = "");

// Saves value for this step under (stack_name, index) (int32); returns the
// node id (no outputs), -1 on error. Used by WhileLoop gradients.
int StackPush(Graph& g, Output value, Output index, const std::string& stack_name);
// Takes back the value saved under (stack_name, index) in this step; a
// run-time error when there is none.
Output StackPop(Graph& g, Output index, const std::string& stack_name, DType dtype,
                PartialShape shape = PartialShape());

}  // namespace ops

using BranchFn = std::function<std::vector<Output>(Graph&)>;

// Builds `pred ? then_fn() : else_fn()`: both branches are built, only the
// taken one runs. Returns one merged output per branch output; on error
// (branch output counts or dtypes differ, an invalid pred) records it in
// g.status() and returns an empty vector.
std::vector<Output> Cond(Graph& g, Output pred, BranchFn then_fn, BranchFn else_fn,
                         const std::string& name = "cond");

struct WhileLoopOptions {
  std::string name = "while";     // the loop's frame name (made unique)
  int64_t parallel_iterations = 10;  // iterations in flight at once
  int64_t maximum_iterations = -1;   // < 0: unlimited; exceeding it is a run-time error
};

using LoopCondFn = std::function<Output(Graph&, const std::vector<Output>&)>;
using LoopBodyFn = std::function<std::vector<Output>(Graph&, const std::vector<Output>&)>;

// Builds `while (cond_fn(vars)) vars = body_fn(vars);` and returns the final
// loop variables. Errors (also recorded in g.status()) name the loop and the
// variable: a body returning the wrong number of values, a dtype change, or a
// shape incompatible with the loop variable's.
Result<std::vector<Output>> WhileLoop(Graph& g, LoopCondFn cond_fn, LoopBodyFn body_fn,
                                      const std::vector<Output>& loop_vars,
                                      WhileLoopOptions options = {});

}  // namespace sf
