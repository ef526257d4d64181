#include <catch2/catch.hpp>

#include <algorithm>

#include "runtime/plan.h"
#include "shardflow/ops.h"

using namespace sf;
using namespace sf::runtime;

namespace {
bool Has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }
int Pos(const std::vector<int>& v, int x) { return static_cast<int>(std::find(v.begin(), v.end(), x) - v.begin()); }
}  // namespace

TEST_CASE("PruneAndSort keeps what fetches and targets need, producers first", "[plan]") {
  Graph g;
  auto a = ops::Const(g, 1.0f);
  auto b = ops::Identity(g, a);
  auto unused = ops::Identity(g, a);
  auto c = ops::Const(g, 2.0f);
  Operation after = ops::NoOp(g, {c.node});
  auto d = ops::Identity(g, b);
  REQUIRE(g.AddControlInput(d.node, after.node).ok());
  auto order = PruneAndSort(g, {}, {d}, {});
  REQUIRE(order.ok());
  CHECK(order->size() == 5);
  CHECK_FALSE(Has(*order, unused.node));
  CHECK(Pos(*order, a.node) < Pos(*order, b.node));
  CHECK(Pos(*order, b.node) < Pos(*order, d.node));
  CHECK(Pos(*order, c.node) < Pos(*order, after.node));
  CHECK(Pos(*order, after.node) < Pos(*order, d.node));
  // A fed node cuts the graph above it.
  auto fed = PruneAndSort(g, {b}, {d}, {});
  REQUIRE(fed.ok());
  CHECK_FALSE(Has(*fed, a.node));
  CHECK(Has(*fed, b.node));
  // Targets count too.
  auto t = PruneAndSort(g, {}, {}, {unused.node});
  REQUIRE(t.ok());
  CHECK(*t == std::vector<int>{a.node, unused.node});
}

TEST_CASE("PruneAndSort names a node on a cycle", "[plan]") {
  Graph g;
  auto a = ops::Identity(g, ops::Const(g, 1.0f), "a");
  auto b = ops::Identity(g, a, "b");
  auto c = ops::Identity(g, b, "c");
  REQUIRE(g.AddControlInput(a.node, c.node).ok());
  auto r = PruneAndSort(g, {}, {c}, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("cycle") != std::string::npos);
  // Feeding a node on the cycle breaks it.
  CHECK(PruneAndSort(g, {b}, {c}, {}).ok());
}

TEST_CASE("A deep chain does not overflow the planner's stack", "[plan]") {
  Graph g;
  Output y = ops::Const(g, 1.0f);
  for (int i = 0; i < 20000; ++i) y = ops::Identity(g, y, "n" + std::to_string(i));
  auto r = PruneAndSort(g, {}, {y}, {});
  REQUIRE(r.ok());
  CHECK(r->size() == 20001);
}

TEST_CASE("ValidateFeed checks dtype and shape", "[plan]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 3}, "x");
  CHECK(ValidateFeed("x", x, Tensor(DType::kFloat32, {5, 3})).ok());
  auto s = ValidateFeed("x", x, Tensor(DType::kFloat64, {5, 3}));
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("float64") != std::string::npos);
  s = ValidateFeed("x", x, Tensor(DType::kFloat32, {5, 2}));
  CHECK(s.message().find("[5,2]") != std::string::npos);
  CHECK(s.message().find("[?,3]") != std::string::npos);
  CHECK_FALSE(ValidateFeed("x", x, Tensor()).ok());
}

