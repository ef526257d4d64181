// The state ops' gradient checks, and tests of the state builders on the
// reference evaluator.
#include <catch2/catch.hpp>

#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"
#include "tests/support/gradient_checker.h"

namespace sf::testing {

void AddStateGradChecks(GradCheckTable& t) {
  // y = x * read(v) with v initialised from a constant: the read's gradient
  // flows to the handle, and x's gradient is the read value.
  t.push_back(GradCheck{
      "ReadVariable", "x * variable", {{2, 3}},
      [](Graph& g, const std::vector<Output>& xs) {
        Tensor init = Tensor::FromVector(std::vector<double>{1, -2, 3, 0.5, 2, -1}, {2, 3});
        Output h = ops::VarHandle(g, "gradcheck_v", DType::kFloat64, PartialShape({2, 3}));
        Output assign = ops::Assign(g, h, ops::Const(g, init));
        Output read = ops::ReadVariable(g, h, DType::kFloat64);
        (void)g.AddControlInput(read.node, assign.node);
        return ops::Mul(g, xs[0], read);
      }});
}

}  // namespace sf::testing

using namespace sf;

TEST_CASE("Variable: initialise, read, assign-add through the evaluator", "[state]") {
  Graph g;
  auto v = ops::Variable(g, "v", ops::Const(g, std::vector<float>{1, 2}, {2}));
  auto h = ops::VariableHandle(v);
  REQUIRE(h.valid());
  CHECK(h.dtype() == DType::kResource);
  CHECK(v.shape() == PartialShape({2}));
  CHECK(v.name() == "v");
  auto add = ops::AssignAdd(g, h, ops::Const(g, std::vector<float>{10, 20}, {2}));
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  InMemoryVariables vars;
  auto r = testing::Eval(g, v, {}, &vars);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("'v'") != std::string::npos);
  CHECK(r.status().message().find("initialised") != std::string::npos);
  REQUIRE(testing::EvalGraph(g, {}, {}, {init}, &vars).ok());
  CHECK(testing::Eval(g, v, {}, &vars)->ToVector<float>() == std::vector<float>{1, 2});
  CHECK(testing::Eval(g, add, {}, &vars)->ToVector<float>() == std::vector<float>{11, 22});
  CHECK(testing::Eval(g, v, {}, &vars)->ToVector<float>() == std::vector<float>{11, 22});
}

TEST_CASE("Assign checks dtype and shape at build time", "[state]") {
  Graph g;
  auto h = ops::VarHandle(g, "w", DType::kFloat32, PartialShape({2}));
  ops::Assign(g, h, ops::Const(g, std::vector<float>{1, 2, 3}, {3}));
  REQUIRE_FALSE(g.status().ok());
  CHECK(g.status().message().find("[3]") != std::string::npos);
}

TEST_CASE("The gradient of a read reaches the variable handle", "[state]") {
  Graph g;
  auto v = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1, 2}, {2}));
  auto loss = ops::Sum(g, ops::Mul(g, v, ops::Const(g, std::vector<float>{3, 4}, {2})));
  auto grads = Gradients(g, {loss}, {ops::VariableHandle(v)});
  REQUIRE(grads.ok());
  REQUIRE((*grads)[0].valid());
  Operation init = ops::GlobalVariablesInitializer(g);
  InMemoryVariables vars;
  REQUIRE(testing::EvalGraph(g, {}, {}, {init}, &vars).ok());
  auto r = testing::Eval(g, (*grads)[0], {}, &vars);
  REQUIRE(r.ok());
  CHECK(r->ToVector<float>() == std::vector<float>{3, 4});
}

TEST_CASE("Training ops update variables through the evaluator", "[state]") {
  Graph g;
  auto v = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1, 2}, {2}));
  int step = g.AddNode("ApplyGradientDescent",
                       {ops::VariableHandle(v), ops::Const(g, 0.5f),
                        ops::Const(g, std::vector<float>{2, 4}, {2})});
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  InMemoryVariables vars;
  REQUIRE(testing::EvalGraph(g, {}, {}, {init}, &vars).ok());
  REQUIRE(testing::EvalGraph(g, {}, {}, {step}, &vars).ok());
  CHECK(testing::Eval(g, v, {}, &vars)->ToVector<float>() == std::vector<float>{0, 0});
  // A gradient of the wrong shape is refused when the graph is built.
  g.AddNode("ApplyGradientDescent", {ops::VariableHandle(v), ops::Const(g, 0.5f),
                                     ops::Const(g, std::vector<float>{2, 4, 5}, {3})});
  REQUIRE_FALSE(g.status().ok());
  CHECK(g.status().message().find("[3]") != std::string::npos);
}
