// The control-flow ops' shape functions and builders, evaluated with the
// reference evaluator (which runs Cond itself and loops on the executor).
#include <catch2/catch.hpp>

#include <cmath>

#include "graph/op_registry.h"
#include "shardflow/control_flow.h"
#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"

using namespace sf;

namespace {
bool Contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}
using Vars = std::vector<Output>;
}  // namespace

TEST_CASE("Switch and Merge shapes and dtypes", "[control_flow]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2, 3}, "x");
  auto y = ops::Placeholder(g, DType::kFloat32, {2, 5}, "y");
  auto p = ops::Placeholder(g, DType::kBool, PartialShape({}), "p");
  auto sw = ops::Switch(g, x, p);
  CHECK(sw[0].shape() == PartialShape({2, 3}));
  CHECK(sw[1].dtype() == DType::kFloat32);
  auto m = ops::Merge(g, {x, y});
  CHECK(m[0].shape() == PartialShape({2, -1}));
  CHECK(m[1].dtype() == DType::kInt32);
  REQUIRE(g.status().ok());

  Graph bad;
  auto bx = ops::Placeholder(bad, DType::kFloat32, {2}, "x");
  ops::Switch(bad, bx, ops::Const(bad, 1.0f));
  REQUIRE(!bad.status().ok());
  CHECK(Contains(bad.status(), "predicate must be bool"));

  Graph bad2;
  auto a = ops::Placeholder(bad2, DType::kFloat32, {2}, "a");
  auto b = ops::Placeholder(bad2, DType::kInt32, {2}, "b");
  ops::Merge(bad2, {a, b});
  REQUIRE(!bad2.status().ok());
  CHECK(Contains(bad2.status(), "Merge"));
}

TEST_CASE("Cond on the reference evaluator routes outside values and constants", "[control_flow]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, {3}, "x");
  auto p = ops::Less(g, ops::Sum(g, x), ops::Const(g, 0.0));
  auto r = Cond(
      g, p, [&](Graph& g) { return Vars{ops::Neg(g, x), ops::Const(g, int32_t{1})}; },
      [&](Graph& g) { return Vars{x, ops::Const(g, int32_t{2})}; }, "abs_sum");
  REQUIRE(g.status().ok());
  REQUIRE(r.size() == 2);
  // The constants are tied to their branch: only the taken one is live.
  auto neg = testing::EvalGraph(g, {{x, Tensor::FromVector<double>({-1, -2, 1})}}, r);
  REQUIRE(neg.ok());
  CHECK((*neg)[0].ToVector<double>() == std::vector<double>{1, 2, -1});
  CHECK((*neg)[1].scalar_as<int32_t>() == 1);
  auto pos = testing::EvalGraph(g, {{x, Tensor::FromVector<double>({1, 2, 3})}}, r);
  REQUIRE(pos.ok());
  CHECK((*pos)[0].ToVector<double>() == std::vector<double>{1, 2, 3});
  CHECK((*pos)[1].scalar_as<int32_t>() == 2);
  CHECK(g.FindNode("abs_sum/then/Neg").ok());
}

TEST_CASE("Cond build errors", "[control_flow]") {
  Graph g;
  auto p = ops::Const(g, Tensor::Scalar<bool>(true));
  auto r = Cond(g, p, [](Graph& g) { return Vars{ops::Const(g, 1.0f)}; },
                [](Graph& g) { return Vars{ops::Const(g, int32_t{1})}; });
  CHECK(r.empty());
  REQUIRE(!g.status().ok());
  CHECK(Contains(g.status(), "float32 in then, int32 in else"));
}

TEST_CASE("WhileLoop on the reference evaluator, and nested Conds", "[control_flow]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, PartialShape({}), "x");
  // Collatz-like: halve while > 1, counting steps; a Cond picks the update.
  auto r = WhileLoop(
      g, [](Graph& g, const Vars& v) { return ops::Greater(g, v[0], ops::Const(g, 1.0)); },
      [x](Graph& g, const Vars& v) {
        auto big = ops::Greater(g, v[0], ops::Mul(g, x, ops::Const(g, 0.5)));
        auto c = Cond(g, big,
                      [&](Graph& g) { return Vars{ops::Mul(g, v[0], ops::Const(g, 0.5))}; },
                      [&](Graph& g) { return Vars{ops::Sub(g, v[0], ops::Const(g, 1.0))}; });
        return Vars{c.empty() ? Output() : c[0], ops::Add(g, v[1], ops::Const(g, int32_t{1}))};
      },
      {x, ops::Const(g, int32_t{0})}, {"halve"});
  REQUIRE(r.ok());
  auto out = testing::EvalGraph(g, {{x, Tensor::Scalar<double>(16)}}, *r);
  REQUIRE(out.ok());
  // 16 -> 8 (big) -> 7 -> ... -> 1: one halving then seven decrements.
  CHECK((*out)[0].scalar_as<double>() == 1.0);
  CHECK((*out)[1].scalar_as<int32_t>() == 8);
}

TEST_CASE("A WhileLoop gradient matches the unrolled computation's", "[control_flow]") {
  // x_{k+1} = tanh(x_k * w) + b for 5 iterations; the gradient w.r.t. the
  // initial x, the read values w and b, through the loop and unrolled.
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, {3}, "x");
  auto w = ops::Placeholder(g, DType::kFloat64, {3}, "w");
  auto b = ops::Placeholder(g, DType::kFloat64, PartialShape({}), "b");
  auto step = [&](Graph& g, Output v) { return ops::Add(g, ops::Tanh(g, ops::Mul(g, v, w)), b); };
  auto loop = WhileLoop(
      g, [](Graph& g, const Vars& v) { return ops::Less(g, v[0], ops::Const(g, int32_t{5})); },
      [&](Graph& g, const Vars& v) {
        return Vars{ops::Add(g, v[0], ops::Const(g, int32_t{1})), step(g, v[1])};
      },
      {ops::Const(g, int32_t{0}), x}, {"rnn"});
  REQUIRE(loop.ok());
  Output unrolled = x;
  for (int i = 0; i < 5; ++i) unrolled = step(g, unrolled);
  auto loss_loop = ops::Sum(g, ops::Mul(g, (*loop)[1], (*loop)[1]));
  auto loss_unrolled = ops::Sum(g, ops::Mul(g, unrolled, unrolled));
  auto gl = Gradients(g, {loss_loop}, {x, w, b});
  REQUIRE(gl.ok());
  auto gu = Gradients(g, {loss_unrolled}, {x, w, b});
  REQUIRE(gu.ok());
  testing::Feeds feeds{{x, Tensor::FromVector<double>({0.3, -0.7, 1.1})},
                       {w, Tensor::FromVector<double>({0.9, 1.3, -0.4})},
                       {b, Tensor::Scalar<double>(0.2)}};
  auto vl = testing::EvalGraph(g, feeds, *gl);
  REQUIRE(vl.ok());
  auto vu = testing::EvalGraph(g, feeds, *gu);
  REQUIRE(vu.ok());
  for (int i = 0; i < 3; ++i) {
    auto a = (*vl)[i].ToVector<double>(), c = (*vu)[i].ToVector<double>();
    REQUIRE(a.size() == c.size());
    for (size_t k = 0; k < a.size(); ++k) CHECK(std::abs(a[k] - c[k]) < 1e-10);
  }
  const OpRegistry& reg = StandardOpRegistry();
  for (const char* op : {"Enter", "Exit", "NextIteration", "LoopCond", "StackPush", "StackPop"})
    CHECK(!reg.Find(op)->differentiable);
}

TEST_CASE("A loop that runs zero times passes its gradient through", "[control_flow]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, PartialShape({}), "x");
  auto n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
  auto loop = WhileLoop(
      g, [n](Graph& g, const Vars& v) { return ops::Less(g, v[0], n); },
      [](Graph& g, const Vars& v) {
        return Vars{ops::Add(g, v[0], ops::Const(g, int32_t{1})), ops::Mul(g, v[1], v[1])};
      },
      {ops::Const(g, int32_t{0}), x}, {"square"});
  REQUIRE(loop.ok());
  auto grads = Gradients(g, {(*loop)[1]}, {x});
  REQUIRE(grads.ok());
  // y = x^(2^n): dy/dx = 2^n x^(2^n - 1).
  for (int nv : {0, 1, 3}) {
    auto r = testing::Eval(g, (*grads)[0], {{x, Tensor::Scalar<double>(1.1)}, {n, Tensor::Scalar<int32_t>(nv)}});
    REQUIRE(r.ok());
    const double p = std::pow(2.0, nv);
    CHECK(std::abs(r->scalar_as<double>() - p * std::pow(1.1, p - 1)) < 1e-9);
  }
}

TEST_CASE("The gradient of a loop nested in a loop keeps each outer iteration's values", "[control_flow]") {
  // y = x^(2^(m*k)), the inner loop squaring k times in each of the m outer
  // iterations; the inner loop starts from the outer loop variable, so its
  // stacks hold different values in every outer iteration.
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, PartialShape({}), "x");
  auto m = ops::Placeholder(g, DType::kInt32, PartialShape({}), "m");
  auto k = ops::Placeholder(g, DType::kInt32, PartialShape({}), "k");
  auto outer = WhileLoop(
      g, [m](Graph& g, const Vars& v) { return ops::Less(g, v[0], m); },
      [k](Graph& g, const Vars& v) {
        auto inner = WhileLoop(
            g, [k](Graph& g, const Vars& w) { return ops::Less(g, w[0], k); },
            [](Graph& g, const Vars& w) {
              return Vars{ops::Add(g, w[0], ops::Const(g, int32_t{1})), ops::Mul(g, w[1], w[1])};
            },
            {ops::Const(g, int32_t{0}), v[1]}, {"inner"});
        if (!inner.ok()) return Vars{};
        return Vars{ops::Add(g, v[0], ops::Const(g, int32_t{1})), (*inner)[1]};
      },
      {ops::Const(g, int32_t{0}), x}, {"outer"});
  REQUIRE(outer.ok());
  auto grads = Gradients(g, {(*outer)[1]}, {x});
  REQUIRE(grads.ok());
  for (auto [mv, kv] : {std::pair{0, 2}, {1, 1}, {2, 1}, {2, 2}, {3, 1}, {2, 0}}) {
    auto r = testing::Eval(g, (*grads)[0], {{x, Tensor::Scalar<double>(1.01)},
                                            {m, Tensor::Scalar<int32_t>(mv)},
                                            {k, Tensor::Scalar<int32_t>(kv)}});
    REQUIRE(r.ok());
    const double p = std::pow(2.0, mv * kv);
    INFO("m " << mv << " k " << kv);
    CHECK(std::abs(r->scalar_as<double>() - p * std::pow(1.01, p - 1)) < 1e-9 * p * std::pow(1.01, p));
  }
}
