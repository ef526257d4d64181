#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>

#include "shardflow/control_flow.h"
#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "shardflow/session.h"
#include "tests/support/eval_graph.h"

using namespace sf;

namespace {

bool Contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

using Vars = std::vector<Output>;

// sum_{i<n} i and the count, as a loop over (i, acc).
Result<Vars> SumLoop(Graph& g, Output n, int64_t par = 10, int64_t max_iter = -1) {
  WhileLoopOptions o;
  o.name = "sum";
  o.parallel_iterations = par;
  o.maximum_iterations = max_iter;
  return WhileLoop(
      g, [n](Graph& g, const Vars& v) { return ops::Less(g, v[0], n); },
      [](Graph& g, const Vars& v) {
        return Vars{ops::Add(g, v[0], ops::Const(g, int32_t{1})), ops::Add(g, v[1], v[0])};
      },
      {ops::Const(g, int32_t{0}), ops::Const(g, int32_t{0})}, o);
}

}  // namespace

TEST_CASE("Cond runs only the taken branch", "[control_flow]") {
  Graph g;
  auto p = ops::Placeholder(g, DType::kBool, PartialShape({}), "p");
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  auto r = Cond(g, p, [&](Graph& g) { return Vars{ops::Mul(g, x, ops::Const(g, 2.0f))}; },
                [&](Graph& g) { return Vars{ops::Sub(g, x, ops::Const(g, 1.0f))}; });
  REQUIRE(g.status().ok());
  REQUIRE(r.size() == 1);
  Session s(g);
  Tensor xv = Tensor::FromVector(std::vector<float>{3, 4}, {2});
  auto t = s.Run({{"p", Tensor::Scalar<bool>(true)}, {"x", xv}}, Vars{r[0]});
  REQUIRE(t.ok());
  CHECK((*t)[0].ToVector<float>() == std::vector<float>{6, 8});
  auto f = s.Run({{"p", Tensor::Scalar<bool>(false)}, {"x", xv}}, Vars{r[0]});
  REQUIRE(f.ok());
  CHECK((*f)[0].ToVector<float>() == std::vector<float>{2, 3});
  // The reference evaluator agrees.
  auto e = testing::Eval(g, r[0], {{p, Tensor::Scalar<bool>(false)}, {x, xv}});
  REQUIRE(e.ok());
  CHECK(e->ToVector<float>() == std::vector<float>{2, 3});
}

TEST_CASE("Gradients through a Cond run in the Session", "[control_flow]") {
  Graph g;
  auto p = ops::Placeholder(g, DType::kBool, PartialShape({}), "p");
  auto x = ops::Placeholder(g, DType::kFloat64, {3}, "x");
  auto r = Cond(g, p, [&](Graph& g) { return Vars{ops::Mul(g, x, x)}; },
                [&](Graph& g) { return Vars{ops::Exp(g, x)}; });
  REQUIRE(r.size() == 1);
  auto grads = Gradients(g, {ops::Sum(g, r[0])}, {x});
  REQUIRE(grads.ok());
  Session s(g);
  Tensor xv = Tensor::FromVector<double>({0.5, -1, 2});
  for (bool pv : {true, false}) {
    auto got = s.Run({{"p", Tensor::Scalar<bool>(pv)}, {"x", xv}}, Vars{(*grads)[0]});
    REQUIRE(got.ok());
    auto want = testing::Eval(g, (*grads)[0], {{p, Tensor::Scalar<bool>(pv)}, {x, xv}});
    REQUIRE(want.ok());
    CHECK((*got)[0].ToVector<double>() == want->ToVector<double>());
  }
  auto t = s.Run({{"p", Tensor::Scalar<bool>(true)}, {"x", xv}}, Vars{(*grads)[0]});
  REQUIRE(t.ok());
  CHECK((*t)[0].ToVector<double>() == std::vector<double>{1, -2, 4});
}

TEST_CASE("Dead tensors propagate and a dead fetch is an error", "[control_flow]") {
  Graph g;
  auto p = ops::Placeholder(g, DType::kBool, PartialShape({}), "p");
  auto x = ops::Const(g, 5.0f);
  auto sw = ops::Switch(g, x, p);
  auto t = ops::Neg(g, sw[1]);      // dead when p is false
  auto f = ops::Square(g, sw[0]);   // dead when p is true
  auto after = ops::Add(g, t, ops::Const(g, 1.0f));  // dead too
  auto m = ops::Merge(g, {f, after});
  REQUIRE(g.status().ok());
  Session s(g);
  auto r = s.Run({{"p", Tensor::Scalar<bool>(false)}}, Vars{m[0], m[1]});
  REQUIRE(r.ok());
  CHECK((*r)[0].scalar_as<float>() == 25.0f);
  CHECK((*r)[1].scalar_as<int32_t>() == 0);
  r = s.Run({{"p", Tensor::Scalar<bool>(true)}}, Vars{m[0], m[1]});
  REQUIRE(r.ok());
  CHECK((*r)[0].scalar_as<float>() == -4.0f);
  CHECK((*r)[1].scalar_as<int32_t>() == 1);
  auto bad = s.Run({{"p", Tensor::Scalar<bool>(true)}}, Vars{f});
  REQUIRE(!bad.ok());
  CHECK(Contains(bad.status(), "dead"));
}

TEST_CASE("WhileLoop sums match the closed form", "[control_flow]") {
  Graph g;
  auto n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
  auto r = SumLoop(g, n);
  REQUIRE(r.ok());
  Session s(g);
  for (int v : {0, 1, 5, 100}) {
    auto out = s.Run({{"n", Tensor::Scalar<int32_t>(v)}}, *r);
    REQUIRE(out.ok());
    CHECK((*out)[0].scalar_as<int32_t>() == v);
    CHECK((*out)[1].scalar_as<int32_t>() == v * (v - 1) / 2);
  }
  auto e = testing::EvalGraph(g, {{n, Tensor::Scalar<int32_t>(10)}}, *r);
  REQUIRE(e.ok());
  CHECK((*e)[1].scalar_as<int32_t>() == 45);
}

TEST_CASE("WhileLoop: a loop variable the body sets from outside values only", "[control_flow]") {
  // (i + 1, z), (i + 1, z * z) and (i + 1, Identity(z)): those nodes, fed by
  // constant Enters alone, ran in the last iteration too and started one
  // more ("Merge never received its inputs").
  for (int form = 0; form < 3; ++form) {
    Graph g;
    auto x = ops::Placeholder(g, DType::kFloat64, PartialShape({}), "x");
    auto z = ops::Placeholder(g, DType::kFloat64, PartialShape({}), "z");
    auto n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
    auto r = WhileLoop(
        g, [&](Graph& gg, const std::vector<Output>& v) { return ops::Less(gg, v[0], n); },
        [&](Graph& gg, const std::vector<Output>& v) {
          Output next = form == 0 ? z : form == 1 ? ops::Mul(gg, z, z) : ops::Identity(gg, z);
          return std::vector<Output>{ops::Add(gg, v[0], ops::Const(gg, Tensor::Scalar<int32_t>(1))), next};
        },
        {ops::Const(g, Tensor::Scalar<int32_t>(0)), x});
    REQUIRE(r.ok());
    Session s(g);
    for (int count : {0, 1, 3}) {
      INFO("form " << form << ", " << count << " iterations");
      auto out = s.Run({{"x", Tensor::Scalar<double>(1.5)}, {"z", Tensor::Scalar<double>(2.0)},
                        {"n", Tensor::Scalar<int32_t>(count)}},
                       *r);
      INFO(out.status().ToString());
      REQUIRE(out.ok());
      CHECK((*out)[0].scalar_as<int32_t>() == count);
      CHECK((*out)[1].scalar_as<double>() == (count == 0 ? 1.5 : form == 1 ? 4.0 : 2.0));
    }
  }
}

TEST_CASE("WhileLoop factorial (int64) and Fibonacci (float64)", "[control_flow]") {
  Graph g;
  auto fact = WhileLoop(
      g, [](Graph& g, const Vars& v) { return ops::LessEqual(g, v[0], ops::Const(g, int64_t{20})); },
      [](Graph& g, const Vars& v) {
        return Vars{ops::Add(g, v[0], ops::Const(g, int64_t{1})), ops::Mul(g, v[1], v[0])};
      },
      {ops::Const(g, int64_t{1}), ops::Const(g, int64_t{1})}, {"fact"});
  REQUIRE(fact.ok());
  auto fib = WhileLoop(
      g, [](Graph& g, const Vars& v) { return ops::Less(g, v[0], ops::Const(g, int32_t{50})); },
      [](Graph& g, const Vars& v) {
        return Vars{ops::Add(g, v[0], ops::Const(g, int32_t{1})), v[2], ops::Add(g, v[1], v[2])};
      },
      {ops::Const(g, int32_t{0}), ops::Const(g, 0.0), ops::Const(g, 1.0)}, {"fib"});
  REQUIRE(fib.ok());
  Session s(g);
  auto out = s.Run({}, Vars{(*fact)[1], (*fib)[1]});
  REQUIRE(out.ok());
  CHECK((*out)[0].scalar_as<int64_t>() == 2432902008176640000LL);  // 20!
  CHECK((*out)[1].scalar_as<double>() == 12586269025.0);             // F(50)
}

TEST_CASE("Nested loops and a Cond inside a loop", "[control_flow]") {
  Graph g;
  auto n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
  // sum_{i<n} sum_{j<i} 1 = n(n-1)/2, with the inner loop's bound from the outer body.
  auto outer = WhileLoop(
      g, [n](Graph& g, const Vars& v) { return ops::Less(g, v[0], n); },
      [](Graph& g, const Vars& v) {
        Output i = v[0];
        auto inner = WhileLoop(
            g, [i](Graph& g, const Vars& w) { return ops::Less(g, w[0], i); },
            [](Graph& g, const Vars& w) {
              return Vars{ops::Add(g, w[0], ops::Const(g, int32_t{1})),
                          ops::Add(g, w[1], ops::Const(g, int32_t{1}))};
            },
            {ops::Const(g, int32_t{0}), v[1]}, {"inner"});
        if (!inner.ok()) return Vars{};
        return Vars{ops::Add(g, v[0], ops::Const(g, int32_t{1})), (*inner)[1]};
      },
      {ops::Const(g, int32_t{0}), ops::Const(g, int32_t{0})}, {"outer"});
  REQUIRE(outer.ok());
  // Sum of the even numbers below n via a Cond in the body.
  auto evens = WhileLoop(
      g, [n](Graph& g, const Vars& v) { return ops::Less(g, v[0], n); },
      [](Graph& g, const Vars& v) {
        Output i = v[0], acc = v[1];
        Output two = ops::Const(g, int32_t{2});
        Output even = ops::Equal(g, ops::Sub(g, i, ops::Mul(g, ops::Div(g, i, two), two)),
                                 ops::Const(g, int32_t{0}));
        auto c = Cond(g, even, [&](Graph& g) { return Vars{ops::Add(g, acc, i)}; },
                      [&](Graph&) { return Vars{acc}; });
        return Vars{ops::Add(g, i, ops::Const(g, int32_t{1})), c.empty() ? Output() : c[0]};
      },
      {ops::Const(g, int32_t{0}), ops::Const(g, int32_t{0})}, {"evens"});
  REQUIRE(evens.ok());
  Session s(g);
  for (int v : {0, 3, 10}) {
    auto out = s.Run({{"n", Tensor::Scalar<int32_t>(v)}}, Vars{(*outer)[1], (*evens)[1]});
    REQUIRE(out.ok());
    CHECK((*out)[0].scalar_as<int32_t>() == v * (v - 1) / 2);
    int want = 0;
    for (int i = 0; i < v; i += 2) want += i;
    CHECK((*out)[1].scalar_as<int32_t>() == want);
  }
}

TEST_CASE("A loop on the untaken branch of a Cond is dead, not stuck", "[control_flow]") {
  Graph g;
  auto p = ops::Placeholder(g, DType::kBool, PartialShape({}), "p");
  auto r = Cond(
      g, p,
      [](Graph& g) {
        auto l = WhileLoop(
            g, [](Graph& g, const Vars& v) { return ops::Less(g, v[0], ops::Const(g, 7.0f)); },
            [](Graph& g, const Vars& v) { return Vars{ops::Add(g, v[0], ops::Const(g, 1.0f))}; },
            {ops::Const(g, 0.0f)}, {"in_cond"});
        return l.ok() ? *l : Vars{};
      },
      [](Graph& g) { return Vars{ops::Const(g, -1.0f)}; });
  REQUIRE(g.status().ok());
  Session s(g);
  auto t = s.Run({{"p", Tensor::Scalar<bool>(true)}}, r);
  REQUIRE(t.ok());
  CHECK((*t)[0].scalar_as<float>() == 7.0f);
  auto f = s.Run({{"p", Tensor::Scalar<bool>(false)}}, r);
  REQUIRE(f.ok());
  CHECK((*f)[0].scalar_as<float>() == -1.0f);
}

TEST_CASE("Loop variables of several dtypes and shapes", "[control_flow]") {
  Graph g;
  auto r = WhileLoop(
      g, [](Graph& g, const Vars& v) { return ops::Less(g, v[0], ops::Const(g, int64_t{4})); },
      [](Graph& g, const Vars& v) {
        return Vars{ops::Add(g, v[0], ops::Const(g, int64_t{1})),
                    ops::Mul(g, v[1], ops::Const(g, std::vector<float>{2, 3}, {2})),
                    ops::Add(g, v[2], ops::Const(g, 0.5))};
      },
      {ops::Const(g, int64_t{0}), ops::Const(g, std::vector<float>{1, 1}, {2}), ops::Const(g, 0.0)},
      {"dtypes"});
  REQUIRE(r.ok());
  CHECK((*r)[1].dtype() == DType::kFloat32);
  Session s(g);
  auto out = s.Run({}, *r);
  REQUIRE(out.ok());
  CHECK((*out)[0].scalar_as<int64_t>() == 4);
  CHECK((*out)[1].ToVector<float>() == std::vector<float>{16, 81});
  CHECK((*out)[2].scalar_as<double>() == 2.0);
}

TEST_CASE("parallel_iterations does not change results", "[control_flow]") {
  for (int64_t par : {1, 2, 10, 32}) {
    Graph g;
    auto n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
    auto r = SumLoop(g, n, par);
    REQUIRE(r.ok());
    Session s(g);
    auto out = s.Run({{"n", Tensor::Scalar<int32_t>(200)}}, *r);
    REQUIRE(out.ok());
    CHECK((*out)[1].scalar_as<int32_t>() == 199 * 200 / 2);
  }
}

TEST_CASE("Exceeding maximum_iterations is an error naming the loop", "[control_flow]") {
  Graph g;
  auto n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
  auto r = SumLoop(g, n, 10, 5);
  REQUIRE(r.ok());
  Session s(g);
  auto ok = s.Run({{"n", Tensor::Scalar<int32_t>(5)}}, *r);
  REQUIRE(ok.ok());
  CHECK((*ok)[1].scalar_as<int32_t>() == 10);
  auto bad = s.Run({{"n", Tensor::Scalar<int32_t>(6)}}, *r);
  REQUIRE(!bad.ok());
  CHECK(Contains(bad.status(), "loop 'sum'"));
  CHECK(Contains(bad.status(), "maximum_iterations (5)"));
  // The session still works after the failed step.
  auto again = s.Run({{"n", Tensor::Scalar<int32_t>(3)}}, *r);
  REQUIRE(again.ok());
  CHECK((*again)[1].scalar_as<int32_t>() == 3);
}

TEST_CASE("Mismatched loop variables are build-time errors naming the loop", "[control_flow]") {
  {
    Graph g;
    auto r = WhileLoop(
        g, [](Graph& g, const Vars& v) { return ops::Less(g, ops::Sum(g, v[0]), ops::Const(g, 3.0f)); },
        [](Graph& g, const Vars& v) {
          return Vars{ops::Concat(g, {v[0], v[0]}, 0)};  // [2] -> [4]
        },
        {ops::Const(g, std::vector<float>{1, 2}, {2})}, {"grow"});
    REQUIRE(!r.ok());
    INFO(r.status().ToString());
    CHECK(Contains(r.status(), "WhileLoop 'grow'"));
    CHECK(Contains(r.status(), "loop variable 0"));
    CHECK(Contains(r.status(), "[4]"));
    CHECK(!g.status().ok());
  }
  {
    Graph g;
    auto r = WhileLoop(
        g, [](Graph& g, const Vars& v) { return ops::Less(g, v[0], ops::Const(g, int32_t{3})); },
        [](Graph& g, const Vars& v) { return Vars{ops::Cast(g, v[0], DType::kInt64)}; },
        {ops::Const(g, int32_t{0})}, {"cast"});
    REQUIRE(!r.ok());
    CHECK(Contains(r.status(), "WhileLoop 'cast'"));
    CHECK(Contains(r.status(), "int64"));
  }
}

TEST_CASE("A malformed loop fails instead of hanging", "[control_flow]") {
  Graph g;
  // A NextIteration fed from outside any loop.
  auto x = ops::Const(g, 1.0f);
  auto ni = ops::NextIteration(g, x);
  REQUIRE(g.status().ok());
  Session s(g);
  auto r = s.Run({}, Vars{ni});
  REQUIRE(!r.ok());
  CHECK(Contains(r.status(), "not inside a loop"));
}

TEST_CASE("A loop op waiting for a value of iteration 0 only is an error, not a hang",
          "[control_flow]") {
  Graph g;
  // Built from the primitives: the body reads a non-constant Enter, which
  // only iteration 0 receives, so iteration 1 cannot finish.
  auto enter = ops::Enter(g, ops::Const(g, 1.0f), "manual");
  auto m = ops::Merge(g, {enter, enter});
  auto limit = ops::Enter(g, ops::Const(g, 3.0f), "manual", /*is_constant=*/true);
  auto pred = ops::LoopCond(g, ops::Less(g, m[0], limit), "manual");
  auto sw = ops::Switch(g, m[0], pred);
  auto body = ops::Identity(g, ops::Add(g, ops::Identity(g, sw[1]), enter), "stuck_add");
  auto next = ops::NextIteration(g, body);
  g.mutable_node(m[0].node).inputs[1] = next;
  auto exit = ops::Exit(g, sw[0]);
  REQUIRE(g.status().ok());
  Session s(g);
  auto r = s.Run({}, Vars{exit});
  REQUIRE(!r.ok());
  CHECK(Contains(r.status(), "loop 'manual' iteration 1"));
  CHECK(Contains(r.status(), "(op Add)"));
  // Values inside a loop cannot be fetched.
  auto inside = s.Run({}, Vars{body});
  REQUIRE(!inside.ok());
  CHECK(Contains(inside.status(), "inside loop 'manual'"));
}

TEST_CASE("Many steps in a row and concurrent steps of a loop", "[control_flow]") {
  Graph g;
  auto n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
  auto r = SumLoop(g, n, 4);
  REQUIRE(r.ok());
  Session s(g);
  for (int i = 0; i < 200; ++i) {
    auto out = s.Run({{"n", Tensor::Scalar<int32_t>(i % 17)}}, *r);
    REQUIRE(out.ok());
    REQUIRE((*out)[1].scalar_as<int32_t>() == (i % 17) * (i % 17 - 1) / 2);
  }
  std::mutex mu;
  std::condition_variable cv;
  int left = 64;
  std::atomic<int> wrong{0};
  for (int i = 0; i < 64; ++i) {
    const int v = 10 + i;
    s.RunAsync({{"n", Tensor::Scalar<int32_t>(v)}}, {(*r)[1].name()}, {},
               [&, v](Result<std::vector<Tensor>> out) {
                 if (!out.ok() || (*out)[0].scalar_as<int32_t>() != v * (v - 1) / 2) ++wrong;
                 std::lock_guard<std::mutex> l(mu);
                 if (--left == 0) cv.notify_all();
               });
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return left == 0; });
  CHECK(wrong.load() == 0);
}

TEST_CASE("WhileLoop gradients in the Session, in concurrent steps", "[control_flow]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, PartialShape({}), "x");
  auto n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
  // y = x * a^n with a read from outside; dy/dx = a^n, dy/da = n x a^(n-1).
  auto a = ops::Const(g, 1.5);
  auto loop = WhileLoop(
      g, [n](Graph& g, const Vars& v) { return ops::Less(g, v[0], n); },
      [a](Graph& g, const Vars& v) {
        return Vars{ops::Add(g, v[0], ops::Const(g, int32_t{1})), ops::Mul(g, v[1], a)};
      },
      {ops::Const(g, int32_t{0}), x}, {"power", 4});
  REQUIRE(loop.ok());
  auto grads = Gradients(g, {(*loop)[1]}, {x, a});
  REQUIRE(grads.ok());
  Session s(g);
  std::mutex mu;
  std::condition_variable cv;
  int left = 40;
  std::atomic<int> wrong{0};
  for (int i = 0; i < 40; ++i) {
    const int nv = i % 9;
    const double xv = 0.5 + i;
    s.RunAsync({{"x", Tensor::Scalar<double>(xv)}, {"n", Tensor::Scalar<int32_t>(nv)}},
               {(*grads)[0].name(), (*grads)[1].name()}, {},
               [&, nv, xv](Result<std::vector<Tensor>> out) {
                 const double dx = std::pow(1.5, nv), da = nv * xv * std::pow(1.5, nv - 1);
                 if (!out.ok() || std::abs((*out)[0].scalar_as<double>() - dx) > 1e-9 * dx ||
                     std::abs((*out)[1].scalar_as<double>() - da) > 1e-9 * std::max(1.0, da))
                   ++wrong;
                 std::lock_guard<std::mutex> l(mu);
                 if (--left == 0) cv.notify_all();
               });
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return left == 0; });
  CHECK(wrong.load() == 0);
}
