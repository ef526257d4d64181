// The gradient checker: compares the symbolic gradient (Gradients) of a small
// graph with central differences in float64.
//
// Every differentiable op must have at least one GradCheck naming it; the
// coverage test fails for a differentiable op that has none. Each op group
// adds its checks in its own Add*GradChecks function (tests/graph/*_grad_test.cc).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "shardflow/graph.h"

namespace sf {
namespace testing {

struct GradCheck {
  std::string op;    // the op this check covers (for the coverage test)
  std::string name;  // a short description
  // Shapes of the float64 inputs; each becomes a Placeholder fed with values
  // drawn uniformly from [lo, hi] (seeded).
  std::vector<Shape> input_shapes;
  // Builds y from the inputs (float64). Non-differentiable extra inputs
  // (indices, shapes) are built as Consts inside.
  std::function<Output(Graph& g, const std::vector<Output>& xs)> build;
  double lo = -1.0, hi = 1.0;
  double tolerance = 1e-6;  // max |symbolic - numeric| / max(1, |numeric|)
};

using GradCheckTable = std::vector<GradCheck>;

// Runs one check; returns an error describing the worst mismatch
// (op, input, element, both values) or OK.
Status RunGradCheck(const GradCheck& check, uint64_t seed = 1);

void AddCoreGradChecks(GradCheckTable& t);
void AddMathGradChecks(GradCheckTable& t);
void AddNNGradChecks(GradCheckTable& t);
void AddArrayGradChecks(GradCheckTable& t);
void AddStateGradChecks(GradCheckTable& t);
void AddControlFlowGradChecks(GradCheckTable& t);

}  // namespace testing
}  // namespace sf
