#include <catch2/catch.hpp>

#include <numeric>

#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"

using namespace sf;

namespace {

// A float32 constant of `shape` holding 0, 1, 2, ...
Output Iota(Graph& g, const Shape& shape) {
  std::vector<float> v(NumElements(shape));
  std::iota(v.begin(), v.end(), 0.0f);
  return ops::Const(g, v, shape);
}

// Evaluates y and checks its shape and values.
void CheckValues(const Graph& g, Output y, const Shape& shape, const std::vector<float>& want,
                 const testing::Feeds& feeds = {}) {
  INFO(g.status().ToString());
  REQUIRE(g.status().ok());
  auto r = testing::Eval(g, y, feeds);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->shape() == shape);
  CHECK(r->ToVector<float>() == want);
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("Transpose permutes dims", "[array]") {
  Graph g;
  auto x = Iota(g, {2, 3});
  CheckValues(g, ops::Transpose(g, x, {1, 0}), {3, 2}, {0, 3, 1, 4, 2, 5});
  CheckValues(g, ops::Transpose(g, x, {0, 1}), {2, 3}, {0, 1, 2, 3, 4, 5});

  auto x3 = Iota(g, {2, 3, 4});
  std::vector<float> want;  // out[k][i][j] = x[i][j][k]
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want.push_back(i * 12 + j * 4 + k);
  CheckValues(g, ops::Transpose(g, x3, {2, 0, 1}), {4, 2, 3}, want);

  auto xi = ops::Const(g, Tensor::FromVector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3}));
  auto r = testing::Eval(g, ops::Transpose(g, xi, {1, 0}));
  REQUIRE(r.ok());
  CHECK(r->ToVector<int32_t>() == std::vector<int32_t>{1, 4, 2, 5, 3, 6});

  Graph bad;
  ops::Transpose(bad, Iota(bad, {2, 3}), {0, 0});
  REQUIRE_FALSE(bad.status().ok());
  CHECK(Contains(bad.status().message(), "permutation"));
}

TEST_CASE("Transpose of a large tensor matches the reference", "[array]") {
  Graph g;
  auto x = Iota(g, {64, 48, 20});
  std::vector<float> want;
  for (int k = 0; k < 20; ++k)
    for (int i = 0; i < 64; ++i)
      for (int j = 0; j < 48; ++j) want.push_back(i * 960 + j * 20 + k);
  CheckValues(g, ops::Transpose(g, x, {2, 0, 1}), {20, 64, 48}, want);
}

TEST_CASE("Concat joins along an axis and checks shapes at build time", "[array]") {
  Graph g;
  auto a = ops::Const(g, {1, 2, 3, 4}, {2, 2});
  auto b = ops::Const(g, {5, 6}, {2, 1});
  auto c = ops::Const(g, {7, 8}, {1, 2});
  CheckValues(g, ops::Concat(g, {a, b}, 1), {2, 3}, {1, 2, 5, 3, 4, 6});
  CheckValues(g, ops::Concat(g, {a, b}, -1), {2, 3}, {1, 2, 5, 3, 4, 6});
  CheckValues(g, ops::Concat(g, {a, c}, 0), {3, 2}, {1, 2, 3, 4, 7, 8});
  CheckValues(g, ops::Concat(g, {a}, 0), {2, 2}, {1, 2, 3, 4});

  auto p = ops::Placeholder(g, DType::kFloat32, {-1, 2}, "p");
  auto pc = ops::Concat(g, {p, a}, 0);
  REQUIRE(g.status().ok());
  CHECK(pc.shape() == PartialShape({-1, 2}));
  CheckValues(g, pc, {3, 2}, {9, 9, 1, 2, 3, 4}, {{p, Tensor::FromVector<float>({9, 9}, {1, 2})}});

  Graph bad;
  ops::Concat(bad, {ops::Const(bad, {1, 2, 3, 4}, {2, 2}), ops::Const(bad, std::vector<float>(9, 0), {3, 3})}, 1);
  REQUIRE_FALSE(bad.status().ok());
  CHECK(Contains(bad.status().message(), "[2,2]"));
  CHECK(Contains(bad.status().message(), "[3,3]"));

  Graph bad_rank;
  ops::Concat(bad_rank, {ops::Const(bad_rank, {1, 2, 3, 4}, {2, 2}), ops::Const(bad_rank, {1, 2}, {2})}, 0);
  REQUIRE_FALSE(bad_rank.status().ok());
  CHECK(Contains(bad_rank.status().message(), "[2,2]"));
  CHECK(Contains(bad_rank.status().message(), "[2]"));
}

TEST_CASE("Concat reports a run-time shape mismatch naming both shapes", "[array]") {
  Graph g;
  auto p = ops::Placeholder(g, DType::kFloat32, {2, -1}, "p");
  auto q = ops::Placeholder(g, DType::kFloat32, {-1, 3}, "q");
  auto c = ops::Concat(g, {p, q}, 0);
  REQUIRE(g.status().ok());
  auto r = testing::Eval(g, c, {{p, Tensor::Zeros(DType::kFloat32, {2, 2})},
                                {q, Tensor::Zeros(DType::kFloat32, {1, 3})}});
  REQUIRE_FALSE(r.ok());
  CHECK(Contains(r.status().message(), "[2,2]"));
  CHECK(Contains(r.status().message(), "[1,3]"));
}

TEST_CASE("Split cuts equal parts", "[array]") {
  Graph g;
  auto x = Iota(g, {2, 6});
  auto parts = ops::Split(g, x, 3, 1);
  REQUIRE(parts.size() == 3);
  CheckValues(g, parts[0], {2, 2}, {0, 1, 6, 7});
  CheckValues(g, parts[1], {2, 2}, {2, 3, 8, 9});
  CheckValues(g, parts[2], {2, 2}, {4, 5, 10, 11});
  auto rows = ops::Split(g, x, 2, 0);
  CheckValues(g, rows[0], {1, 6}, {0, 1, 2, 3, 4, 5});
  CheckValues(g, rows[1], {1, 6}, {6, 7, 8, 9, 10, 11});
  auto last = ops::Split(g, x, 2, -1);
  CheckValues(g, last[1], {2, 3}, {3, 4, 5, 9, 10, 11});

  Graph bad;
  ops::Split(bad, Iota(bad, {2, 5}), 2, 1);
  REQUIRE_FALSE(bad.status().ok());
  CHECK(Contains(bad.status().message(), "[2,5]"));
}

TEST_CASE("Slice takes a block; size -1 means to the end", "[array]") {
  Graph g;
  auto x = Iota(g, {3, 4});
  CheckValues(g, ops::Slice(g, x, {1, 1}, {2, -1}), {2, 3}, {5, 6, 7, 9, 10, 11});
  CheckValues(g, ops::Slice(g, x, {0, 2}, {3, 1}), {3, 1}, {2, 6, 10});
  CheckValues(g, ops::Slice(g, x, {2, 0}, {0, 4}), {0, 4}, {});

  Graph bad;
  ops::Slice(bad, Iota(bad, {3, 4}), {2, 0}, {2, 4});
  REQUIRE_FALSE(bad.status().ok());
  CHECK(Contains(bad.status().message(), "[3,4]"));
}

TEST_CASE("StridedSlice follows Python slicing", "[array]") {
  Graph g;
  auto v = Iota(g, {10});
  using A = ops::StridedSliceAttrs;
  // v[::-1]
  CheckValues(g, ops::StridedSlice(g, v, {0}, {0}, {-1}, A{1, 1, 0}), {10},
              {9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  // v[8:2:-2]
  CheckValues(g, ops::StridedSlice(g, v, {8}, {2}, {-2}), {3}, {8, 6, 4});
  // v[-1:-4:-1]
  CheckValues(g, ops::StridedSlice(g, v, {-1}, {-4}, {-1}), {3}, {9, 8, 7});
  // v[-3:]
  CheckValues(g, ops::StridedSlice(g, v, {-3}, {0}, {1}, A{0, 1, 0}), {3}, {7, 8, 9});
  // v[1:100:3] (end clamped)
  CheckValues(g, ops::StridedSlice(g, v, {1}, {100}, {3}), {3}, {1, 4, 7});
  // v[5:2] is empty
  CheckValues(g, ops::StridedSlice(g, v, {5}, {2}, {1}), {0}, {});
  // v[:-100:-3] with begin masked and end clamped before the start
  CheckValues(g, ops::StridedSlice(g, v, {0}, {-100}, {-3}, A{1, 0, 0}), {4}, {9, 6, 3, 0});

  auto m = Iota(g, {3, 4});
  // m[:, ::-2]
  CheckValues(g, ops::StridedSlice(g, m, {0, 0}, {0, 0}, {1, -2}, A{3, 3, 0}), {3, 2},
              {3, 1, 7, 5, 11, 9});
  // m[1] (shrink)
  CheckValues(g, ops::StridedSlice(g, m, {1, 0}, {2, 0}, {1, 1}, A{0, 2, 1}), {4}, {4, 5, 6, 7});
  // m[-1, 2] (shrink both: a scalar)
  CheckValues(g, ops::StridedSlice(g, m, {-1, 2}, {0, 0}, {1, 1}, A{0, 0, 3}), {}, {10});
  // m[1:3] (spec shorter than the rank)
  CheckValues(g, ops::StridedSlice(g, m, {1}, {3}, {1}), {2, 4}, {4, 5, 6, 7, 8, 9, 10, 11});
  // m[2:0:-1, 1:3]
  CheckValues(g, ops::StridedSlice(g, m, {2, 1}, {0, 3}, {-1, 1}), {2, 2}, {9, 10, 5, 6});

  // Unknown dims: the kernel resolves the slice on the fed shape.
  auto p = ops::Placeholder(g, DType::kFloat32, {-1}, "p");
  auto rev = ops::StridedSlice(g, p, {-2}, {0}, {-1}, A{0, 1, 0});
  CheckValues(g, rev, {3}, {3, 2, 1}, {{p, Tensor::FromVector<float>({1, 2, 3, 4})}});

  Graph zero;
  ops::StridedSlice(zero, Iota(zero, {4}), {0}, {4}, {0});
  REQUIRE_FALSE(zero.status().ok());
  CHECK(Contains(zero.status().message(), "stride"));

  Graph oob;
  ops::StridedSlice(oob, Iota(oob, {3, 4}), {5, 0}, {6, 0}, {1, 1}, A{0, 0, 1});
  REQUIRE_FALSE(oob.status().ok());
  CHECK(Contains(oob.status().message(), "index 5"));
}

TEST_CASE("Tile repeats along each axis", "[array]") {
  Graph g;
  auto x = Iota(g, {2, 3});
  CheckValues(g, ops::Tile(g, x, {2, 1}), {4, 3}, {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5});
  CheckValues(g, ops::Tile(g, x, {1, 2}), {2, 6}, {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  CheckValues(g, ops::Tile(g, x, {2, 2}), {4, 6},
              {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  CheckValues(g, ops::Tile(g, x, {0, 2}), {0, 6}, {});

  Graph bad;
  ops::Tile(bad, Iota(bad, {2, 3}), {2});
  REQUIRE_FALSE(bad.status().ok());
  CHECK(Contains(bad.status().message(), "[2,3]"));
}

TEST_CASE("Pad surrounds with zeros", "[array]") {
  Graph g;
  auto x = ops::Const(g, {1, 2, 3, 4}, {2, 2});
  CheckValues(g, ops::Pad(g, x, {1, 0, 0, 2}), {3, 4}, {0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0});
  CheckValues(g, ops::Pad(g, x, {0, 0, 1, 1}), {2, 4}, {0, 1, 2, 0, 0, 3, 4, 0});
  CheckValues(g, ops::Pad(g, ops::Const(g, {5}, {1}), {2, 1}), {4}, {0, 0, 5, 0});

  Graph bad;
  ops::Pad(bad, ops::Const(bad, {1, 2, 3, 4}, {2, 2}), {1, 1});
  REQUIRE_FALSE(bad.status().ok());
  CHECK(Contains(bad.status().message(), "[2,2]"));
}

TEST_CASE("Pad mirrors in REFLECT and SYMMETRIC mode, as TensorFlow", "[array]") {
  Graph g;
  auto x = ops::Const(g, {1, 2, 3, 4, 5, 6}, {2, 3});
  // tf.pad's documented examples.
  CheckValues(g, ops::Pad(g, x, {1, 1, 2, 2}, "REFLECT"), {4, 7},
              {6, 5, 4, 5, 6, 5, 4, 3, 2, 1, 2, 3, 2, 1, 6, 5, 4, 5, 6, 5, 4, 3, 2, 1, 2, 3, 2, 1});
  CheckValues(g, ops::Pad(g, x, {1, 1, 2, 2}, "SYMMETRIC"), {4, 7},
              {2, 1, 1, 2, 3, 3, 2, 2, 1, 1, 2, 3, 3, 2, 5, 4, 4, 5, 6, 6, 5, 5, 4, 4, 5, 6, 6, 5});
  auto v = ops::Const(g, {1, 2, 3}, {3});
  CheckValues(g, ops::Pad(g, v, {2, 2}, "REFLECT"), {7}, {3, 2, 1, 2, 3, 2, 1});
  CheckValues(g, ops::Pad(g, v, {3, 3}, "SYMMETRIC"), {9}, {3, 2, 1, 1, 2, 3, 3, 2, 1});
  CheckValues(g, ops::Pad(g, v, {0, 0}, "REFLECT"), {3}, {1, 2, 3});
  // A padding of 0 is allowed on an empty dim in any mode.
  CheckValues(g, ops::Pad(g, ops::Zeros(g, DType::kFloat32, {2, 0}), {1, 1, 0, 0}, "REFLECT"), {4, 0}, {});

  auto ints = ops::Const(g, Tensor::FromVector<int64_t>({7, 8}, {2}));
  auto r = testing::Eval(g, ops::Pad(g, ints, {1, 1}, "SYMMETRIC"));
  REQUIRE(r.ok());
  CHECK(r->ToVector<int64_t>() == std::vector<int64_t>{7, 7, 8, 8});
}

TEST_CASE("Pad refuses a mirror wider than its dim, naming the node", "[array]") {
  auto refused = [](const std::string& mode, std::vector<int64_t> paddings, const Shape& shape) {
    Graph g;
    ops::Pad(g, ops::Zeros(g, DType::kFloat32, shape), paddings, mode);
    return g.status();
  };
  Status s = refused("REFLECT", {0, 0, 3, 0}, {2, 3});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(Contains(s.message(), "node 'Pad'"));
  CHECK(Contains(s.message(), "REFLECT padding 3 of dim 1 (size 3) must be < the dim's size"));
  CHECK(refused("SYMMETRIC", {0, 0, 3, 0}, {2, 3}).ok());
  s = refused("SYMMETRIC", {0, 4, 0, 0}, {2, 3});
  CHECK(Contains(s.message(), "SYMMETRIC padding 4 of dim 0 (size 2) must be <= the dim's size"));
  CHECK_FALSE(refused("SYMMETRIC", {1, 0}, {0}).ok());
  s = refused("WRAP", {1, 1}, {3});
  CHECK(Contains(s.message(), "node 'Pad'"));
  CHECK(Contains(s.message(), "mode must be CONSTANT, REFLECT or SYMMETRIC, got 'WRAP'"));

  // Dims known only at run time: the kernel refuses it, naming the node.
  Graph g;
  auto p = ops::Placeholder(g, DType::kFloat32, {-1}, "p");
  auto y = ops::Pad(g, p, {2, 0}, "REFLECT");
  REQUIRE(g.status().ok());
  auto r = testing::Eval(g, y, {{p, Tensor::FromVector<float>({1, 2})}});
  REQUIRE_FALSE(r.ok());
  CHECK(Contains(r.status().message(), "node 'Pad'"));
  CHECK(Contains(r.status().message(), "REFLECT padding 2 of dim 0 (size 2)"));
}

TEST_CASE("Gather copies rows and rejects bad indices", "[array]") {
  Graph g;
  auto params = Iota(g, {4, 2});
  auto i32 = ops::Const(g, std::vector<int32_t>{3, 0, 3});
  CheckValues(g, ops::Gather(g, params, i32), {3, 2}, {6, 7, 0, 1, 6, 7});
  auto i64 = ops::Const(g, Tensor::FromVector<int64_t>({1, 2, 3, 0}, {2, 2}));
  CheckValues(g, ops::Gather(g, params, i64), {2, 2, 2}, {2, 3, 4, 5, 6, 7, 0, 1});
  auto vec = ops::Const(g, {10, 11, 12, 13, 14}, {5});
  CheckValues(g, ops::Gather(g, vec, ops::Const(g, std::vector<int32_t>{4, 0})), {2}, {14, 10});
  auto scalar_index = ops::Const(g, int64_t{2});
  CheckValues(g, ops::Gather(g, params, scalar_index), {2}, {4, 5});

  auto ids = ops::Placeholder(g, DType::kInt32, {-1}, "ids");
  auto rows = ops::Gather(g, params, ids);
  REQUIRE(g.status().ok());
  CHECK(rows.shape() == PartialShape({-1, 2}));
  auto r = testing::Eval(g, rows, {{ids, Tensor::FromVector<int32_t>({1, 7})}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(Contains(r.status().message(), "index 7"));
  CHECK(Contains(r.status().message(), "4 rows"));
  r = testing::Eval(g, rows, {{ids, Tensor::FromVector<int32_t>({-1})}});
  REQUIRE_FALSE(r.ok());
  CHECK(Contains(r.status().message(), "index -1"));

  Graph bad;
  ops::Gather(bad, Iota(bad, {4, 2}), Iota(bad, {2}));
  REQUIRE_FALSE(bad.status().ok());
  CHECK(Contains(bad.status().message(), "int32 or int64"));
}

TEST_CASE("Gather of many wide rows (parallel path)", "[array]") {
  Graph g;
  auto params = Iota(g, {100, 64});
  std::vector<int32_t> idx;
  for (int i = 0; i < 1000; ++i) idx.push_back((i * 37) % 100);
  auto r = testing::Eval(g, ops::Gather(g, params, ops::Const(g, idx)));
  REQUIRE(r.ok());
  REQUIRE(r->shape() == Shape{1000, 64});
  bool ok = true;
  for (int i = 0; i < 1000; ++i)
    for (int j = 0; j < 64; ++j) ok = ok && r->data<float>()[i * 64 + j] == idx[i] * 64 + j;
  CHECK(ok);
}

TEST_CASE("OneHot takes uint8 indices (MNIST's labels) as TensorFlow; int8 is refused by name", "[array]") {
  Graph g;
  auto idx = ops::Const(g, Tensor::FromVector<uint8_t>({3, 0, 255}, {3}));
  auto oh = ops::OneHot(g, idx, 4, DType::kUInt8);
  REQUIRE(g.status().ok());
  auto r = testing::Eval(g, oh);
  REQUIRE(r.ok());
  CHECK(r->dtype() == DType::kUInt8);
  CHECK(r->ToVector<int>() == std::vector<int>{0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0});  // 255: past depth, zeros
  Graph bad;
  ops::OneHot(bad, ops::Const(bad, Tensor::FromVector<int8_t>({1}, {1})), 3);
  REQUIRE_FALSE(bad.status().ok());
  CHECK(bad.status().message().find("indices must be uint8, int32 or int64, got int8") != std::string::npos);
}

TEST_CASE("OneHot marks each index", "[array]") {
  Graph g;
  auto idx = ops::Const(g, std::vector<int32_t>{0, 2, -1, 1});
  auto oh = ops::OneHot(g, idx, 3);
  CheckValues(g, oh, {4, 3}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0});
  auto oh64 = ops::OneHot(g, ops::Const(g, Tensor::FromVector<int64_t>({1, 5}, {2, 1})), 2,
                          DType::kFloat64, 5.0, -1.0);
  REQUIRE(g.status().ok());
  auto r = testing::Eval(g, oh64);
  REQUIRE(r.ok());
  CHECK(r->shape() == Shape{2, 1, 2});
  CHECK(r->ToVector<double>() == std::vector<double>{-1, 5, -1, -1});

  Graph bad;
  ops::OneHot(bad, Iota(bad, {2}), 3);
  REQUIRE_FALSE(bad.status().ok());
}

TEST_CASE("Gradient helper ops scatter into zeros", "[array]") {
  Graph g;
  auto dy = ops::Const(g, {1, 2, 3, 4, 5, 6}, {3, 2});
  auto idx = ops::Const(g, std::vector<int32_t>{3, 0, 3});
  auto gg = g.Add1("GatherGrad", {dy, idx, ops::Const(g, std::vector<int32_t>{4, 2})});
  CheckValues(g, gg, {4, 2}, {3, 4, 0, 0, 0, 0, 6, 8});

  AttrMap a;
  a.Set("begin", Shape{0});
  a.Set("end", Shape{0});
  a.Set("strides", Shape{-2});
  a.Set("begin_mask", int64_t{1});
  a.Set("end_mask", int64_t{1});
  a.Set("shrink_axis_mask", int64_t{0});
  auto sg = g.Add1("StridedSliceGrad", {ops::Const(g, {1, 2, 3}, {3}), ops::Const(g, std::vector<int32_t>{5})}, a);
  CheckValues(g, sg, {5}, {3, 0, 2, 0, 1});

  AttrMap ca;
  ca.Set("axis", int64_t{1});
  int id = g.AddNode("ConcatGrad", {Iota(g, {2, 3}), ops::Const(g, std::vector<int32_t>{2, 2}),
                                    ops::Const(g, std::vector<int32_t>{2, 1})}, ca);
  REQUIRE(id >= 0);
  CheckValues(g, Output(&g, id, 0), {2, 2}, {0, 1, 3, 4});
  CheckValues(g, Output(&g, id, 1), {2, 1}, {2, 5});

  auto bad = g.Add1("GatherGrad", {dy, ops::Const(g, std::vector<int32_t>{3, 0, 9}),
                                   ops::Const(g, std::vector<int32_t>{4, 2})});
  auto r = testing::Eval(g, bad);
  REQUIRE_FALSE(r.ok());
  CHECK(Contains(r.status().message(), "index 9"));
}

TEST_CASE("Large layout ops round-trip (parallel paths)", "[array]") {
  Graph g;
  auto x = Iota(g, {300, 200});
  auto padded = ops::Pad(g, x, {1, 2, 3, 0});
  auto back = ops::Slice(g, padded, {1, 3}, {300, 200});
  auto rev = ops::StridedSlice(g, ops::StridedSlice(g, x, {0, 0}, {0, 0}, {-1, -1}, {3, 3, 0}), {0, 0},
                               {0, 0}, {-1, -1}, {3, 3, 0});
  auto parts = ops::Split(g, ops::Concat(g, {x, x}, 1), 2, 1);
  auto tiled = ops::Tile(g, x, {2, 1});
  REQUIRE(g.status().ok());
  auto r = testing::EvalGraph(g, {}, {x, padded, back, rev, parts[1], tiled});
  REQUIRE(r.ok());
  const auto want = (*r)[0].ToVector<float>();
  CHECK((*r)[2].ToVector<float>() == want);
  CHECK((*r)[3].ToVector<float>() == want);
  CHECK((*r)[4].ToVector<float>() == want);
  auto tv = (*r)[5].ToVector<float>();
  CHECK(std::vector<float>(tv.begin() + want.size(), tv.end()) == want);
  const Tensor& p = (*r)[1];
  REQUIRE(p.shape() == Shape{303, 203});
  CHECK(p.data<float>()[0] == 0);
  CHECK(p.data<float>()[1 * 203 + 3] == 0);  // x[0][0]
  CHECK(p.data<float>()[1 * 203 + 4] == 1);  // x[0][1]
  CHECK(p.data<float>()[300 * 203 + 202] == 299 * 200 + 199);
  CHECK(p.data<float>()[302 * 203 + 202] == 0);
}

TEST_CASE("Array shape functions accept an unknown rank", "[array]") {
  Graph g;
  auto p = ops::Placeholder(g, DType::kFloat32, PartialShape(), "p");
  auto t = ops::Transpose(g, p, {1, 0});
  auto c = ops::Concat(g, {p, ops::Const(g, {1, 2}, {1, 2})}, 0);
  auto s = ops::Slice(g, p, {0, 1}, {-1, 1});
  auto ss = ops::StridedSlice(g, p, {0}, {1}, {1});
  auto tl = ops::Tile(g, p, {1, 2});
  auto pd = ops::Pad(g, p, {0, 1, 0, 0});
  auto ga = ops::Gather(g, p, ops::Const(g, std::vector<int32_t>{1}));
  auto sp = ops::Split(g, p, 2, 0);
  REQUIRE(g.status().ok());
  CHECK(t.shape() == PartialShape({-1, -1}));
  CHECK(c.shape() == PartialShape({-1, 2}));
  CHECK(s.shape() == PartialShape({-1, 1}));
  CHECK_FALSE(ss.shape().rank_known());
  CHECK(tl.shape() == PartialShape({-1, -1}));
  CHECK(pd.shape() == PartialShape({-1, -1}));
  CHECK_FALSE(ga.shape().rank_known());
  CHECK_FALSE(sp[0].shape().rank_known());
  auto r = testing::EvalGraph(g, {{p, Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2})}},
                              {t, c, s, ss, tl, pd, ga, sp[1]});
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<float>() == std::vector<float>{1, 3, 2, 4});
  CHECK((*r)[1].ToVector<float>() == std::vector<float>{1, 2, 3, 4, 1, 2});
  CHECK((*r)[2].ToVector<float>() == std::vector<float>{2, 4});
  CHECK((*r)[3].ToVector<float>() == std::vector<float>{1, 2});
  CHECK((*r)[4].ToVector<float>() == std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4});
  CHECK((*r)[5].ToVector<float>() == std::vector<float>{1, 2, 3, 4, 0, 0});
  CHECK((*r)[6].ToVector<float>() == std::vector<float>{3, 4});
  CHECK((*r)[7].ToVector<float>() == std::vector<float>{3, 4});
}

TEST_CASE("Layout ops move any dtype", "[array]") {
  Graph g;
  auto b = ops::Const(g, Tensor::FromBools({true, false, false, true, true, false}, {2, 3}));
  auto i64 = ops::Const(g, Tensor::FromVector<int64_t>({1, 2, 3, 4}, {2, 2}));
  auto d = ops::Const(g, Tensor::FromVector<double>({1.5, -2.5}, {1, 2}));
  auto r = testing::EvalGraph(g, {}, {ops::Transpose(g, b, {1, 0}), ops::Concat(g, {i64, i64}, 1),
                                      ops::Tile(g, d, {2, 1}), ops::Pad(g, i64, {0, 0, 1, 0})});
  REQUIRE(r.ok());
  CHECK((*r)[0].dtype() == DType::kBool);
  CHECK((*r)[0].ToVector<int>() == std::vector<int>{1, 1, 0, 1, 0, 0});
  CHECK((*r)[1].ToVector<int64_t>() == std::vector<int64_t>{1, 2, 1, 2, 3, 4, 3, 4});
  CHECK((*r)[2].ToVector<double>() == std::vector<double>{1.5, -2.5, 1.5, -2.5});
  CHECK((*r)[3].ToVector<int64_t>() == std::vector<int64_t>{0, 1, 2, 0, 3, 4});
}
