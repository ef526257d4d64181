#include <catch2/catch.hpp>

#include <set>

#include "graph/op_registry.h"
#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"
#include "tests/support/gradient_checker.h"

using namespace sf;

namespace {
testing::GradCheckTable AllChecks() {
  testing::GradCheckTable t;
  testing::AddCoreGradChecks(t);
  testing::AddMathGradChecks(t);
  testing::AddNNGradChecks(t);
  testing::AddArrayGradChecks(t);
  testing::AddStateGradChecks(t);
  testing::AddControlFlowGradChecks(t);
  return t;
}
}  // namespace

TEST_CASE("Every differentiable op has a gradient check", "[gradients]") {
  std::set<std::string> covered;
  for (const auto& c : AllChecks()) covered.insert(c.op);
  const OpRegistry& reg = StandardOpRegistry();
  std::vector<std::string> missing;
  for (const std::string& name : reg.Names())
    if (reg.Find(name)->differentiable && !covered.count(name)) missing.push_back(name);
  INFO("differentiable ops without a gradient check: " << [&] {
    std::string s;
    for (auto& m : missing) s += m + " ";
    return s;
  }());
  CHECK(missing.empty());
}

TEST_CASE("Gradient checks pass for every differentiable op", "[gradients]") {
  for (const auto& c : AllChecks()) {
    Status s = testing::RunGradCheck(c);
    INFO(s.ToString());
    CHECK(s.ok());
  }
}

TEST_CASE("Gradients sums fan-in and reports unconnected xs", "[gradients]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, {3}, "x");
  auto z = ops::Placeholder(g, DType::kFloat64, {3}, "z");
  auto y = ops::Sum(g, x * x + x);  // dy/dx = 2x + 1: x has three consumers
  auto grads = Gradients(g, {y}, {x});
  REQUIRE(grads.ok());
  Tensor xv = Tensor::FromVector<double>({1, 2, 3});
  auto r = testing::Eval(g, (*grads)[0], {{x, xv}});
  REQUIRE(r.ok());
  CHECK(r->ToVector<double>() == std::vector<double>{3, 5, 7});

  auto bad = Gradients(g, {y}, {z});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("'z'") != std::string::npos);
  auto lenient = Gradients(g, {y}, {z}, {}, /*allow_unconnected=*/true);
  REQUIRE(lenient.ok());
  CHECK_FALSE((*lenient)[0].valid());
}

TEST_CASE("StopGradient and grad_ys seed the walk", "[gradients]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, {2}, "x");
  auto y = x * ops::StopGradient(g, x);  // d/dx = stop(x)
  auto seed = ops::Const(g, Tensor::FromVector<double>({10, 100}));
  auto grads = Gradients(g, {y}, {x}, {seed});
  REQUIRE(grads.ok());
  auto r = testing::Eval(g, (*grads)[0], {{x, Tensor::FromVector<double>({2, 3})}});
  REQUIRE(r.ok());
  CHECK(r->ToVector<double>() == std::vector<double>{20, 300});
}
