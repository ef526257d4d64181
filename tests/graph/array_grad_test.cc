// The Array ops' gradient checks, and value tests of the gradient paths taken
// when shapes are only known at run time (the checker feeds fully known shapes).
#include <catch2/catch.hpp>

#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"
#include "tests/support/gradient_checker.h"

namespace sf::testing {

void AddArrayGradChecks(GradCheckTable& t) {
  using X = const std::vector<Output>&;
  using A = ops::StridedSliceAttrs;
  t.push_back({"Transpose", "3-D perm", {{2, 3, 4}},
               [](Graph& g, X x) { return ops::Transpose(g, x[0], {2, 0, 1}); }});
  t.push_back({"Transpose", "matrix", {{3, 2}},
               [](Graph& g, X x) { return ops::Transpose(g, x[0], {1, 0}); }});
  t.push_back({"Concat", "axis 1", {{2, 3}, {2, 2}},
               [](Graph& g, X x) { return ops::Concat(g, {x[0], x[1]}, 1); }});
  t.push_back({"Concat", "three inputs, axis 0, one used twice", {{1, 3}, {2, 3}},
               [](Graph& g, X x) { return ops::Concat(g, {x[0], x[1], x[0]}, 0); }});
  t.push_back({"Split", "three parts, one unused", {{2, 6}},
               [](Graph& g, X x) {
                 auto p = ops::Split(g, x[0], 3, 1);
                 return ops::Concat(g, {p[2], p[0]}, 0);
               }});
  t.push_back({"Slice", "size -1", {{3, 4}},
               [](Graph& g, X x) { return ops::Slice(g, x[0], {1, 1}, {2, -1}); }});
  t.push_back({"StridedSlice", "negative strides", {{4, 5}},
               [](Graph& g, X x) { return ops::StridedSlice(g, x[0], {-1, 0}, {0, 5}, {-2, 2}, A{1, 0, 0}); }});
  t.push_back({"StridedSlice", "shrink and end mask", {{3, 4}},
               [](Graph& g, X x) { return ops::StridedSlice(g, x[0], {1, 1}, {2, 0}, {1, 1}, A{0, 2, 1}); }});
  t.push_back({"Tile", "2x3 tiles", {{2, 3}},
               [](Graph& g, X x) { return ops::Tile(g, x[0], {2, 3}); }});
  t.push_back({"Pad", "uneven", {{2, 3}},
               [](Graph& g, X x) { return ops::Pad(g, x[0], {1, 0, 2, 1}); }});
  t.push_back({"Pad", "REFLECT, edges folded back twice", {{3, 4}},
               [](Graph& g, X x) { return ops::Pad(g, x[0], {2, 1, 3, 0}, "REFLECT"); }});
  t.push_back({"Pad", "SYMMETRIC, a padding as wide as its dim", {{2, 3}},
               [](Graph& g, X x) { return ops::Pad(g, x[0], {2, 1, 0, 3}, "SYMMETRIC"); }});
  t.push_back({"MirrorPadGrad", "the gradient of a REFLECT pad", {{5, 6}},
               [](Graph& g, X x) {
                 AttrMap a;
                 a.Set("paddings", std::vector<int64_t>{1, 1, 2, 1});
                 a.Set("mode", std::string("REFLECT"));
                 return g.Add1("MirrorPadGrad", {x[0]}, a);
               }});
  t.push_back({"Gather", "repeated int64 indices", {{5, 3}},
               [](Graph& g, X x) {
                 return ops::Gather(g, x[0], ops::Const(g, Tensor::FromVector<int64_t>({4, 0, 4, 2}, {2, 2})));
               }});
  t.push_back({"UnsortedSegmentSum", "repeated and missing segments, ids a [2, 2] prefix", {{2, 2, 3}},
               [](Graph& g, X x) {
                 return ops::UnsortedSegmentSum(g, x[0], ops::Const(g, Tensor::FromVector<int32_t>({3, 0, 3, 1}, {2, 2})),
                                                ops::Const(g, int32_t{5}));
               }});
}

}  // namespace sf::testing

using namespace sf;

namespace {

// d(sum(y * seed))/d(xs) evaluated with feeds.
std::vector<std::vector<double>> GradValues(Graph& g, Output y, const std::vector<double>& seed,
                                            const Shape& seed_shape, const std::vector<Output>& xs,
                                            const testing::Feeds& feeds) {
  auto dy = ops::Const(g, Tensor::FromVector(seed, seed_shape));
  auto grads = Gradients(g, {y}, xs, {dy});
  INFO(grads.status().ToString());
  REQUIRE(grads.ok());
  auto r = testing::EvalGraph(g, feeds, *grads);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  std::vector<std::vector<double>> out;
  for (const Tensor& t : *r) out.push_back(t.ToVector<double>());
  return out;
}

Tensor D(const std::vector<double>& v, const Shape& s) { return Tensor::FromVector(v, s); }

}  // namespace

TEST_CASE("A mirrored pad's gradient folds the padding back onto what it copies", "[array][gradients]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, {-1}, "x");
  const testing::Feeds feeds{{x, D({1, 2, 3}, {3})}};
  // REFLECT (2,2) reads x as [2,1,0,1,2,1,0]; SYMMETRIC (1,1) as [0,0,1,2,2].
  auto reflect = GradValues(g, ops::Pad(g, x, {2, 2}, "REFLECT"), {1, 10, 100, 1000, 1e4, 1e5, 1e6}, {7},
                            {x}, feeds);
  CHECK(reflect[0] == std::vector<double>{100 + 1e6, 10 + 1000 + 1e5, 1 + 1e4});
  auto symmetric = GradValues(g, ops::Pad(g, x, {1, 1}, "SYMMETRIC"), {1, 10, 100, 1000, 1e4}, {5},
                              {x}, feeds);
  CHECK(symmetric[0] == std::vector<double>{11, 100, 1000 + 1e4});
}

TEST_CASE("Array gradients with run-time shapes", "[array][gradients]") {
  SECTION("Concat along an unknown dim") {
    Graph g;
    auto p = ops::Placeholder(g, DType::kFloat64, {-1, 2}, "p");
    auto q = ops::Placeholder(g, DType::kFloat64, {1, 2}, "q");
    auto r = GradValues(g, ops::Concat(g, {p, q}, 0), {1, 2, 3, 4, 5, 6}, {3, 2}, {p, q},
                        {{p, D({0, 0, 0, 0}, {2, 2})}, {q, D({0, 0}, {1, 2})}});
    CHECK(r[0] == std::vector<double>{1, 2, 3, 4});
    CHECK(r[1] == std::vector<double>{5, 6});
  }
  SECTION("Slice of an unknown dim") {
    Graph g;
    auto p = ops::Placeholder(g, DType::kFloat64, {-1, 3}, "p");
    auto r = GradValues(g, ops::Slice(g, p, {1, 0}, {-1, 2}), {1, 2, 3, 4}, {2, 2}, {p},
                        {{p, D(std::vector<double>(9, 0), {3, 3})}});
    CHECK(r[0] == std::vector<double>{0, 0, 0, 1, 2, 0, 3, 4, 0});
  }
  SECTION("StridedSlice reversed with stride 2") {
    Graph g;
    auto p = ops::Placeholder(g, DType::kFloat64, {-1}, "p");
    auto y = ops::StridedSlice(g, p, {0}, {0}, {-2}, ops::StridedSliceAttrs{1, 1, 0});
    auto r = GradValues(g, y, {1, 2, 3}, {3}, {p}, {{p, D({0, 0, 0, 0, 0}, {5})}});
    CHECK(r[0] == std::vector<double>{3, 0, 2, 0, 1});
  }
  SECTION("Tile of an unknown dim") {
    Graph g;
    auto p = ops::Placeholder(g, DType::kFloat64, {-1, 2}, "p");
    auto r = GradValues(g, ops::Tile(g, p, {2, 1}), {1, 2, 3, 4}, {2, 2}, {p}, {{p, D({0, 0}, {1, 2})}});
    CHECK(r[0] == std::vector<double>{4, 6});
  }
  SECTION("Pad of an unknown dim") {
    Graph g;
    auto p = ops::Placeholder(g, DType::kFloat64, {-1, 2}, "p");
    auto r = GradValues(g, ops::Pad(g, p, {1, 1, 0, 1}), {1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3}, {p},
                        {{p, D({0, 0}, {1, 2})}});
    CHECK(r[0] == std::vector<double>{4, 5});
  }
  SECTION("Gather from params with an unknown row count") {
    Graph g;
    auto p = ops::Placeholder(g, DType::kFloat64, {-1, 2}, "p");
    auto y = ops::Gather(g, p, ops::Const(g, std::vector<int32_t>{2, 0, 2}));
    auto r = GradValues(g, y, {1, 2, 3, 4, 5, 6}, {3, 2}, {p}, {{p, D(std::vector<double>(6, 0), {3, 2})}});
    CHECK(r[0] == std::vector<double>{3, 4, 0, 0, 6, 8});
  }
  SECTION("Split with one output used") {
    Graph g;
    auto p = ops::Placeholder(g, DType::kFloat64, {2, 4}, "p");
    auto parts = ops::Split(g, p, 2, 1);
    auto r = GradValues(g, parts[1], {1, 2, 3, 4}, {2, 2}, {p}, {{p, D(std::vector<double>(8, 0), {2, 4})}});
    CHECK(r[0] == std::vector<double>{0, 0, 1, 2, 0, 0, 3, 4});
  }
  SECTION("Transpose") {
    Graph g;
    auto p = ops::Placeholder(g, DType::kFloat64, {-1, 3}, "p");
    auto r = GradValues(g, ops::Transpose(g, p, {1, 0}), {1, 2, 3, 4, 5, 6}, {3, 2}, {p},
                        {{p, D(std::vector<double>(6, 0), {2, 3})}});
    CHECK(r[0] == std::vector<double>{1, 3, 5, 2, 4, 6});
  }
}
