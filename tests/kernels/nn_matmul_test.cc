// MatMul and BatchMatMul kernels against naive loops, at sizes that take the
// parallel GEMM path, for every transpose combination.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"
#include "tests/support/random_values.h"

using namespace sf;

namespace {

using testing::Random;

// Element (i, j) of op(M) for a row-major M of `cols` columns.
float At(const std::vector<float>& m, int64_t cols, bool t, int64_t i, int64_t j) {
  return t ? m[j * cols + i] : m[i * cols + j];
}

}  // namespace

TEST_CASE("MatMul matches a naive product for every transpose combination", "[nn][matmul]") {
  for (auto [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {3, 4, 5}, {128, 784, 64}, {300, 70, 40}, {17, 130, 260}, {1, 64, 1000}}) {
    for (int flags = 0; flags < 4; ++flags) {
      const bool ta = flags & 1, tb = flags & 2;
      INFO("m=" << m << " k=" << k << " n=" << n << " ta=" << ta << " tb=" << tb);
      auto a = Random(m * k, 1), b = Random(k * n, 2);
      const int64_t acols = ta ? m : k, bcols = tb ? k : n;
      Graph g;
      auto ao = ops::Const(g, a, ta ? Shape{k, m} : Shape{m, k});
      auto bo = ops::Const(g, b, tb ? Shape{n, k} : Shape{k, n});
      auto c = ops::MatMul(g, ao, bo, {ta, tb});
      REQUIRE(g.status().ok());
      CHECK(c.shape() == PartialShape({m, n}));
      auto r = testing::Eval(g, c);
      REQUIRE(r.ok());
      auto got = r->ToVector<float>();
      double worst = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t p = 0; p < k; ++p) want += double(At(a, acols, ta, i, p)) * At(b, bcols, tb, p, j);
          worst = std::max(worst, std::abs(got[i * n + j] - want));
        }
      CHECK(worst < 1e-3);
    }
  }
}

TEST_CASE("BatchMatMul multiplies each batch and broadcasts batch dims", "[nn][matmul]") {
  for (auto [sa, sb] : std::vector<std::pair<Shape, Shape>>{
           {{2, 3, 4, 5}, {2, 3, 5, 6}}, {{4, 3, 5}, {5, 2}}, {{2, 1, 3, 4}, {1, 5, 4, 2}},
           {{1, 200, 100}, {1, 100, 300}}}) {
    INFO("a " << ShapeString(sa) << " b " << ShapeString(sb));
    auto a = Random(NumElements(sa), 3), b = Random(NumElements(sb), 4);
    Graph g;
    auto c = ops::BatchMatMul(g, ops::Const(g, a, sa), ops::Const(g, b, sb));
    REQUIRE(g.status().ok());
    auto r = testing::Eval(g, c);
    REQUIRE(r.ok());
    // Reference: broadcast batch index by index.
    const int ra = sa.size(), rb = sb.size();
    const int64_t m = sa[ra - 2], k = sa[ra - 1], n = sb[rb - 1];
    const int rank = std::max(ra, rb) - 2;
    Shape pa(rank, 1), pb(rank, 1), out(rank);
    for (int i = 0; i < ra - 2; ++i) pa[rank - (ra - 2) + i] = sa[i];
    for (int i = 0; i < rb - 2; ++i) pb[rank - (rb - 2) + i] = sb[i];
    for (int i = 0; i < rank; ++i) out[i] = std::max(pa[i], pb[i]);
    Shape want_shape = out;
    want_shape.push_back(m);
    want_shape.push_back(n);
    REQUIRE(r->shape() == want_shape);
    auto got = r->ToVector<float>();
    double worst = 0;
    for (int64_t bi = 0; bi < NumElements(out); ++bi) {
      int64_t rem = bi, ia = 0, ib = 0, stra = 1, strb = 1;
      for (int i = rank - 1; i >= 0; --i) {
        const int64_t idx = rem % out[i];
        rem /= out[i];
        ia += (pa[i] == 1 ? 0 : idx) * stra;
        ib += (pb[i] == 1 ? 0 : idx) * strb;
        stra *= pa[i];
        strb *= pb[i];
      }
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t p = 0; p < k; ++p)
            want += double(a[ia * m * k + i * k + p]) * b[ib * k * n + p * n + j];
          worst = std::max(worst, std::abs(got[bi * m * n + i * n + j] - want));
        }
    }
    CHECK(worst < 1e-3);
  }
}

TEST_CASE("BatchMatMul reports mismatched inner and batch dims", "[nn][matmul]") {
  Graph g;
  ops::BatchMatMul(g, ops::Placeholder(g, DType::kFloat32, {2, 3, 4}),
                   ops::Placeholder(g, DType::kFloat32, {3, 4, 2}));
  CHECK(g.status().message().find("batch dimensions") != std::string::npos);
  Graph g2;
  ops::BatchMatMul(g2, ops::Placeholder(g2, DType::kFloat32, {2, 3, 4}),
                   ops::Placeholder(g2, DType::kFloat32, {2, 5, 2}));
  CHECK(g2.status().message().find("inner dimensions") != std::string::npos);
}

TEST_CASE("FusedMatMul matches MatMul + BiasAdd (+ Relu) in values and gradients", "[nn][matmul][fused]") {
  // Shapes of the MLP's layers (the parallel path), DLRM's (a short inner
  // dimension, an empty one, one output column) and small odd ones.
  for (auto [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {128, 784, 512}, {128, 256, 10}, {3, 5, 7}, {17, 130, 260}, {1, 64, 1000}, {512, 13, 512},
           {64, 0, 33}, {512, 256, 1}}) {
    for (int flags = 0; flags < 8; ++flags) {
      const bool ta = flags & 1, tb = flags & 2, relu = flags & 4;
      INFO("m=" << m << " k=" << k << " n=" << n << " ta=" << ta << " tb=" << tb << " relu=" << relu);
      Graph g;
      auto a = ops::Placeholder(g, DType::kFloat32, ta ? Shape{k, m} : Shape{m, k}, "a");
      auto b = ops::Placeholder(g, DType::kFloat32, tb ? Shape{n, k} : Shape{k, n}, "b");
      auto bias = ops::Placeholder(g, DType::kFloat32, {n}, "bias");
      auto fused = ops::FusedMatMul(g, a, b, bias, relu ? "relu" : "none", {ta, tb});
      auto z = ops::BiasAdd(g, ops::MatMul(g, a, b, {ta, tb}), bias);
      auto plain = relu ? ops::Relu(g, z) : z;
      // A weighted sum, so each output element gets its own gradient.
      auto r = ops::Const(g, Random(m * n, 7), {m, n});
      auto gf = Gradients(g, {ops::Sum(g, fused * r)}, {a, b, bias});
      auto gp = Gradients(g, {ops::Sum(g, plain * r)}, {a, b, bias});
      REQUIRE(gf.ok());
      REQUIRE(gp.ok());
      REQUIRE(g.status().ok());
      CHECK(fused.shape() == PartialShape({m, n}));
      testing::Feeds feeds = {{a, Tensor::FromVector<float>(Random(m * k, 1), a.shape().dims())},
                              {b, Tensor::FromVector<float>(Random(k * n, 2), b.shape().dims())},
                              {bias, Tensor::FromVector<float>(Random(n, 3), {n})}};
      std::vector<std::pair<Output, Output>> pairs = {{fused, plain}};
      for (int i = 0; i < 3; ++i) pairs.push_back({(*gf)[i], (*gp)[i]});
      for (size_t p = 0; p < pairs.size(); ++p) {
        INFO("pair " << p << " (0: values, 1-3: gradients of a, b, bias)");
        auto got = testing::Eval(g, pairs[p].first, feeds);
        auto want = testing::Eval(g, pairs[p].second, feeds);
        REQUIRE(got.ok());
        REQUIRE(want.ok());
        REQUIRE(got->shape() == want->shape());
        auto x = got->ToVector<float>(), y = want->ToVector<float>();
        double worst = 0;
        int64_t positive = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          worst = std::max(worst, double(std::abs(x[i] - y[i])) / (1.0 + std::abs(y[i])));
          positive += y[i] > 0;
        }
        CHECK(worst < 1e-4);  // the products split differently over threads; a missing term does not hide
        // Relu really cut: some of the outputs are 0, some not.
        if (p == 0 && relu && x.size() > 16) CHECK((positive > 0 && positive < int64_t(x.size())));
      }
    }
  }
}

TEST_CASE("FusedMatMul refuses a bad activation or bias naming the op", "[nn][matmul][fused]") {
  {
    Graph g;
    ops::FusedMatMul(g, ops::Const(g, Random(6, 1), {2, 3}), ops::Const(g, Random(12, 2), {3, 4}),
                     ops::Const(g, Random(4, 3), {4}), "tanh");
    REQUIRE_FALSE(g.status().ok());
    CHECK(g.status().message().find("activation") != std::string::npos);
  }
  {
    Graph g;
    ops::FusedMatMul(g, ops::Const(g, Random(6, 1), {2, 3}), ops::Const(g, Random(12, 2), {3, 4}),
                     ops::Const(g, Random(3, 3), {3}), "relu");
    REQUIRE_FALSE(g.status().ok());
    CHECK(g.status().message().find("bias") != std::string::npos);
  }
  {
    // An unknown bias shape passes the graph; the kernel refuses it.
    Graph g;
    auto bias = ops::Placeholder(g, DType::kFloat32, PartialShape::Unknown(), "bias");
    auto y = ops::FusedMatMul(g, ops::Const(g, Random(6, 1), {2, 3}), ops::Const(g, Random(12, 2), {3, 4}), bias);
    REQUIRE(g.status().ok());
    auto r = testing::Eval(g, y, {{bias, Tensor::FromVector<float>(Random(5, 3), {5})}});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("FusedMatMul bias") != std::string::npos);
  }
}
