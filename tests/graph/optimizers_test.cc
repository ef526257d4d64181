// Minimize orders each dense update after the step's other readers of its
// variable's value (graph/optimizers.cc, OrderUpdatesAfterReaders), so the
// shard can update in place instead of copying the variable.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "shardflow/control_flow.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"

using namespace sf;

namespace {

// The update node whose first input is the handle of `read`.
int UpdateOf(const Graph& g, Output read) {
  const Output h = ops::VariableHandle(read);
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.op.rfind("Apply", 0) == 0 && !n.inputs.empty() && n.inputs[0] == h) return id;
  }
  return -1;
}

// The nodes reading `read`'s value, other than update.
std::vector<int> ReadersOf(const Graph& g, Output read, int update) {
  std::vector<int> out;
  for (int id = 0; id < g.num_nodes(); ++id) {
    if (id == update) continue;
    for (const Output& in : g.node(id).inputs)
      if (in == read) out.push_back(id);
  }
  return out;
}

bool Waits(const Graph& g, int node, int before) {
  const auto& c = g.node(node).control_inputs;
  return std::find(c.begin(), c.end(), before) != c.end();
}

}  // namespace

TEST_CASE("Minimize: a dense update waits for the step's readers of its variable", "[optimizers]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {4, 3}, "x");
  auto w1 = ops::Variable(g, "w1", ops::Zeros(g, DType::kFloat32, {3, 5}));
  auto w2 = ops::Variable(g, "w2", ops::Zeros(g, DType::kFloat32, {5, 2}));
  auto h = ops::MatMul(g, x, w1);
  auto y = ops::MatMul(g, h, ops::Identity(g, w2));  // through Identity: the same buffer
  auto loss = ops::Sum(g, y * y);
  auto train = MomentumOptimizer(0.1, 0.9).Minimize(g, loss);
  REQUIRE(train.ok());
  const int u2 = UpdateOf(g, w2);
  REQUIRE(u2 >= 0);
  // w2's value is read by the Identity, whose output the forward MatMul and
  // the input gradient's MatMul (dy x w2^T, not an ancestor of w2's own
  // gradient) read: the update waits for both.
  int identity = -1;
  for (int r : ReadersOf(g, w2, u2))
    if (g.node(r).op == "Identity") identity = r;
  REQUIRE(identity >= 0);
  const Output id_out(&g, identity, 0);
  const std::vector<int> readers = ReadersOf(g, id_out, u2);
  REQUIRE(readers.size() >= 2);
  for (int r : readers) {
    INFO(g.node(r).name);
    CHECK(Waits(g, u2, r));
  }
  // Nothing the step does not run is pulled in: the gradient builder also
  // made x's gradient (dh x w1^T), which no update needs, so w1's update
  // waits for its forward reader only.
  const int u1 = UpdateOf(g, w1);
  REQUIRE(u1 >= 0);
  const std::vector<int> w1_readers = ReadersOf(g, w1, u1);
  REQUIRE(w1_readers.size() == 2);
  int waited = 0;
  for (int r : w1_readers) {
    const bool used = !ReadersOf(g, Output(&g, r, 0), -1).empty();
    INFO(g.node(r).name << (used ? " (used)" : " (x's gradient, unused)"));
    CHECK(Waits(g, u1, r) == used);
    waited += Waits(g, u1, r);
  }
  CHECK(waited == 1);
}

TEST_CASE("Minimize: readers on another device or behind control flow add no edge", "[optimizers]") {
  SECTION("another device") {
    Graph g;
    Output w;
    {
      auto d = g.DeviceScope("/job:worker/task:1");
      w = ops::Variable(g, "w", ops::Zeros(g, DType::kFloat32, {3, 2}));
    }
    auto d = g.DeviceScope("/job:worker/task:0");
    auto x = ops::Placeholder(g, DType::kFloat32, {4, 3}, "x");
    auto y = ops::MatMul(g, x, w);
    auto train = GradientDescentOptimizer(0.1).Minimize(g, ops::Sum(g, y * y));
    REQUIRE(train.ok());
    const int u = UpdateOf(g, w);
    REQUIRE(u >= 0);
    CHECK(g.node(u).control_inputs.empty());
  }
  SECTION("a conditional in the step") {
    Graph g;
    auto x = ops::Placeholder(g, DType::kFloat32, {4, 3}, "x");
    auto p = ops::Placeholder(g, DType::kBool, {}, "p");
    auto w = ops::Variable(g, "w", ops::Zeros(g, DType::kFloat32, {3, 2}));
    auto y = Cond(g, p, [&](Graph& b) { return std::vector<Output>{ops::MatMul(b, x, w)}; },
                  [&](Graph& b) { return std::vector<Output>{ops::MatMul(b, x, w) * ops::Const(b, 2.0f)}; });
    REQUIRE(g.status().ok());
    auto train = GradientDescentOptimizer(0.1).Minimize(g, ops::Sum(g, y[0] * y[0]));
    REQUIRE(train.ok());
    const int u = UpdateOf(g, w);
    REQUIRE(u >= 0);
    CHECK(g.node(u).control_inputs.empty());
  }
}
