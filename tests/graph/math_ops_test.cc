// Value and error tests of the math ops (arithmetic, unary, comparisons,
// Select, Cast, AddN, reductions, ArgMax, SumToShape, operators).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"

using namespace sf;

namespace {

template <typename T>
Output C(Graph& g, std::vector<T> v, Shape shape) {
  return ops::Const(g, Tensor::FromVector<T>(v, std::move(shape)));
}

Tensor Run(Graph& g, Output y, const testing::Feeds& feeds = {}) {
  INFO(g.status().ToString());
  REQUIRE(g.status().ok());
  auto r = testing::Eval(g, y, feeds);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return *r;
}

template <typename T>
void CheckClose(const Tensor& t, const std::vector<double>& want, double tol = 1e-5) {
  REQUIRE(t.dtype() == DTypeOf<T>::value);
  auto got = t.ToVector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
    else CHECK(got[i] == Approx(want[i]).epsilon(tol).margin(tol));
  }
}

// NumPy-style reference of a broadcasting binary op (row-major indices).
std::vector<double> RefBroadcast(const std::vector<double>& a, const Shape& as, const std::vector<double>& b,
                                 const Shape& bs, Shape* out_shape,
                                 const std::function<double(double, double)>& f) {
  const size_t r = std::max(as.size(), bs.size());
  Shape pa(r, 1), pb(r, 1), po(r);
  for (size_t i = 0; i < as.size(); ++i) pa[r - as.size() + i] = as[i];
  for (size_t i = 0; i < bs.size(); ++i) pb[r - bs.size() + i] = bs[i];
  for (size_t i = 0; i < r; ++i) po[i] = std::max(pa[i], pb[i]);
  *out_shape = po;
  std::vector<double> out(NumElements(po));
  std::vector<int64_t> idx(r, 0);
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t ia = 0, ib = 0;
    for (size_t i = 0; i < r; ++i) {
      ia = ia * pa[i] + (pa[i] == 1 ? 0 : idx[i]);
      ib = ib * pb[i] + (pb[i] == 1 ? 0 : idx[i]);
    }
    out[k] = f(a[ia], b[ib]);
    for (int i = static_cast<int>(r) - 1; i >= 0; --i) {
      if (++idx[i] < po[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

std::vector<double> Random(int64_t n, uint64_t seed, double lo = -2, double hi = 2) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

template <typename T, typename U>
std::vector<T> As(const std::vector<U>& v) {
  return std::vector<T>(v.begin(), v.end());
}

}  // namespace

TEMPLATE_TEST_CASE("Binary arithmetic on same shapes", "[math]", float, double) {
  Graph g;
  auto a = C<TestType>(g, {1, 2, 3, 4}, {2, 2});
  auto b = C<TestType>(g, {2, 0.5, -1, 4}, {2, 2});
  CheckClose<TestType>(Run(g, ops::Add(g, a, b)), {3, 2.5, 2, 8});
  CheckClose<TestType>(Run(g, ops::Sub(g, a, b)), {-1, 1.5, 4, 0});
  CheckClose<TestType>(Run(g, ops::Mul(g, a, b)), {2, 1, -3, 16});
  CheckClose<TestType>(Run(g, ops::Div(g, a, b)), {0.5, 4, -3, 1});
  CheckClose<TestType>(Run(g, ops::Pow(g, a, b)), {1, std::sqrt(2.0), 1.0 / 3, 256});
  CheckClose<TestType>(Run(g, ops::Maximum(g, a, b)), {2, 2, 3, 4});
  CheckClose<TestType>(Run(g, ops::Minimum(g, a, b)), {1, 0.5, -1, 4});
  CHECK(Run(g, ops::Add(g, a, b)).shape() == Shape{2, 2});
}

TEMPLATE_TEST_CASE("Integer arithmetic", "[math]", int32_t, int64_t) {
  Graph g;
  auto a = C<TestType>(g, {7, -7, 3, 0}, {4});
  auto b = C<TestType>(g, {2, 2, -5, 9}, {4});
  CheckClose<TestType>(Run(g, ops::Add(g, a, b)), {9, -5, -2, 9});
  CheckClose<TestType>(Run(g, ops::Sub(g, a, b)), {5, -9, 8, -9});
  CheckClose<TestType>(Run(g, ops::Mul(g, a, b)), {14, -14, -15, 0});
  CheckClose<TestType>(Run(g, ops::Div(g, a, b)), {3, -3, 0, 0});
  CheckClose<TestType>(Run(g, ops::Maximum(g, a, b)), {7, 2, 3, 9});
  CheckClose<TestType>(Run(g, ops::Minimum(g, a, b)), {2, -7, -5, 0});
  CheckClose<TestType>(Run(g, ops::Neg(g, a)), {-7, 7, -3, 0});
  CheckClose<TestType>(Run(g, ops::Abs(g, a)), {7, 7, 3, 0});
  CheckClose<TestType>(Run(g, ops::Square(g, a)), {49, 49, 9, 0});
  CheckClose<TestType>(Run(g, ops::Sign(g, a)), {1, -1, 1, 0});
}

TEMPLATE_TEST_CASE("Small-integer arithmetic and reductions wrap as TensorFlow's", "[math]", int8_t, int16_t,
                   uint8_t) {
  Graph g;
  auto a = C<TestType>(g, {7, 100, 3, 0}, {4});
  auto b = C<TestType>(g, {2, 100, 5, 9}, {4});
  auto wrap = [](int v) { return static_cast<int>(static_cast<TestType>(v)); };  // two's complement, as TF
  auto ints = [&](Output y) { return Run(g, y).template ToVector<int>(); };
  CHECK(ints(ops::Add(g, a, b)) == std::vector<int>{9, wrap(200), 8, 9});
  CHECK(ints(ops::Sub(g, a, b)) == std::vector<int>{5, 0, wrap(-2), wrap(-9)});
  CHECK(ints(ops::Mul(g, a, b)) == std::vector<int>{14, wrap(10000), 15, 0});
  CHECK(ints(ops::Maximum(g, a, b)) == std::vector<int>{7, 100, 5, 9});
  CHECK(ints(ops::Minimum(g, a, b)) == std::vector<int>{2, 100, 3, 0});
  CHECK(ints(ops::Sum(g, a, {})) == std::vector<int>{wrap(110)});
  CHECK(ints(ops::Max(g, b, {})) == std::vector<int>{100});
  CHECK(Run(g, ops::ArgMax(g, b, 0)).template ToVector<int64_t>() == std::vector<int64_t>{1});
  CHECK(Run(g, ops::ZerosLike(g, a)).dtype() == DTypeOf<TestType>::value);
}

TEST_CASE("Integer division by zero is an error naming the node", "[math]") {
  Graph g;
  auto y = ops::Div(g, C<int32_t>(g, {1, 2}, {2}), C<int32_t>(g, {1, 0}, {2}));
  auto r = testing::Eval(g, y);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("division by zero"));
  CHECK_THAT(r.status().message(), Catch::Contains("Div"));
}

TEMPLATE_TEST_CASE("Broadcasting binary ops", "[math]", float, double) {
  Graph g;
  auto m = C<TestType>(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  auto v = C<TestType>(g, {10, 20, 30}, {3});
  auto col = C<TestType>(g, {1, 2}, {2, 1});
  auto row = C<TestType>(g, {10, 20, 30}, {1, 3});
  auto s = ops::Const(g, Tensor::Scalar<TestType>(2));

  Tensor t = Run(g, ops::Add(g, m, v));
  CHECK(t.shape() == Shape{2, 3});
  CheckClose<TestType>(t, {11, 22, 33, 14, 25, 36});
  t = Run(g, ops::Add(g, col, row));
  CHECK(t.shape() == Shape{2, 3});
  CheckClose<TestType>(t, {11, 21, 31, 12, 22, 32});
  CheckClose<TestType>(Run(g, ops::Sub(g, s, m)), {1, 0, -1, -2, -3, -4});
  CheckClose<TestType>(Run(g, ops::Div(g, m, s)), {0.5, 1, 1.5, 2, 2.5, 3});
  CheckClose<TestType>(Run(g, ops::Mul(g, v, m)), {10, 40, 90, 40, 100, 180});
  CheckClose<TestType>(Run(g, ops::Maximum(g, col, C<TestType>(g, {0, 1.5, 3}, {3}))),
                       {1, 1.5, 3, 2, 2, 3});
  t = Run(g, ops::Mul(g, C<TestType>(g, {3}, {1, 1}), v));
  CHECK(t.shape() == Shape{1, 3});
  CheckClose<TestType>(t, {30, 60, 90});
}

TEST_CASE("Broadcasting matches a NumPy-style reference on many shapes", "[math]") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 1, 2}, {4, 1}},          {{2, 3, 4}, {4}},          {{2, 1, 4}, {1, 3, 1}},
      {{5}, {3, 1}},                {{2, 1, 3, 1, 2}, {2, 1, 2, 1}}, {{1, 4, 1, 3}, {2, 1, 5, 1}},
      {{200, 300}, {300}},          {{200, 1, 50}, {1, 30, 50}},  {{6, 2}, {}},
      {{1, 1}, {7}}};
  uint64_t seed = 1;
  for (const auto& c : cases) {
    Graph g;
    const auto av = Random(NumElements(c.first), seed++), bv = Random(NumElements(c.second), seed++);
    auto a = C<float>(g, As<float>(av), c.first);
    auto b = C<float>(g, As<float>(bv), c.second);
    Shape want_shape;
    auto want = RefBroadcast(As<double>(As<float>(av)), c.first, As<double>(As<float>(bv)), c.second,
                             &want_shape, [](double x, double y) { return x * y + x; });
    INFO(ShapeString(c.first) << " with " << ShapeString(c.second));
    Tensor t = Run(g, ops::Add(g, ops::Mul(g, a, b), a));
    CHECK(t.shape() == want_shape);
    auto lt = Run(g, ops::Less(g, a, b));
    CHECK(lt.shape() == want_shape);
    auto want_lt = RefBroadcast(As<double>(As<float>(av)), c.first, As<double>(As<float>(bv)), c.second,
                                &want_shape, [](double x, double y) { return x < y ? 1.0 : 0.0; });
    CHECK(lt.ToVector<double>() == want_lt);
    CheckClose<float>(t, want, 1e-4);
  }
}

TEST_CASE("An incompatible broadcast names both shapes and the node", "[math]") {
  Graph g;
  auto y = ops::Add(g, ops::Const(g, std::vector<float>(6, 1.f), {2, 3}),
                    ops::Const(g, std::vector<float>(4, 1.f), {4}));
  CHECK_FALSE(y.valid());
  const std::string m = g.status().message();
  CHECK_THAT(m, Catch::Contains("[2,3]"));
  CHECK_THAT(m, Catch::Contains("[4]"));
  CHECK_THAT(m, Catch::Contains("node 'Add'"));

  // Shapes unknown until run time: the kernel reports the same.
  Graph g2;
  auto a = ops::Placeholder(g2, DType::kFloat32, {-1}, "a");
  auto b = ops::Placeholder(g2, DType::kFloat32, {-1}, "b");
  auto z = ops::Mul(g2, a, b);
  REQUIRE(g2.status().ok());
  auto r = testing::Eval(g2, z, {{a, Tensor::FromVector<float>({1, 2})}, {b, Tensor::FromVector<float>({1, 2, 3})}});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("[2]"));
  CHECK_THAT(r.status().message(), Catch::Contains("[3]"));
  CHECK_THAT(r.status().message(), Catch::Contains("Mul"));
}

TEST_CASE("Mixed dtypes are refused at graph construction", "[math]") {
  Graph g;
  auto y = ops::Add(g, ops::Const(g, 1.0f), ops::Const(g, 1.0));
  CHECK_FALSE(y.valid());
  CHECK_THAT(g.status().message(), Catch::Contains("float64"));
}

TEMPLATE_TEST_CASE("Unary ops", "[math]", float, double) {
  Graph g;
  auto x = C<TestType>(g, {0.25, 1, 4}, {3});
  CheckClose<TestType>(Run(g, ops::Neg(g, x)), {-0.25, -1, -4});
  CheckClose<TestType>(Run(g, ops::Square(g, x)), {0.0625, 1, 16});
  CheckClose<TestType>(Run(g, ops::Sqrt(g, x)), {0.5, 1, 2});
  CheckClose<TestType>(Run(g, ops::Rsqrt(g, x)), {2, 1, 0.5});
  CheckClose<TestType>(Run(g, ops::Exp(g, x)), {std::exp(0.25), std::exp(1.0), std::exp(4.0)});
  CheckClose<TestType>(Run(g, ops::Log(g, x)), {std::log(0.25), 0, std::log(4.0)});
  CheckClose<TestType>(Run(g, ops::Reciprocal(g, x)), {4, 1, 0.25});
  auto n = C<TestType>(g, {-1.5, 0, 2}, {3});
  CheckClose<TestType>(Run(g, ops::Abs(g, n)), {1.5, 0, 2});
  CheckClose<TestType>(Run(g, ops::Sign(g, n)), {-1, 0, 1});
}

TEMPLATE_TEST_CASE("AddN sums same-shape inputs", "[math]", float, double, int32_t) {
  Graph g;
  auto a = C<TestType>(g, {1, 2}, {2});
  auto b = C<TestType>(g, {10, 20}, {2});
  auto c = C<TestType>(g, {100, 200}, {2});
  CheckClose<TestType>(Run(g, ops::AddN(g, {a, b, c})), {111, 222});
  CheckClose<TestType>(Run(g, ops::AddN(g, {a})), {1, 2});
  ops::AddN(g, {a, C<TestType>(g, {1, 2, 3}, {3})});
  CHECK_THAT(g.status().message(), Catch::Contains("[3]"));
}

TEST_CASE("Cast converts between dtypes", "[math]") {
  Graph g;
  auto f = C<float>(g, {-1.7f, 0.f, 2.5f}, {3});
  Tensor t = Run(g, ops::Cast(g, f, DType::kInt32));
  CHECK(t.dtype() == DType::kInt32);
  CHECK(t.ToVector<int32_t>() == std::vector<int32_t>{-1, 0, 2});
  t = Run(g, ops::Cast(g, f, DType::kBool));
  CHECK(t.ToVector<int>() == std::vector<int>{1, 0, 1});
  CheckClose<double>(Run(g, ops::Cast(g, f, DType::kFloat64)), {-1.7, 0, 2.5});
  CheckClose<float>(Run(g, ops::Cast(g, C<int64_t>(g, {3, -4}, {2}), DType::kFloat32)), {3, -4});
  auto b = ops::Const(g, Tensor::FromBools({true, false}, {2}));
  CheckClose<int64_t>(Run(g, ops::Cast(g, b, DType::kInt64)), {1, 0});
  // A cast to the same dtype shares the buffer.
  CHECK(Run(g, ops::Cast(g, f, DType::kFloat32)).SharesBufferWith(Run(g, f)));
}

TEST_CASE("Cast converts to and from int8, int16 and uint8 as C++ (and NumPy) do", "[math]") {
  Graph g;
  auto f = C<float>(g, {-3.7f, -1.f, 0.f, 1.5f, 127.f}, {5});
  Tensor t = Run(g, ops::Cast(g, f, DType::kInt8));
  CHECK(t.dtype() == DType::kInt8);
  CHECK(t.ToVector<int>() == std::vector<int>{-3, -1, 0, 1, 127});
  t = Run(g, ops::Cast(g, f, DType::kInt16));
  CHECK(t.dtype() == DType::kInt16);
  CHECK(t.ToVector<int>() == std::vector<int>{-3, -1, 0, 1, 127});
  auto u = C<uint8_t>(g, {0, 1, 200, 255}, {4});
  CheckClose<float>(Run(g, ops::Cast(g, u, DType::kFloat32)), {0, 1, 200, 255});
  CheckClose<int64_t>(Run(g, ops::Cast(g, u, DType::kInt64)), {0, 1, 200, 255});
  CHECK(Run(g, ops::Cast(g, u, DType::kInt8)).ToVector<int>() == std::vector<int>{0, 1, -56, -1});  // wraps
  CHECK(Run(g, ops::Cast(g, C<int8_t>(g, {-1, 5}, {2}), DType::kUInt8)).ToVector<int>() == std::vector<int>{255, 5});
  CHECK(Run(g, ops::Cast(g, u, DType::kBool)).ToVector<int>() == std::vector<int>{0, 1, 1, 1});
  auto b = ops::Const(g, Tensor::FromBools({true, false}, {2}));
  Tensor bu = Run(g, ops::Cast(g, b, DType::kUInt8));
  CHECK(bu.dtype() == DType::kUInt8);
  CHECK(bu.ToVector<int>() == std::vector<int>{1, 0});
  CHECK(Run(g, ops::Cast(g, C<int16_t>(g, {-300, 300}, {2}), DType::kInt32)).ToVector<int>() ==
        std::vector<int>{-300, 300});
}

TEMPLATE_TEST_CASE("Comparisons and logic broadcast", "[math]", float, double, int32_t, int64_t, int8_t, int16_t,
                   uint8_t) {
  Graph g;
  auto a = C<TestType>(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = C<TestType>(g, {2, 2, 7}, {3});
  auto v = [&](Output y) {
    Tensor t = Run(g, y);
    CHECK(t.dtype() == DType::kBool);
    CHECK(t.shape() == Shape{2, 3});
    return t.ToVector<int>();
  };
  using V = std::vector<int>;
  CHECK(v(ops::Equal(g, a, b)) == V{0, 1, 0, 0, 0, 0});
  CHECK(v(ops::NotEqual(g, a, b)) == V{1, 0, 1, 1, 1, 1});
  CHECK(v(ops::Less(g, a, b)) == V{1, 0, 1, 0, 0, 1});
  CHECK(v(ops::LessEqual(g, a, b)) == V{1, 1, 1, 0, 0, 1});
  CHECK(v(ops::Greater(g, a, b)) == V{0, 0, 0, 1, 1, 0});
  CHECK(v(ops::GreaterEqual(g, a, b)) == V{0, 1, 0, 1, 1, 0});
  auto lt = ops::Less(g, a, b), gt2 = ops::Greater(g, a, ops::ScalarLike(g, a, 2));
  CHECK(v(ops::LogicalAnd(g, lt, gt2)) == V{0, 0, 1, 0, 0, 1});
  CHECK(v(ops::LogicalOr(g, lt, gt2)) == V{1, 0, 1, 1, 1, 1});
  CHECK(v(ops::LogicalNot(g, lt)) == V{0, 1, 0, 1, 1, 0});
}

TEST_CASE("Logical ops need bool inputs", "[math]") {
  Graph g;
  ops::LogicalNot(g, ops::Const(g, 1.0f));
  CHECK_THAT(g.status().message(), Catch::Contains("bool"));
}

TEMPLATE_TEST_CASE("Select picks element-wise with broadcasting", "[math]", float, double, int32_t) {
  Graph g;
  auto a = C<TestType>(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = C<TestType>(g, {-1, -2, -3, -4, -5, -6}, {2, 3});
  auto cond = ops::Const(g, Tensor::FromBools({true, false, true, false, false, true}, {2, 3}));
  CheckClose<TestType>(Run(g, ops::Select(g, cond, a, b)), {1, -2, 3, -4, -5, 6});
  auto rows = ops::Const(g, Tensor::FromBools({false, true}, {2, 1}));
  CheckClose<TestType>(Run(g, ops::Select(g, rows, a, b)), {-1, -2, -3, 4, 5, 6});
  auto zero = ops::Const(g, Tensor::Scalar<TestType>(0));
  CheckClose<TestType>(Run(g, ops::Select(g, cond, a, zero)), {1, 0, 3, 0, 0, 6});
  ops::Select(g, ops::Const(g, Tensor::FromBools({true, false}, {2})), a, b);
  CHECK_THAT(g.status().message(), Catch::Contains("[2]"));
}

namespace {

// Reference reduction of a row-major [d0,d1,d2] tensor over a mask of axes.
std::vector<double> RefReduce(const std::vector<double>& x, const Shape& s, const std::vector<bool>& mask,
                              const std::string& op) {
  Shape out_s;
  for (size_t i = 0; i < s.size(); ++i) out_s.push_back(mask[i] ? 1 : s[i]);
  const int64_t n_out = NumElements(out_s);
  std::vector<double> acc(n_out, op == "Prod" ? 1.0 : op == "Max" ? -1e300 : op == "Min" ? 1e300 : 0.0);
  std::vector<int64_t> count(n_out, 0);
  std::vector<int64_t> idx(s.size(), 0);
  for (size_t k = 0; k < x.size(); ++k) {
    int64_t o = 0;
    for (size_t i = 0; i < s.size(); ++i) o = o * out_s[i] + (mask[i] ? 0 : idx[i]);
    double& a = acc[o];
    if (op == "Sum" || op == "Mean") a += x[k];
    else if (op == "Prod") a *= x[k];
    else if (op == "Max") a = std::max(a, x[k]);
    else a = std::min(a, x[k]);
    ++count[o];
    for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
      if (++idx[i] < s[i]) break;
      idx[i] = 0;
    }
  }
  if (op == "Mean")
    for (int64_t i = 0; i < n_out; ++i) acc[i] /= count[i];
  return acc;
}

using ReduceFn = Output (*)(Graph&, Output, std::vector<int64_t>, ops::ReduceAttrs);

}  // namespace

TEMPLATE_TEST_CASE("Reductions match a reference over every axis set", "[math]", float, double) {
  const Shape shape{2, 3, 4};
  const auto xv = Random(24, 7, 0.5, 1.5);
  const std::vector<std::pair<std::string, ReduceFn>> reducers = {
      {"Sum", ops::Sum}, {"Mean", ops::Mean}, {"Max", ops::Max}, {"Min", ops::Min}, {"Prod", ops::Prod}};
  const std::vector<std::vector<int64_t>> axes_sets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1}, {0, 1, 2}, {-3, 1}};
  for (const auto& red : reducers) {
    for (const auto& axes : axes_sets) {
      for (bool keep : {false, true}) {
        Graph g;
        auto x = C<TestType>(g, As<TestType>(xv), shape);
        Tensor t = Run(g, red.second(g, x, axes, ops::ReduceAttrs{keep}));
        std::vector<bool> mask(3, axes.empty());
        for (int64_t a : axes) mask[a < 0 ? a + 3 : a] = true;
        Shape want_shape;
        for (int i = 0; i < 3; ++i) {
          if (!mask[i]) want_shape.push_back(shape[i]);
          else if (keep) want_shape.push_back(1);
        }
        INFO(red.first << " axes " << ShapeString(axes) << " keep_dims " << keep);
        CHECK(t.shape() == want_shape);
        CheckClose<TestType>(t, RefReduce(As<double>(As<TestType>(xv)), shape, mask, red.first), 1e-4);
      }
    }
  }
}

TEST_CASE("Integer reductions and big reductions", "[math]") {
  Graph g;
  auto xi = C<int32_t>(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(Run(g, ops::Sum(g, xi, {1})).ToVector<int32_t>() == std::vector<int32_t>{6, 15});
  CHECK(Run(g, ops::Max(g, xi, {0})).ToVector<int32_t>() == std::vector<int32_t>{4, 5, 6});
  CHECK(Run(g, ops::Prod(g, xi)).ToVector<int32_t>() == std::vector<int32_t>{720});
  CHECK(Run(g, ops::Mean(g, xi, {1})).ToVector<int32_t>() == std::vector<int32_t>{2, 5});

  // Large enough to run on the thread pool.
  const Shape s{300, 200};
  const auto xv = Random(NumElements(s), 3);
  auto x = C<double>(g, xv, s);
  std::vector<bool> rows{false, true}, cols{true, false};
  CheckClose<double>(Run(g, ops::Sum(g, x, {1})), RefReduce(xv, s, rows, "Sum"), 1e-9);
  CheckClose<double>(Run(g, ops::Max(g, x, {0})), RefReduce(xv, s, cols, "Max"), 1e-12);
  CheckClose<double>(Run(g, ops::Mean(g, x)), RefReduce(xv, s, {true, true}, "Mean"), 1e-9);
}

TEST_CASE("Reductions of empty tensors give the identity", "[math]") {
  Graph g;
  auto x = ops::Const(g, Tensor(DType::kFloat32, {0, 3}));
  CheckClose<float>(Run(g, ops::Sum(g, x, {0})), {0, 0, 0});
  CheckClose<float>(Run(g, ops::Prod(g, x, {0})), {1, 1, 1});
  CHECK(Run(g, ops::Sum(g, x, {1})).shape() == Shape{0});
}

TEST_CASE("Prod's gradient is exact where inputs are 0 (no division)", "[math][gradients]") {
  auto grad = [](const std::vector<double>& xv, const Shape& shape, std::vector<int64_t> axes) {
    Graph g;
    auto x = ops::Placeholder(g, DType::kFloat64, PartialShape(shape), "x");
    auto dx = Gradients(g, {ops::Prod(g, x, axes)}, {x});
    INFO(dx.status().ToString());
    REQUIRE(dx.ok());
    return Run(g, (*dx)[0], {{x, Tensor::FromVector(xv, shape)}}).ToVector<double>();
  };
  // PyTorch's values: the product of the others.
  CHECK(grad({0, 2, 3}, {3}, {}) == std::vector<double>{6, 0, 0});
  CHECK(grad({0, 2, 0}, {3}, {}) == std::vector<double>{0, 0, 0});
  CHECK(grad({0, 2, 3, 4, 0, 5}, {2, 3}, {1}) == std::vector<double>{6, 0, 0, 0, 20, 0});
  // Two reduced axes (moved to the front and flattened): [2,2,2] over {0,2}.
  CHECK(grad({1, 0, 2, 3, 4, 5, 6, 7}, {2, 2, 2}, {0, 2}) ==
        std::vector<double>{0, 20, 126, 84, 0, 0, 42, 36});
}

TEST_CASE("Cumsum and Cumprod scan one axis, exclusive and reversed", "[math]") {
  Graph g;
  auto x = C<float>(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  using A = ops::ScanAttrs;
  CheckClose<float>(Run(g, ops::Cumsum(g, x, 1)), {1, 3, 6, 4, 9, 15});
  CheckClose<float>(Run(g, ops::Cumsum(g, x, 0)), {1, 2, 3, 5, 7, 9});
  CheckClose<float>(Run(g, ops::Cumsum(g, x, -1, A{true, false})), {0, 1, 3, 0, 4, 9});
  CheckClose<float>(Run(g, ops::Cumsum(g, x, 1, A{false, true})), {6, 5, 3, 15, 11, 6});
  CheckClose<float>(Run(g, ops::Cumprod(g, x, 1)), {1, 2, 6, 4, 20, 120});
  CheckClose<float>(Run(g, ops::Cumprod(g, x, 1, A{true, true})), {6, 3, 1, 30, 6, 1});
  auto xi = C<int64_t>(g, {2, 3, 4}, {3});
  CHECK(Run(g, ops::Cumprod(g, xi, 0, A{true, false})).ToVector<int64_t>() == std::vector<int64_t>{1, 2, 6});
  CHECK(Run(g, ops::Cumsum(g, ops::Const(g, Tensor(DType::kFloat32, {2, 0})), 1)).shape() == Shape{2, 0});

  Graph bad;
  ops::Cumsum(bad, ops::Const(bad, Tensor(DType::kFloat32, {2, 3})), 2);
  CHECK_THAT(bad.status().message(), Catch::Contains("node 'Cumsum'"));
  CHECK_THAT(bad.status().message(), Catch::Contains("axis 2 is out of range for shape [2,3]"));
}

TEST_CASE("A reduction axis out of range names the axis and the shape", "[math]") {
  Graph g;
  auto y = ops::Sum(g, ops::Const(g, std::vector<float>(6, 1.f), {2, 3}), {2});
  CHECK_FALSE(y.valid());
  CHECK_THAT(g.status().message(), Catch::Contains("axis 2"));
  CHECK_THAT(g.status().message(), Catch::Contains("[2,3]"));

  Graph g2;
  auto p = ops::Placeholder(g2, DType::kFloat32, PartialShape(), "p");
  auto r = testing::Eval(g2, ops::Mean(g2, p, {-3}), {{p, Tensor::FromVector<float>({1, 2})}});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("axis -3"));
}

TEMPLATE_TEST_CASE("ArgMax returns the first largest index", "[math]", float, double, int32_t) {
  Graph g;
  auto x = C<TestType>(g, {1, 5, 5, 2, 7, 0}, {2, 3});
  Tensor t = Run(g, ops::ArgMax(g, x, 1));
  CHECK(t.dtype() == DType::kInt64);
  CHECK(t.ToVector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(Run(g, ops::ArgMax(g, x, 0)).template ToVector<int64_t>() == std::vector<int64_t>{1, 1, 0});
  CHECK(Run(g, ops::ArgMax(g, x, -1)).shape() == Shape{2});
  ops::ArgMax(g, x, 2);
  CHECK_THAT(g.status().message(), Catch::Contains("axis 2"));
}

TEMPLATE_TEST_CASE("SumToShape undoes broadcasting", "[math]", float, double) {
  Graph g;
  auto x = C<TestType>(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  auto to = [&](std::vector<int32_t> s) { return Run(g, ops::SumToShape(g, x, ops::Const(g, s))); };
  Tensor t = to({3});
  CHECK(t.shape() == Shape{3});
  CheckClose<TestType>(t, {5, 7, 9});
  t = to({2, 1});
  CHECK(t.shape() == Shape{2, 1});
  CheckClose<TestType>(t, {6, 15});
  CheckClose<TestType>(to({1, 3}), {5, 7, 9});
  t = to({});
  CHECK(t.shape() == Shape{});
  CheckClose<TestType>(t, {21});
  CheckClose<TestType>(to({2, 3}), {1, 2, 3, 4, 5, 6});

  ops::SumToShape(g, x, ops::Const(g, std::vector<int32_t>{4}));
  CHECK_THAT(g.status().message(), Catch::Contains("[2,3]"));
  CHECK_THAT(g.status().message(), Catch::Contains("[4]"));
}

TEST_CASE("SumToShape checks a run-time shape", "[math]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, -1}, "x");
  auto s = ops::Placeholder(g, DType::kInt32, {-1}, "s");
  auto y = ops::SumToShape(g, x, s);
  auto r = testing::Eval(g, y, {{x, Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                                {s, Tensor::FromVector<int32_t>({2})}});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("[2,3]"));
  CHECK_THAT(r.status().message(), Catch::Contains("[2]"));
}

TEST_CASE("Operators build the matching ops", "[math]") {
  Graph g;
  auto a = C<float>(g, {1, 2}, {2});
  auto b = C<float>(g, {4, 8}, {2});
  CheckClose<float>(Run(g, a + b), {5, 10});
  CheckClose<float>(Run(g, a - b), {-3, -6});
  CheckClose<float>(Run(g, a * b), {4, 16});
  CheckClose<float>(Run(g, b / a), {4, 4});
  CheckClose<float>(Run(g, -a), {-1, -2});
  CheckClose<float>(Run(g, a + 1.0), {2, 3});
  CheckClose<float>(Run(g, a - 1.0), {0, 1});
  CheckClose<float>(Run(g, a * 3.0), {3, 6});
  CheckClose<float>(Run(g, a / 2.0), {0.5, 1});
  CheckClose<float>(Run(g, 3.0 * a), {3, 6});
  auto d = C<double>(g, {1, 2}, {2});
  Tensor t = Run(g, d * 0.5);
  CHECK(t.dtype() == DType::kFloat64);
  CHECK(a.op().op == "Const");
  CHECK((a + b).op().op == "Add");
  CHECK_FALSE((Output() + Output()).valid());
}

TEST_CASE("Gradients of math ops match hand-computed values", "[math]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2, 3}, "x");
  auto b = ops::Placeholder(g, DType::kFloat32, {3}, "b");
  // loss = sum(x * b + b) + mean(x) + max(x)
  auto loss = ops::Sum(g, x * b + b) + ops::Mean(g, x) + ops::Max(g, x);
  auto grads = Gradients(g, {loss}, {x, b});
  INFO(grads.status().ToString());
  REQUIRE(grads.ok());
  CHECK((*grads)[1].shape() == PartialShape({3}));
  const Tensor xv = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor bv = Tensor::FromVector<float>({10, 20, 30});
  auto r = testing::EvalGraph(g, {{x, xv}, {b, bv}}, *grads);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  const double m = 1.0 / 6;
  CheckClose<float>((*r)[0], {10 + m, 20 + m, 30 + m, 10 + m, 20 + m, 30 + m + 1});
  CheckClose<float>((*r)[1], {1 + 4 + 2, 2 + 5 + 2, 3 + 6 + 2});

  // Through a float32 -> float64 cast the gradient comes back as float32.
  auto l2 = ops::Sum(g, ops::Square(g, ops::Cast(g, x, DType::kFloat64)));
  auto g2 = Gradients(g, {l2}, {x});
  REQUIRE(g2.ok());
  CHECK((*g2)[0].dtype() == DType::kFloat32);
  auto r2 = testing::Eval(g, (*g2)[0], {{x, xv}});
  REQUIRE(r2.ok());
  CheckClose<float>(*r2, {2, 4, 6, 8, 10, 12});
}

TEST_CASE("Broadcast gradients reduce only the operand that was broadcast", "[math]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 3}, "x");
  auto b = ops::Placeholder(g, DType::kFloat32, {3}, "b");
  auto grads = Gradients(g, {ops::Sum(g, x + b)}, {x, b});
  REQUIRE(grads.ok());
  int sum_to_shape = 0;
  for (int i = 0; i < g.num_nodes(); ++i) sum_to_shape += g.node(i).op == "SumToShape" ? 1 : 0;
  CHECK(sum_to_shape == 1);
  auto r = testing::EvalGraph(g, {{x, Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                                  {b, Tensor::FromVector<float>({1, 1, 1})}},
                              *grads);
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<float>() == std::vector<float>(6, 1.f));
  CHECK((*r)[1].ToVector<float>() == std::vector<float>{2, 2, 2});
}
