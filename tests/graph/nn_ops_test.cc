// NN ops: shapes, hand-computed values and error messages.
#include <catch2/catch.hpp>

#include <cmath>

#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"

using namespace sf;
using Catch::Matchers::Contains;

namespace {

std::vector<double> EvalD(const Graph& g, Output y, const testing::Feeds& feeds = {}) {
  auto r = testing::Eval(g, y, feeds);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return r->ToVector<double>();
}

void CheckNear(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " vs " << want[i]);
    CHECK(std::abs(got[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i])));
  }
}

Output D(Graph& g, const std::vector<double>& v, const Shape& s) {
  return ops::Const(g, Tensor::FromVector<double>(v, s));
}

}  // namespace

TEST_CASE("Activations compute their formulas in float32 and float64", "[nn]") {
  const std::vector<double> xs = {-100, -3, -0.5, 0, 0.25, 2, 100};
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    Graph g;
    Tensor xt = t == DType::kFloat64 ? Tensor::FromVector<double>(xs)
                                     : Tensor::FromVector<float>(std::vector<float>(xs.begin(), xs.end()));
    auto x = ops::Const(g, xt);
    std::vector<double> relu, sig, th, sp, elu;
    for (double v : xs) {
      relu.push_back(std::max(v, 0.0));
      sig.push_back(1 / (1 + std::exp(-v)));
      th.push_back(std::tanh(v));
      sp.push_back(std::log1p(std::exp(-std::abs(v))) + std::max(v, 0.0));
      elu.push_back(v > 0 ? v : std::expm1(v));
    }
    CheckNear(EvalD(g, ops::Relu(g, x)), relu);
    CheckNear(EvalD(g, ops::Sigmoid(g, x)), sig);
    CheckNear(EvalD(g, ops::Tanh(g, x)), th);
    CheckNear(EvalD(g, ops::Softplus(g, x)), sp);  // 100 stays 100, not inf
    CheckNear(EvalD(g, ops::Elu(g, x)), elu);
    CHECK(ops::Relu(g, x).dtype() == t);
  }
}

TEST_CASE("Activation gradient helper ops", "[nn]") {
  Graph g;
  auto dy = D(g, {1, 2, 3, 4}, {4});
  auto y = D(g, {-0.5, 0.5, 0, 0.9}, {4});
  CheckNear(EvalD(g, g.Add1("ReluGrad", {dy, y})), {0, 2, 0, 4});
  CheckNear(EvalD(g, g.Add1("SigmoidGrad", {y, dy})), {-0.75, 0.5, 0, 4 * 0.9 * 0.1});
  CheckNear(EvalD(g, g.Add1("TanhGrad", {y, dy})), {0.75, 1.5, 3, 4 * (1 - 0.81)});
  CheckNear(EvalD(g, g.Add1("EluGrad", {dy, y})), {0.5, 2, 3, 4});
  CheckNear(EvalD(g, g.Add1("SoftplusGrad", {dy, y})),
            {1 / (1 + std::exp(0.5)), 2 / (1 + std::exp(-0.5)), 1.5, 4 / (1 + std::exp(-0.9))});
  g.Add1("ReluGrad", {dy, D(g, {1, 2}, {2})});
  CHECK_THAT(g.status().message(), Contains("[4]") && Contains("[2]"));
}

TEST_CASE("Softmax rows sum to 1 and are stable for large logits", "[nn]") {
  Graph g;
  auto x = D(g, {1, 2, 3, 1000, 1000, 1000, -5, 0, 5}, {3, 3});
  auto y = EvalD(g, ops::Softmax(g, x));
  for (int r = 0; r < 3; ++r) CHECK(std::abs(y[3 * r] + y[3 * r + 1] + y[3 * r + 2] - 1) < 1e-12);
  const double s = std::exp(1) + std::exp(2) + std::exp(3);
  CheckNear({y[0], y[1], y[2]}, {std::exp(1) / s, std::exp(2) / s, std::exp(3) / s}, 1e-12);
  CheckNear({y[3], y[4], y[5]}, {1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-12);
  auto ly = EvalD(g, ops::LogSoftmax(g, x));
  for (int i = 0; i < 9; ++i) CHECK(std::abs(ly[i] - std::log(y[i])) < 1e-9);
  CHECK(ly[8] == Approx(-std::log1p(std::exp(-5) + std::exp(-10))));
  // Rank 3 works over the last axis too; a float32 batch takes the parallel path.
  Graph g2;
  auto big = ops::Const(g2, std::vector<float>(128 * 500, 0.5f), {4, 32, 500});
  auto yb = EvalD(g2, ops::Softmax(g2, big));
  CHECK(yb.size() == 128 * 500);
  CHECK(yb[12345] == Approx(1.0 / 500));
}

TEST_CASE("SoftmaxCrossEntropyWithLogits gives loss and backprop", "[nn]") {
  Graph g;
  auto logits = D(g, {1, 2, 3, 0, 0, 0}, {2, 3});
  auto labels = D(g, {0, 0, 1, 0.5, 0.5, 0}, {2, 3});
  auto loss = ops::SoftmaxCrossEntropyWithLogits(g, logits, labels);
  REQUIRE(g.status().ok());
  CHECK(loss.shape() == PartialShape({2}));
  Output back(&g, loss.node, 1);
  CHECK(back.shape() == PartialShape({2, 3}));
  const double lse = std::log(std::exp(1) + std::exp(2) + std::exp(3));
  CheckNear(EvalD(g, loss), {lse - 3, std::log(3.0)}, 1e-12);
  CheckNear(EvalD(g, back), {std::exp(1 - lse), std::exp(2 - lse), std::exp(3 - lse) - 1,
                             1.0 / 3 - 0.5, 1.0 / 3 - 0.5, 1.0 / 3},
            1e-12);
  ops::SoftmaxCrossEntropyWithLogits(g, logits, D(g, {1, 0}, {1, 2}));
  CHECK_THAT(g.status().message(), Contains("[2,3]") && Contains("[1,2]"));
}

TEST_CASE("SparseSoftmaxCrossEntropyWithLogits uses class indices", "[nn]") {
  for (DType lt : {DType::kInt32, DType::kInt64}) {
    Graph g;
    auto logits = D(g, {1, 2, 3, 0, 0, 0}, {2, 3});
    auto labels = ops::Placeholder(g, lt, {2}, "labels");
    auto loss = ops::SparseSoftmaxCrossEntropyWithLogits(g, logits, labels);
    REQUIRE(g.status().ok());
    auto feed = [&](std::vector<int64_t> v) {
      if (lt == DType::kInt64) return Tensor::FromVector<int64_t>(v);
      return Tensor::FromVector<int32_t>(std::vector<int32_t>(v.begin(), v.end()));
    };
    const double lse = std::log(std::exp(1) + std::exp(2) + std::exp(3));
    CheckNear(EvalD(g, loss, {{labels, feed({0, 2})}}), {lse - 1, std::log(3.0)}, 1e-12);
    CheckNear(EvalD(g, Output(&g, loss.node, 1), {{labels, feed({0, 2})}}),
              {std::exp(1 - lse) - 1, std::exp(2 - lse), std::exp(3 - lse), 1.0 / 3, 1.0 / 3,
               1.0 / 3 - 1},
              1e-12);
    auto bad = testing::Eval(g, loss, {{labels, feed({1, 3})}});
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().code() == Code::kInvalidArgument);
    CHECK_THAT(bad.status().message(),
               Contains("label 3") && Contains("position 1") && Contains("[0, 3)"));
    bad = testing::Eval(g, loss, {{labels, feed({-1, 0})}});
    CHECK_THAT(bad.status().message(), Contains("label -1") && Contains("position 0"));
  }
  Graph g;
  ops::SparseSoftmaxCrossEntropyWithLogits(g, D(g, {1, 2}, {1, 2}), D(g, {0}, {1}));
  CHECK_THAT(g.status().message(), Contains("int32 or int64"));
}

TEST_CASE("L2Loss and BiasAdd", "[nn]") {
  Graph g;
  CheckNear(EvalD(g, ops::L2Loss(g, D(g, {1, 2, 3, -1}, {2, 2}))), {7.5});
  auto x = D(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = D(g, {10, 20, 30}, {3});
  CheckNear(EvalD(g, ops::BiasAdd(g, x, b)), {11, 22, 33, 14, 25, 36});
  CheckNear(EvalD(g, g.Add1("BiasAddGrad", {x})), {5, 7, 9});
  ops::BiasAdd(g, x, D(g, {1, 2}, {2}));
  CHECK_THAT(g.status().message(), Contains("[2,3]") && Contains("[2]"));
}

TEST_CASE("MatMul with transposes gives hand-computed values", "[nn]") {
  Graph g;
  auto a = D(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  auto at = D(g, {1, 4, 2, 5, 3, 6}, {3, 2});
  auto b = D(g, {7, 8, 9, 10, 11, 12}, {3, 2});
  auto bt = D(g, {7, 9, 11, 8, 10, 12}, {2, 3});
  const std::vector<double> want = {58, 64, 139, 154};
  CheckNear(EvalD(g, ops::MatMul(g, a, b)), want);
  CheckNear(EvalD(g, ops::MatMul(g, at, b, {true, false})), want);
  CheckNear(EvalD(g, ops::MatMul(g, a, bt, {false, true})), want);
  CheckNear(EvalD(g, ops::MatMul(g, at, bt, {true, true})), want);
  CHECK(ops::MatMul(g, at, bt, {true, true}).shape() == PartialShape({2, 2}));

  ops::MatMul(g, a, a);
  CHECK_THAT(g.status().message(), Contains("inner dimensions") && Contains("[2,3]"));

  // Unknown at build time: the kernel names both shapes.
  Graph g2;
  auto p = ops::Placeholder(g2, DType::kFloat32, {-1, -1}, "p");
  auto q = ops::Placeholder(g2, DType::kFloat32, {-1, -1}, "q");
  auto r = testing::Eval(g2, ops::MatMul(g2, p, q), {{p, Tensor::Zeros(DType::kFloat32, {2, 3})},
                                                     {q, Tensor::Zeros(DType::kFloat32, {4, 5})}});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Contains("[2,3]") && Contains("[4,5]"));
}

TEST_CASE("Dropout keeps about 1-rate of the elements, scaled, reproducibly", "[nn]") {
  auto run = [](int64_t seed) {
    Graph g;
    auto x = ops::Const(g, std::vector<float>(20000, 2.0f), {100, 200});
    auto y = ops::Dropout(g, x, 0.3, seed);
    REQUIRE(g.status().ok());
    auto r = testing::EvalGraph(g, {}, {y, Output(&g, y.node, 1)});
    REQUIRE(r.ok());
    return std::make_pair((*r)[0].ToVector<float>(), (*r)[1].ToVector<float>());
  };
  auto [y, mask] = run(7);
  int64_t kept = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const bool keep = mask[i] != 0;
    kept += keep;
    CHECK((mask[i] == 0 || std::abs(mask[i] - 1 / 0.7f) < 1e-6));
    CHECK(y[i] == 2.0f * mask[i]);
  }
  CHECK(std::abs(kept / 20000.0 - 0.7) < 0.02);
  CHECK(run(7).first == y);
  CHECK(run(8).first != y);

  Graph g;
  ops::Dropout(g, ops::Const(g, 1.0f), 1.0);
  CHECK_THAT(g.status().message(), Contains("rate"));
}

TEST_CASE("Softmax of rows with no elements is empty; cross entropy over no classes is 0 per row", "[nn]") {
  // Found by the Python fuzz of every op (python/tests/test_ops_registry.py): these aborted.
  for (const Shape& shape : {Shape{0}, Shape{3, 0}, Shape{0, 4}}) {
    Graph g;
    auto x = ops::Const(g, Tensor::Zeros(DType::kFloat32, shape));
    auto s = testing::Eval(g, ops::Softmax(g, x));
    REQUIRE(s.ok());
    CHECK(s->shape() == shape);
    auto ls = testing::Eval(g, ops::LogSoftmax(g, x));
    REQUIRE(ls.ok());
    CHECK(ls->shape() == shape);
  }
  Graph g;
  auto logits = ops::Const(g, Tensor::Zeros(DType::kFloat32, {2, 0}));
  // The loss is a sum over the classes: over none it is 0 (as TensorFlow).
  auto r = testing::Eval(g, ops::SoftmaxCrossEntropyWithLogits(g, logits, logits));
  REQUIRE(r.ok());
  CHECK(r->ToVector<float>() == std::vector<float>{0, 0});
}
