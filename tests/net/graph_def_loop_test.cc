// Saved graphs with loops: the NextIteration -> Merge back edge is the one
// edge that points forward in a GraphDef, so loading patches it afterwards.
#include <catch2/catch.hpp>

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
