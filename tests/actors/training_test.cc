#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>

#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"

using namespace sf;

namespace {

// Fits y = 2x + 1 on 8 points with `opt`; returns (first loss, last loss).
std::pair<float, float> FitLine(Optimizer& opt, int steps) {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1}, "x");
  auto y = ops::Placeholder(g, DType::kFloat32, {-1}, "y");
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{0.0f}, {1}));
  auto b = ops::Variable(g, "b", ops::Const(g, std::vector<float>{0.0f}, {1}));
  auto pred = ops::Add(g, ops::Mul(g, x, w), b);
  auto loss = ops::Mean(g, ops::Square(g, ops::Sub(g, pred, y)));
  auto train = opt.Minimize(g, loss);
  REQUIRE(train.ok());
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  std::vector<float> xs, ys;
  for (int i = 0; i < 8; ++i) {
    xs.push_back(i / 4.0f - 1.0f);
    ys.push_back(2 * xs.back() + 1);
  }
  FeedMap feeds{{"x", Tensor::FromVector(xs)}, {"y", Tensor::FromVector(ys)}};
  float first = -1, last = -1;
  for (int i = 0; i < steps; ++i) {
    auto r = s.Run(feeds, std::vector<Output>{loss}, {*train});
    REQUIRE(r.ok());
    if (i == 0) first = (*r)[0].scalar_as<float>();
  }
  auto r = s.Run(feeds, std::vector<Output>{loss});
  REQUIRE(r.ok());
  last = (*r)[0].scalar_as<float>();
  return {first, last};
}

}  // namespace

TEST_CASE("Each optimizer reduces a linear regression's loss in a session", "[session][train]") {
  std::vector<std::unique_ptr<Optimizer>> opts;
  opts.push_back(std::make_unique<GradientDescentOptimizer>(0.1));
  opts.push_back(std::make_unique<MomentumOptimizer>(0.05, 0.9));
  opts.push_back(std::make_unique<MomentumOptimizer>(0.05, 0.9, true));
  opts.push_back(std::make_unique<AdagradOptimizer>(0.5));
  opts.push_back(std::make_unique<AdamOptimizer>(0.1));
  opts.push_back(std::make_unique<RMSPropOptimizer>(0.05));
  for (auto& opt : opts) {
    INFO(opt->name());
    auto [first, last] = FitLine(*opt, 60);
    CHECK(first > 1.0f);
    CHECK(last < first * 0.1f);
  }
}

TEST_CASE("Slots are variables named after their variable", "[session][train]") {
  Graph g;
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1, 2}, {2}));
  auto loss = ops::Sum(g, ops::Square(g, w));
  AdamOptimizer adam(0.1);
  REQUIRE(adam.Minimize(g, loss).ok());
  // Minimizing again reuses the slots.
  REQUIRE(adam.Minimize(g, loss).ok());
  int handles = 0;
  std::vector<std::string> names;
  for (int i = 0; i < g.num_nodes(); ++i) {
    if (g.node(i).op != "VarHandle") continue;
    ++handles;
    names.push_back(*g.node(i).attrs.Get<std::string>("shared_name"));
  }
  CHECK(handles == 5);
  CHECK(std::count(names.begin(), names.end(), "w/Adam/m") == 1);
  CHECK(std::count(names.begin(), names.end(), "w/Adam/v") == 1);
  CHECK(std::count(names.begin(), names.end(), "w/Adam/beta1_power") == 1);
  Operation init = ops::GlobalVariablesInitializer(g);
  Session s(g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  auto m = s.Run({}, std::vector<std::string>{"w/Adam/beta1_power/handle"});
  REQUIRE(m.ok());
  CHECK((*m)[0].dtype() == DType::kResource);
}

TEST_CASE("Two optimizers of one kind on one variable keep their own slots", "[session][train]") {
  Graph g;
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1}, {1}));
  MomentumOptimizer first(0.1, 0.9), second(0.1, 0.5);
  auto t1 = first.Minimize(g, ops::Sum(g, w * w));
  auto t2 = second.Minimize(g, ops::Sum(g, w * ops::Const(g, 3.0f)));
  REQUIRE(t1.ok());
  REQUIRE(t2.ok());
  REQUIRE(first.Minimize(g, ops::Sum(g, w)).ok());  // the same optimizer again: its own slots
  std::vector<std::string> names;
  for (int i = 0; i < g.num_nodes(); ++i)
    if (g.node(i).op == "VarHandle") names.push_back(*g.node(i).attrs.Get<std::string>("shared_name"));
  CHECK(std::count(names.begin(), names.end(), "w/Momentum/momentum") == 1);
  CHECK(std::count(names.begin(), names.end(), "w/Momentum_1/momentum") == 1);
  CHECK(names.size() == 3);
  Session s(g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {ops::GlobalVariablesInitializer(g)}).ok());
  // w = 1: the first step 1 - 0.1 * 2 = 0.8; the second optimizer's momentum
  // starts at 0, so 0.8 - 0.1 * 3 = 0.5 (sharing the first's slot gave 0.4).
  REQUIRE(s.Run({}, std::vector<Output>{}, {*t1}).ok());
  REQUIRE(s.Run({}, std::vector<Output>{}, {*t2}).ok());
  auto v = s.Run({}, std::vector<Output>{w});
  REQUIRE(v.ok());
  CHECK(std::abs((*v)[0].data<float>()[0] - 0.5f) < 1e-6);
}

TEST_CASE("Accumulator optimizers refuse an initial accumulator that gives NaN", "[session][train]") {
  Graph g;
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1, 0}, {2}));
  auto loss = ops::Sum(g, w * w);
  for (double init : {0.0, -1.0, std::nan("")}) {
    auto r = AdagradOptimizer(0.1, init).Minimize(g, loss);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("initial_accumulator_value") != std::string::npos);
  }
  CHECK_FALSE(FtrlOptimizer(0.1, 0, 0, -0.5, -1.0).Minimize(g, loss).ok());
  CHECK_FALSE(FtrlOptimizer(0.1, 0, 0, 0.5).Minimize(g, loss).ok());
  CHECK(AdagradOptimizer(0.1, 0.1).Minimize(g, loss).ok());
}

TEST_CASE("Minimize needs a loss that depends on a variable", "[session][train]") {
  Graph g;
  auto c = ops::Const(g, 1.0f);
  GradientDescentOptimizer sgd(0.1);
  CHECK_FALSE(sgd.Minimize(g, c).ok());
  ops::Variable(g, "w", ops::Const(g, 1.0f));
  auto r = sgd.Minimize(g, c);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("GradientDescent") != std::string::npos);
}

TEST_CASE("An update before initialisation names the variable", "[session][train]") {
  Graph g;
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1, 2}, {2}));
  auto train = MomentumOptimizer(0.1, 0.9).Minimize(g, ops::Sum(g, ops::Square(g, w)));
  REQUIRE(train.ok());
  Session s(g);
  auto r = s.Run({}, std::vector<Output>{}, {*train});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("'w") != std::string::npos);
}

TEST_CASE("A fed learning rate drives the update", "[session][train]") {
  Graph g;
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1.0f, 2.0f}, {2}));
  auto lr = ops::Placeholder(g, DType::kFloat32, PartialShape(Shape{}), "lr");
  auto loss = ops::Sum(g, w);  // d loss / d w = 1 for each element
  GradientDescentOptimizer opt(123.0);  // ignored: the fed rate wins
  opt.SetLearningRate(lr);
  auto train = opt.Minimize(g, loss);
  REQUIRE(train.ok());
  Operation init = ops::GlobalVariablesInitializer(g);
  Session s(g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  REQUIRE(s.Run({{"lr", Tensor::Scalar<float>(0.0f)}}, std::vector<Output>{}, {*train}).ok());
  auto r = s.Run({}, std::vector<Output>{w});
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<float>() == std::vector<float>{1.0f, 2.0f});
  REQUIRE(s.Run({{"lr", Tensor::Scalar<float>(0.25f)}}, std::vector<Output>{}, {*train}).ok());
  r = s.Run({}, std::vector<Output>{w});
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<float>() == std::vector<float>{0.75f, 1.75f});
  // Not feeding it is an error naming the placeholder.
  auto missing = s.Run({}, std::vector<Output>{}, {*train});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("lr") != std::string::npos);
}
