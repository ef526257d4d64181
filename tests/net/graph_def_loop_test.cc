// Saved graphs with loops: the NextIteration -> Merge back edge is the one
// edge that points forward in a GraphDef, so loading patches it afterwards.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>

#include "shardflow/graph_io.h"
#include "shardflow/control_flow.h"
#include "shardflow/ops.h"
#include "shardflow/session.h"

using namespace sf;

TEST_CASE("A graph with a while loop survives save and load", "[graph_def][control_flow]") {
  Graph g;
  auto n = ops::Placeholder(g, DType::kInt32, PartialShape(Shape{}), "n");
  auto loop = WhileLoop(
      g, [&](Graph& g, const std::vector<Output>& v) { return ops::Less(g, v[0], n); },
      [](Graph& g, const std::vector<Output>& v) {
        return std::vector<Output>{ops::Add(g, v[0], ops::Const(g, int32_t{1})),
                                   ops::Add(g, v[1], v[0])};
      },
      {ops::Const(g, int32_t{0}), ops::Const(g, int32_t{0})});
  REQUIRE(loop.ok());
  auto sum = ops::Identity(g, (*loop)[1], "sum");
  REQUIRE(g.status().ok());
  auto bytes = GraphToBytes(g);
  REQUIRE(bytes.ok());
  Graph loaded;
  Status s = GraphFromBytes(*bytes, &loaded, "loop graph");
  INFO(s.ToString());
  REQUIRE(s.ok());
  REQUIRE(loaded.num_nodes() == g.num_nodes());
  for (int i = 0; i < g.num_nodes(); ++i) {
    REQUIRE(loaded.node(i).inputs.size() == g.node(i).inputs.size());
    for (size_t k = 0; k < g.node(i).inputs.size(); ++k) {
      CHECK(loaded.node(i).inputs[k].node == g.node(i).inputs[k].node);
      CHECK(loaded.node(i).inputs[k].index == g.node(i).inputs[k].index);
    }
  }
  Session original(g), reloaded(loaded);
  for (int32_t limit : {0, 1, 10}) {
    FeedMap feeds{{"n", Tensor::Scalar<int32_t>(limit)}};
    auto a = original.Run(feeds, std::vector<std::string>{"sum"});
    auto b = reloaded.Run(feeds, std::vector<std::string>{"sum"});
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK((*a)[0].scalar_as<int32_t>() == limit * (limit - 1) / 2);
    CHECK((*b)[0].scalar_as<int32_t>() == (*a)[0].scalar_as<int32_t>());
  }
  (void)sum;
}

TEST_CASE("A graph with 100,000 loop merges loads, prunes and runs in time linear in its size",
          "[graph_def][control_flow][limits]") {
  // One WhileLoop over n counters: n Merges whose back edges the loader patches.
  auto build = [](int n, Graph* g) {
    std::vector<Output> init;
    for (int i = 0; i < n; ++i) init.push_back(ops::Const(*g, int32_t{0}));
    auto loop = WhileLoop(
        *g, [](Graph& g, const std::vector<Output>& v) { return ops::Less(g, v[0], ops::Const(g, int32_t{2})); },
        [](Graph& g, const std::vector<Output>& v) {
          std::vector<Output> next;
          const Output one = ops::Const(g, int32_t{1});
          for (const Output& x : v) next.push_back(ops::Add(g, x, one));
          return next;
        },
        init);
    REQUIRE(loop.ok());
    ops::Identity(*g, (*loop)[n - 1], "last");
    REQUIRE(g->status().ok());
  };
  auto seconds = [](auto since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  };
  double load_s[2] = {0, 0};
  const int sizes[2] = {10000, 100000};
  for (int k = 0; k < 2; ++k) {
    Graph g;
    build(sizes[k], &g);
    auto bytes = GraphToBytes(g);
    REQUIRE(bytes.ok());
    Graph loaded;
    const auto t0 = std::chrono::steady_clock::now();
    Status s = GraphFromBytes(*bytes, &loaded, "loop graph");
    load_s[k] = seconds(t0);
    INFO(s.ToString());
    REQUIRE(s.ok());
    WARN(sizes[k] << " loop merges (" << loaded.num_nodes() << " nodes): loaded in " << load_s[k] << " s");
    if (k == 1) {
      const auto t1 = std::chrono::steady_clock::now();
      Session session(loaded);
      auto r = session.Run({}, std::vector<std::string>{"last"});
      INFO(r.status().ToString());
      REQUIRE(r.ok());
      CHECK((*r)[0].scalar_as<int32_t>() == 2);
      WARN("and ran (plan and two iterations) in " << seconds(t1) << " s");
    }
  }
  // Linear: ten times the merges take about ten times as long (quadratic
  // took a hundred); 40 leaves room for a loaded machine.
  CHECK(load_s[1] < 40 * std::max(load_s[0], 0.005));
  CHECK(load_s[1] < 30.0);
}
