// DotInteraction against naive loops (values and gradients), at batch sizes
// of several blocks, for widths with and without an unrolled kernel.
#include <catch2/catch.hpp>

#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"
#include "tests/support/random_values.h"

using namespace sf;

TEST_CASE("DotInteraction matches naive dot products, and its gradient the chain rule", "[nn][interaction]") {
  for (auto [n, m, d] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 3}, {7, 5, 16}, {300, 26, 16},
                                                                           {65, 4, 7}, {40, 3, 32}}) {
    INFO("n=" << n << " m=" << m << " d=" << d);
    auto xv = testing::Random(n * d, 1), sv = testing::Random(n * m * d, 2);
    const int64_t width = d + (m + 1) * m / 2;
    auto gv = testing::Random(n * width, 3);
    Graph g;
    auto x = ops::Const(g, xv, {n, d});
    auto s = ops::Const(g, sv, {n, m, d});
    auto y = ops::DotInteraction(g, x, s);
    REQUIRE(g.status().ok());
    CHECK(y.shape() == PartialShape({n, width}));
    // The loss sum(y * gv) has gradient gv at y.
    auto loss = ops::Sum(g, ops::Mul(g, y, ops::Const(g, gv, {n, width})));
    auto grads = Gradients(g, {loss}, {x, s});
    REQUIRE(grads.ok());
    auto r = testing::EvalGraph(g, {}, {y, (*grads)[0], (*grads)[1]});
    REQUIRE(r.ok());
    auto vec = [&](int64_t e, int64_t i) { return i == 0 ? &xv[e * d] : &sv[(e * m + i - 1) * d]; };
    std::vector<double> dx(n * d, 0), ds(n * m * d, 0);
    double worst_y = 0, worst_g = 0;
    for (int64_t e = 0; e < n; ++e) {
      const float* out = (*r)[0].data<float>() + e * width;
      const float* ge = gv.data() + e * width;
      for (int64_t k = 0; k < d; ++k) {
        worst_y = std::max(worst_y, double(std::abs(out[k] - xv[e * d + k])));
        dx[e * d + k] += ge[k];
      }
      int64_t p = d;
      for (int64_t i = 1; i <= m; ++i) {
        for (int64_t j = 0; j < i; ++j, ++p) {
          double dot = 0;
          for (int64_t k = 0; k < d; ++k) dot += double(vec(e, i)[k]) * vec(e, j)[k];
          worst_y = std::max(worst_y, std::abs(out[p] - dot));
          for (int64_t k = 0; k < d; ++k) {
            ds[(e * m + i - 1) * d + k] += ge[p] * vec(e, j)[k];
            (j == 0 ? dx[e * d + k] : ds[(e * m + j - 1) * d + k]) += ge[p] * vec(e, i)[k];
          }
        }
      }
    }
    for (int64_t i = 0; i < n * d; ++i) worst_g = std::max(worst_g, std::abs((*r)[1].data<float>()[i] - dx[i]));
    for (int64_t i = 0; i < n * m * d; ++i) worst_g = std::max(worst_g, std::abs((*r)[2].data<float>()[i] - ds[i]));
    CHECK(worst_y < 1e-4);
    CHECK(worst_g < 1e-4);
  }
}

TEST_CASE("DotInteraction refuses inputs that disagree, naming the op", "[nn][interaction]") {
  Graph g;
  ops::DotInteraction(g, ops::Const(g, testing::Random(6, 1), {2, 3}), ops::Const(g, testing::Random(16, 2), {2, 2, 4}));
  REQUIRE_FALSE(g.status().ok());
  CHECK(g.status().message().find("DotInteraction") != std::string::npos);
  CHECK(g.status().message().find("dim") != std::string::npos);
}
