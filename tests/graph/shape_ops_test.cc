// Value and error tests of the shape ops.
#include <catch2/catch.hpp>

#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"

using namespace sf;

namespace {

Tensor Run(Graph& g, Output y, const testing::Feeds& feeds = {}) {
  INFO(g.status().ToString());
  REQUIRE(g.status().ok());
  auto r = testing::Eval(g, y, feeds);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return *r;
}

Output M23(Graph& g) { return ops::Const(g, std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}); }

}  // namespace

TEST_CASE("Shape, Size and Rank", "[shape]") {
  Graph g;
  auto x = M23(g);
  Tensor s = Run(g, ops::ShapeOf(g, x));
  CHECK(s.dtype() == DType::kInt32);
  CHECK(s.ToVector<int32_t>() == std::vector<int32_t>{2, 3});
  CHECK(ops::ShapeOf(g, x).shape() == PartialShape({2}));
  CHECK(Run(g, ops::Size(g, x)).ToVector<int32_t>() == std::vector<int32_t>{6});
  CHECK(Run(g, ops::Rank(g, x)).ToVector<int32_t>() == std::vector<int32_t>{2});
  CHECK(Run(g, ops::ShapeOf(g, ops::Const(g, 1.0f))).shape() == Shape{0});

  auto p = ops::Placeholder(g, DType::kFloat64, PartialShape(), "p");
  CHECK(ops::ShapeOf(g, p).shape() == PartialShape({-1}));
  Tensor fed = Tensor::Zeros(DType::kFloat64, {4, 1, 2});
  CHECK(Run(g, ops::ShapeOf(g, p), {{p, fed}}).ToVector<int32_t>() == std::vector<int32_t>{4, 1, 2});
}

TEST_CASE("ZerosLike, OnesLike, Fill, Zeros and Ones", "[shape]") {
  Graph g;
  auto x = M23(g);
  Tensor z = Run(g, ops::ZerosLike(g, x));
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.ToVector<float>() == std::vector<float>(6, 0.f));
  Tensor o = Run(g, ops::OnesLike(g, ops::Const(g, Tensor::FromVector<int64_t>({5, 6}))));
  CHECK(o.dtype() == DType::kInt64);
  CHECK(o.ToVector<int64_t>() == std::vector<int64_t>{1, 1});

  auto f = ops::Fill(g, ops::Const(g, std::vector<int32_t>{2, 2}), ops::Const(g, 2.5));
  CHECK(f.shape() == PartialShape({2, 2}));
  Tensor ft = Run(g, f);
  CHECK(ft.dtype() == DType::kFloat64);
  CHECK(ft.ToVector<double>() == std::vector<double>(4, 2.5));

  Tensor zs = Run(g, ops::Zeros(g, DType::kInt32, {3}));
  CHECK(zs.dtype() == DType::kInt32);
  CHECK(zs.ToVector<int32_t>() == std::vector<int32_t>{0, 0, 0});
  Tensor zscalar = Run(g, ops::Zeros(g, DType::kFloat64, {}));
  CHECK(zscalar.shape() == Shape{});
  CHECK(zscalar.ToVector<double>() == std::vector<double>{0});
  Tensor os = Run(g, ops::Ones(g, DType::kFloat32, {2, 1}));
  CHECK(os.shape() == Shape{2, 1});
  CHECK(os.ToVector<float>() == std::vector<float>{1, 1});

  // Big fills run on the thread pool.
  Tensor big = Run(g, ops::Ones(g, DType::kFloat64, {300, 300}));
  CHECK(big.ToVector<double>() == std::vector<double>(90000, 1.0));

  ops::Fill(g, ops::Const(g, std::vector<int32_t>{2, -1}), ops::Const(g, 1.0f));
  CHECK_THAT(g.status().message(), Catch::Contains("negative"));
}

TEST_CASE("Fill checks run-time dims", "[shape]") {
  Graph g;
  auto d = ops::Placeholder(g, DType::kInt32, {-1}, "d");
  auto f = ops::Fill(g, d, ops::Const(g, 1.0f));
  CHECK(f.shape().rank() == -1);
  Tensor t = Run(g, f, {{d, Tensor::FromVector<int32_t>({3})}});
  CHECK(t.shape() == Shape{3});
  auto r = testing::Eval(g, f, {{d, Tensor::FromVector<int32_t>({-2})}});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("[-2]"));
}

TEST_CASE("Reshape shares the buffer and infers one -1", "[shape]") {
  Graph g;
  auto x = M23(g);
  auto y = ops::Reshape(g, x, {3, -1});
  CHECK(y.shape() == PartialShape({3, 2}));
  Tensor t = Run(g, y);
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.SharesBufferWith(Run(g, x)));
  CHECK(t.ToVector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(Run(g, ops::Reshape(g, x, {6})).shape() == Shape{6});

  // A shape known only at run time.
  auto s = ops::Placeholder(g, DType::kInt64, {2}, "s");
  auto z = ops::Reshape(g, x, s);
  CHECK(z.shape() == PartialShape({-1, -1}));
  CHECK(Run(g, z, {{s, Tensor::FromVector<int64_t>({-1, 1})}}).shape() == Shape{6, 1});
  auto r = testing::Eval(g, z, {{s, Tensor::FromVector<int64_t>({4, 2})}});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("6 elements"));
  CHECK_THAT(r.status().message(), Catch::Contains("8 elements"));
  CHECK_THAT(r.status().message(), Catch::Contains("Reshape"));
}

TEST_CASE("Reshape to a wrong size names both sizes and the node", "[shape]") {
  Graph g;
  auto y = ops::Reshape(g, M23(g), {4});
  CHECK_FALSE(y.valid());
  const std::string m = g.status().message();
  CHECK_THAT(m, Catch::Contains("6 elements"));
  CHECK_THAT(m, Catch::Contains("4 elements"));
  CHECK_THAT(m, Catch::Contains("node 'Reshape'"));

  Graph g2;
  ops::Reshape(g2, M23(g2), {-1, 4});
  CHECK_THAT(g2.status().message(), Catch::Contains("not a multiple of 4"));
  Graph g3;
  ops::Reshape(g3, M23(g3), {-1, -1});
  CHECK_THAT(g3.status().message(), Catch::Contains("one -1"));
}

TEST_CASE("ExpandDims and Squeeze", "[shape]") {
  Graph g;
  auto x = M23(g);
  CHECK(ops::ExpandDims(g, x, 0).shape() == PartialShape({1, 2, 3}));
  CHECK(ops::ExpandDims(g, x, -1).shape() == PartialShape({2, 3, 1}));
  Tensor t = Run(g, ops::ExpandDims(g, x, 1));
  CHECK(t.shape() == Shape{2, 1, 3});
  CHECK(t.SharesBufferWith(Run(g, x)));

  auto e = ops::Const(g, std::vector<float>{1, 2, 3}, {1, 3, 1});
  CHECK(Run(g, ops::Squeeze(g, e)).shape() == Shape{3});
  CHECK(Run(g, ops::Squeeze(g, e, {-1})).shape() == Shape{1, 3});
  CHECK(ops::Squeeze(g, e, {0}).shape() == PartialShape({3, 1}));

  auto p = ops::Placeholder(g, DType::kFloat32, {-1, 3}, "p");
  auto sq = ops::Squeeze(g, p, {0});
  CHECK(sq.shape() == PartialShape({3}));
  auto r = testing::Eval(g, sq, {{p, Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})}});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("has size 2"));

  ops::Squeeze(g, x, {1});
  CHECK_THAT(g.status().message(), Catch::Contains("[2,3]"));
  Graph g2;
  ops::ExpandDims(g2, M23(g2), 4);
  CHECK_THAT(g2.status().message(), Catch::Contains("axis 4"));
}

TEST_CASE("Bitcast reinterprets bytes as TensorFlow's tf.bitcast, with its shape rule", "[shape]") {
  Graph g;
  auto f = ops::Const(g, Tensor::FromVector<float>({1.0f, -2.5f}, {2}));
  AttrMap to_u8;
  to_u8.Set("type", DType::kUInt8);
  auto bytes = g.Add1("Bitcast", {f}, to_u8);
  AttrMap to_f32;
  to_f32.Set("type", DType::kFloat32);
  auto back = g.Add1("Bitcast", {bytes}, to_f32);
  AttrMap to_i32;
  to_i32.Set("type", DType::kInt32);
  auto same = g.Add1("Bitcast", {f}, to_i32);
  INFO(g.status().ToString());
  REQUIRE(g.status().ok());
  CHECK(bytes.shape() == PartialShape({2, 4}));
  CHECK(back.shape() == PartialShape({2}));
  auto b = testing::Eval(g, bytes);
  REQUIRE(b.ok());
  CHECK(b->dtype() == DType::kUInt8);
  float one = 1.0f;
  unsigned char want[4];
  std::memcpy(want, &one, 4);
  for (int i = 0; i < 4; ++i) CHECK(b->data<uint8_t>()[i] == want[i]);
  auto r = testing::Eval(g, back);
  REQUIRE(r.ok());
  CHECK(r->ToVector<float>() == std::vector<float>{1.0f, -2.5f});
  auto s = testing::Eval(g, same);
  REQUIRE(s.ok());
  int32_t bits;
  std::memcpy(&bits, &one, 4);
  CHECK(s->data<int32_t>()[0] == bits);

  Graph bad;
  auto u = ops::Const(bad, Tensor::FromVector<uint8_t>({1, 2, 3}, {3}));
  bad.Add1("Bitcast", {u}, to_f32);
  REQUIRE_FALSE(bad.status().ok());
  CHECK(bad.status().message().find("needs a last dimension of 4, got shape [3]") != std::string::npos);
  Graph bad2;
  bad2.Add1("Bitcast", {ops::Const(bad2, Tensor::FromBools({true}, {1}))}, to_u8);
  REQUIRE_FALSE(bad2.status().ok());
  CHECK(bad2.status().message().find("bool cannot be bitcast") != std::string::npos);
}
