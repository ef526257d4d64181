// Gradient checks of the control-flow ops: through Cond the gradient flows
// through the taken branch only (Merge's gradient is a Switch on which input
// was forwarded, Switch's a Merge of its outputs' gradients).
#include <catch2/catch.hpp>

#include "shardflow/control_flow.h"
#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"
#include "tests/support/gradient_checker.h"

namespace sf::testing {

namespace {

// y = pred ? a * b + a : tanh(a) - b * b, summed.
Output CondOf(Graph& g, const std::vector<Output>& xs, bool pred) {
  Output a = xs[0], b = xs[1];
  auto r = Cond(g, ops::Const(g, Tensor::Scalar<bool>(pred)),
                [&](Graph& g) { return std::vector<Output>{ops::Add(g, ops::Mul(g, a, b), a)}; },
                [&](Graph& g) {
                  return std::vector<Output>{ops::Sub(g, ops::Tanh(g, a), ops::Mul(g, b, b))};
                });
  return r.empty() ? Output() : ops::Sum(g, r[0]);
}

}  // namespace

void AddControlFlowGradChecks(GradCheckTable& t) {
  t.push_back(GradCheck{"Merge", "Cond, then branch taken", {{2, 3}, {2, 3}},
                        [](Graph& g, const std::vector<Output>& xs) { return CondOf(g, xs, true); }});
  t.push_back(GradCheck{"Switch", "Cond, else branch taken", {{3}, {3}},
                        [](Graph& g, const std::vector<Output>& xs) { return CondOf(g, xs, false); }});
  t.push_back(GradCheck{
      "WhileLoop", "a loop of Mul and Tanh reading an outside value", {{3}, {3}},
      [](Graph& g, const std::vector<Output>& xs) {
        Output w = xs[1];
        auto loop = WhileLoop(
            g,
            [](Graph& g, const std::vector<Output>& v) {
              return ops::Less(g, v[0], ops::Const(g, int32_t{3}));
            },
            [w](Graph& g, const std::vector<Output>& v) {
              return std::vector<Output>{ops::Add(g, v[0], ops::Const(g, int32_t{1})),
                                         ops::Tanh(g, ops::Mul(g, v[1], w))};
            },
            {ops::Const(g, int32_t{0}), xs[0]}, {"gradcheck_loop"});
        return loop.ok() ? ops::Sum(g, (*loop)[1]) : Output();
      }});
  t.push_back(GradCheck{
      "WhileLoop", "a Cond inside a loop", {{2}},
      [](Graph& g, const std::vector<Output>& xs) {
        auto loop = WhileLoop(
            g,
            [](Graph& g, const std::vector<Output>& v) {
              return ops::Less(g, v[0], ops::Const(g, int32_t{4}));
            },
            [](Graph& g, const std::vector<Output>& v) {
              Output i = v[0], x = v[1];
              auto odd = ops::Equal(g, ops::Sub(g, i, ops::Mul(g, ops::Div(g, i, ops::Const(g, int32_t{2})),
                                                             ops::Const(g, int32_t{2}))),
                                    ops::Const(g, int32_t{1}));
              auto c = Cond(g, odd, [&](Graph& g) { return std::vector<Output>{ops::Mul(g, x, x)}; },
                            [&](Graph& g) { return std::vector<Output>{ops::Tanh(g, x)}; });
              return std::vector<Output>{ops::Add(g, i, ops::Const(g, int32_t{1})),
                                         c.empty() ? Output() : c[0]};
            },
            {ops::Const(g, int32_t{0}), xs[0]}, {"cond_loop"});
        return loop.ok() ? ops::Sum(g, (*loop)[1]) : Output();
      }});
  for (bool taken : {true, false}) {
    t.push_back(GradCheck{
        "WhileLoop", taken ? "a loop in the taken branch of a Cond" : "a loop in the untaken branch",
        {{2}}, [taken](Graph& g, const std::vector<Output>& xs) {
          Output x = xs[0];
          auto r = Cond(
              g, ops::Const(g, Tensor::Scalar<bool>(taken)),
              [x](Graph& g) {
                auto loop = WhileLoop(
                    g,
                    [](Graph& g, const std::vector<Output>& v) {
                      return ops::Less(g, v[0], ops::Const(g, int32_t{3}));
                    },
                    [](Graph& g, const std::vector<Output>& v) {
                      return std::vector<Output>{ops::Add(g, v[0], ops::Const(g, int32_t{1})),
                                                 ops::Tanh(g, ops::Mul(g, v[1], v[1]))};
                    },
                    {ops::Const(g, int32_t{0}), x}, {"loop_in_cond"});
                return loop.ok() ? std::vector<Output>{(*loop)[1]} : std::vector<Output>{};
              },
              [x](Graph& g) { return std::vector<Output>{ops::Mul(g, x, ops::Const(g, 3.0))}; });
          return r.empty() ? Output() : ops::Sum(g, r[0]);
        }});
  }
  t.push_back(GradCheck{
      "Switch", "Switch and Merge by hand, with the value used outside too", {{4}},
      [](Graph& g, const std::vector<Output>& xs) {
        auto sw = ops::Switch(g, xs[0], ops::Const(g, Tensor::Scalar<bool>(true)));
        auto m = ops::Merge(g, {ops::Neg(g, sw[0]), ops::Square(g, sw[1])});
        return ops::Sum(g, ops::Mul(g, m[0], xs[0]));
      }});
}

}  // namespace sf::testing

using namespace sf;

TEST_CASE("The gradient through Cond follows the taken branch only", "[control_flow]") {
  Graph g;
  auto p = ops::Placeholder(g, DType::kBool, PartialShape({}), "p");
  auto x = ops::Placeholder(g, DType::kFloat64, {2}, "x");
  auto r = Cond(g, p, [&](Graph& g) { return std::vector<Output>{ops::Mul(g, x, x)}; },
                [&](Graph& g) { return std::vector<Output>{ops::Mul(g, x, ops::Const(g, 3.0))}; });
  REQUIRE(r.size() == 1);
  auto grads = Gradients(g, {ops::Sum(g, r[0])}, {x});
  REQUIRE(grads.ok());
  Tensor xv = Tensor::FromVector<double>({1.5, -2});
  auto t = testing::Eval(g, (*grads)[0], {{p, Tensor::Scalar<bool>(true)}, {x, xv}});
  REQUIRE(t.ok());
  CHECK(t->ToVector<double>() == std::vector<double>{3, -4});
  auto f = testing::Eval(g, (*grads)[0], {{p, Tensor::Scalar<bool>(false)}, {x, xv}});
  REQUIRE(f.ok());
  CHECK(f->ToVector<double>() == std::vector<double>{3, 3});
}

TEST_CASE("A value entering a loop gets a gradient only from the loop variables it reaches", "[control_flow]") {
  // (i, a, b) -> (i + 1, a * x, b + z), three times: a = x^4, b = 4z. a
  // does not depend on z (only b does), so d a / d z is unconnected.
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, PartialShape({}), "x");
  auto z = ops::Placeholder(g, DType::kFloat64, PartialShape({}), "z");
  auto loop = WhileLoop(
      g, [](Graph& g, const std::vector<Output>& v) { return ops::Less(g, v[0], ops::Const(g, int32_t{3})); },
      [&](Graph& g, const std::vector<Output>& v) {
        return std::vector<Output>{ops::Add(g, v[0], ops::Const(g, int32_t{1})), ops::Mul(g, v[1], x),
                                   ops::Add(g, v[2], z)};
      },
      {ops::Const(g, int32_t{0}), x, z}, {"unconnected_loop"});
  REQUIRE(loop.ok());
  const Output a = (*loop)[1], b = (*loop)[2];
  auto only_a = Gradients(g, {a}, {x, z}, {}, /*allow_unconnected=*/true);
  REQUIRE(only_a.ok());
  CHECK((*only_a)[0].valid());
  CHECK_FALSE((*only_a)[1].valid());
  auto refused = Gradients(g, {a}, {z});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("'z'") != std::string::npos);
  // Both: each gets its own loop variable's gradient, d(a + b)/dx = 4x^3, d/dz = 4.
  auto both = Gradients(g, {ops::Add(g, a, b)}, {x, z});
  REQUIRE(both.ok());
  const std::vector<std::pair<Output, Tensor>> feeds = {{x, Tensor::Scalar<double>(1.5)}, {z, Tensor::Scalar<double>(2.0)}};
  auto gx = testing::Eval(g, (*both)[0], feeds);
  auto gz = testing::Eval(g, (*both)[1], feeds);
  REQUIRE(gx.ok());
  REQUIRE(gz.ok());
  CHECK(gx->ToVector<double>()[0] == Approx(4 * 1.5 * 1.5 * 1.5));
  CHECK(gz->ToVector<double>()[0] == Approx(4.0));
  // a's gradient reads nothing of z (b's loop variable is not on its path).
  auto ga = testing::Eval(g, (*only_a)[0], {feeds[0]});
  INFO(ga.status().ToString());
  REQUIRE(ga.ok());
  CHECK(ga->ToVector<double>()[0] == Approx(4 * 1.5 * 1.5 * 1.5));
}
