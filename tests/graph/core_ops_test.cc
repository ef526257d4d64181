#include <catch2/catch.hpp>

#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"

using namespace sf;

TEST_CASE("Const and Identity evaluate", "[graph]") {
  Graph g;
  auto c = ops::Const(g, std::vector<float>{1, 2, 3, 4}, {2, 2});
  auto i = ops::Identity(g, c);
  REQUIRE(g.status().ok());
  auto r = testing::Eval(g, i);
  REQUIRE(r.ok());
  CHECK(r->shape() == Shape{2, 2});
  CHECK(r->ToVector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(r->SharesBufferWith(testing::Eval(g, c).value()));
}

TEST_CASE("An unfed placeholder is an error naming it", "[graph]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 3}, "x");
  auto r = testing::Eval(g, ops::Identity(g, x));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("placeholder 'x'") != std::string::npos);
}
