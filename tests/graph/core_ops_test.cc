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

namespace {

Result<Tensor> RunAssert(bool pass, const std::vector<Tensor>& data, const std::string& tmpl, int64_t summarize) {
  Graph g;
  std::vector<Output> ins{ops::Const(g, Tensor::FromBools({pass}, {}))};
  for (const Tensor& t : data) ins.push_back(ops::Const(g, t));
  AttrMap a;
  a.Set("template", tmpl);
  a.Set("summarize", summarize);
  int n = g.AddNode("Assert", ins, std::move(a), "check");
  if (!g.status().ok()) return g.status();
  auto after = ops::NoOp(g, {n}, "after");
  auto r = testing::EvalGraph(g, {}, {}, {after});
  if (!r.ok()) return r.status();
  return Tensor();
}

}  // namespace

TEST_CASE("Assert passes when its condition holds and fails the step with its message otherwise", "[graph]") {
  const std::vector<Tensor> data = {Tensor::FromVector<float>({1.5f, -2, 3, 4}),
                                    Tensor::FromVector<uint8_t>({200, 3}, {2}), Tensor::FromBools({true}, {1})};
  CHECK(RunAssert(true, data, "[x:] [{}] [{}] [{}]", 3).ok());
  auto r = RunAssert(false, data, "[x:] [{}] [{}] [{}]", 3);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  INFO(r.status().message());
  CHECK(r.status().message().find("assertion failed: [x:] [1.5 -2 3...] [200 3] [1]") != std::string::npos);
  CHECK(r.status().message().find("node 'check' (op Assert)") != std::string::npos);
  // Braces doubled are braces; a negative summarize prints every value; data the template does not place
  // follows it in brackets.
  r = RunAssert(false, {Tensor::FromVector<int64_t>({1, 2, 3, 4})}, "{{literal}} {}", -1);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("assertion failed: {literal} 1 2 3 4") != std::string::npos);
  r = RunAssert(false, {Tensor::FromVector<int32_t>({7, 8})}, "", 1);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("assertion failed: [7...]") != std::string::npos);
}

TEST_CASE("Assert's condition must be one bool, checked at construction and at run time", "[graph]") {
  Graph g;
  g.AddNode("Assert", {ops::Const(g, Tensor::Scalar<float>(1))}, {}, "f");
  REQUIRE_FALSE(g.status().ok());
  CHECK(g.status().message().find("condition must be bool, got float32") != std::string::npos);
  Graph g2;
  g2.AddNode("Assert", {ops::Const(g2, Tensor::FromBools({true, false}, {2}))}, {}, "two");
  REQUIRE_FALSE(g2.status().ok());
  CHECK(g2.status().message().find("must be a scalar, got shape [2]") != std::string::npos);
  Graph g3;
  auto p = ops::Placeholder(g3, DType::kBool, PartialShape(), "p");
  int n = g3.AddNode("Assert", {p}, {}, "check");
  auto after = ops::NoOp(g3, {n}, "after");
  auto r = testing::EvalGraph(g3, {{p, Tensor::FromBools({true, true}, {2})}}, {}, {after});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("condition must be one bool") != std::string::npos);
}
