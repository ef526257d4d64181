// Conv2D (and its backprops) and pooling kernels against naive reference loops,
// with sizes big enough to take the chunked and parallel paths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"
#include "tests/support/random_values.h"

using namespace sf;

namespace {

struct Geo {
  int64_t n, h, w, c, kh, kw, oc, sh, sw, oh, ow, pt, pl;
};

// TensorFlow's SAME/VALID geometry, written independently of the kernels.
Geo MakeGeo(const Shape& in, int64_t kh, int64_t kw, int64_t oc, int64_t sh, int64_t sw, bool same) {
  Geo g{in[0], in[1], in[2], in[3], kh, kw, oc, sh, sw, 0, 0, 0, 0};
  if (same) {
    g.oh = (g.h + sh - 1) / sh;
    g.ow = (g.w + sw - 1) / sw;
    g.pt = std::max<int64_t>(0, (g.oh - 1) * sh + kh - g.h) / 2;
    g.pl = std::max<int64_t>(0, (g.ow - 1) * sw + kw - g.w) / 2;
  } else {
    g.oh = (g.h - kh) / sh + 1;
    g.ow = (g.w - kw) / sw + 1;
  }
  return g;
}

using testing::Random;

// Calls f(n, oy, ox, ky, kx, iy, ix) for every valid (window cell, output) pair.
template <typename F>
void ForEachTap(const Geo& g, F f) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox)
        for (int64_t ky = 0; ky < g.kh; ++ky)
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t iy = oy * g.sh - g.pt + ky, ix = ox * g.sw - g.pl + kx;
            if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) f(n, oy, ox, ky, kx, iy, ix);
          }
}

void CheckClose(const std::vector<float>& got, const std::vector<double>& want, double tol = 1e-4) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  CHECK(worst < tol);
}

struct ConvCase {
  Shape in;
  int64_t kh, kw, oc, sh, sw;
  bool same;
};

}  // namespace

TEST_CASE("Conv2D and its backprops match naive loops", "[nn][conv]") {
  const std::vector<ConvCase> cases = {
      {{1, 5, 5, 2}, 3, 3, 3, 1, 1, true},  {{2, 7, 6, 3}, 3, 2, 4, 2, 2, true},
      {{2, 7, 6, 3}, 3, 3, 2, 2, 1, false}, {{3, 9, 9, 4}, 1, 1, 5, 1, 1, false},
      {{1, 8, 8, 2}, 5, 5, 3, 3, 3, true},  {{4, 20, 20, 8}, 3, 3, 16, 1, 1, true},
      {{2, 6, 6, 3}, 1, 1, 2, 2, 2, true},  {{1, 40, 40, 16}, 3, 3, 32, 1, 1, true},
  };
  for (const ConvCase& cc : cases) {
    const Geo geo = MakeGeo(cc.in, cc.kh, cc.kw, cc.oc, cc.sh, cc.sw, cc.same);
    INFO("input " << ShapeString(cc.in) << " kernel " << cc.kh << "x" << cc.kw << " strides "
                  << cc.sh << "," << cc.sw << (cc.same ? " SAME" : " VALID"));
    const Shape fshape{cc.kh, cc.kw, cc.in[3], cc.oc}, oshape{geo.n, geo.oh, geo.ow, cc.oc};
    auto x = Random(NumElements(cc.in), 1), f = Random(NumElements(fshape), 2);
    auto dy = Random(NumElements(oshape), 3);

    auto xi = [&](int64_t n, int64_t y, int64_t x_, int64_t c) { return ((n * geo.h + y) * geo.w + x_) * geo.c + c; };
    auto fi = [&](int64_t ky, int64_t kx, int64_t c, int64_t o) { return ((ky * geo.kw + kx) * geo.c + c) * geo.oc + o; };
    auto oi = [&](int64_t n, int64_t y, int64_t x_, int64_t o) { return ((n * geo.oh + y) * geo.ow + x_) * geo.oc + o; };
    std::vector<double> y_ref(NumElements(oshape)), dx_ref(x.size()), df_ref(f.size());
    ForEachTap(geo, [&](int64_t n, int64_t oy, int64_t ox, int64_t ky, int64_t kx, int64_t iy, int64_t ix) {
      for (int64_t c = 0; c < geo.c; ++c)
        for (int64_t o = 0; o < geo.oc; ++o) {
          y_ref[oi(n, oy, ox, o)] += double(x[xi(n, iy, ix, c)]) * f[fi(ky, kx, c, o)];
          dx_ref[xi(n, iy, ix, c)] += double(dy[oi(n, oy, ox, o)]) * f[fi(ky, kx, c, o)];
          df_ref[fi(ky, kx, c, o)] += double(x[xi(n, iy, ix, c)]) * dy[oi(n, oy, ox, o)];
        }
    });

    Graph g;
    ops::Conv2DAttrs a;
    a.strides = {1, cc.sh, cc.sw, 1};
    a.padding = cc.same ? "SAME" : "VALID";
    auto xo = ops::Const(g, x, cc.in), fo = ops::Const(g, f, fshape), dyo = ops::Const(g, dy, oshape);
    auto y = ops::Conv2D(g, xo, fo, a);
    AttrMap attrs;
    attrs.Set("strides", a.strides);
    attrs.Set("padding", a.padding);
    attrs.Set("T", DType::kFloat32);
    std::vector<int32_t> in_sizes(cc.in.begin(), cc.in.end()), f_sizes(fshape.begin(), fshape.end());
    auto dx = g.Add1("Conv2DBackpropInput", {ops::Const(g, in_sizes), fo, dyo}, attrs);
    auto df = g.Add1("Conv2DBackpropFilter", {xo, ops::Const(g, f_sizes), dyo}, attrs);
    REQUIRE(g.status().ok());
    CHECK(y.shape() == PartialShape(oshape));
    CHECK(dx.shape() == PartialShape(cc.in));
    CHECK(df.shape() == PartialShape(fshape));
    auto r = testing::EvalGraph(g, {}, {y, dx, df});
    REQUIRE(r.ok());
    CHECK((*r)[0].shape() == oshape);
    CheckClose((*r)[0].ToVector<float>(), y_ref);
    CheckClose((*r)[1].ToVector<float>(), dx_ref);
    CheckClose((*r)[2].ToVector<float>(), df_ref);
  }
}

TEST_CASE("Conv2D checks channels, ranks and padding", "[nn][conv]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {1, 5, 5, 2});
  auto f = ops::Placeholder(g, DType::kFloat32, {3, 3, 4, 3});
  ops::Conv2D(g, x, f);
  REQUIRE_FALSE(g.status().ok());
  CHECK(g.status().message().find("channels") != std::string::npos);
  CHECK(g.status().message().find("[1,5,5,2]") != std::string::npos);
  CHECK(g.status().message().find("[3,3,4,3]") != std::string::npos);

  Graph g2;
  auto x2 = ops::Placeholder(g2, DType::kFloat32, {1, 5, 5, 2});
  auto f2 = ops::Placeholder(g2, DType::kFloat32, {3, 3, 2, 3});
  ops::Conv2DAttrs a;
  a.padding = "FULL";
  ops::Conv2D(g2, x2, f2, a);
  CHECK(g2.status().message().find("padding") != std::string::npos);

  // Unknown channels at build time: the kernel reports the mismatch.
  Graph g3;
  auto x3 = ops::Placeholder(g3, DType::kFloat32, {-1, -1, -1, -1});
  auto f3 = ops::Placeholder(g3, DType::kFloat32, {3, 3, 2, 3});
  auto y3 = ops::Conv2D(g3, x3, f3);
  REQUIRE(g3.status().ok());
  auto r = testing::Eval(g3, y3, {{x3, Tensor::Zeros(DType::kFloat32, {1, 4, 4, 5})},
                                  {f3, Tensor::Zeros(DType::kFloat32, {3, 3, 2, 3})}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("channels 5") != std::string::npos);
}

TEST_CASE("Conv2D backprops check their sizes and gradient shapes", "[nn][conv]") {
  Graph g;
  auto f = ops::Const(g, std::vector<float>(3 * 3 * 2 * 3, 1.0f), {3, 3, 2, 3});
  auto dy = ops::Const(g, std::vector<float>(1 * 5 * 5 * 3, 1.0f), {1, 5, 5, 3});
  AttrMap attrs;
  attrs.Set("padding", std::string("SAME"));
  attrs.Set("T", DType::kFloat32);
  auto bad_sizes = g.Add1("Conv2DBackpropInput", {ops::Const(g, std::vector<int32_t>{1, 5, 5}), f, dy}, attrs);
  auto bad_dy = g.Add1("Conv2DBackpropInput", {ops::Const(g, std::vector<int32_t>{1, 6, 6, 2}), f, dy}, attrs);
  REQUIRE(g.status().ok());
  auto r = testing::Eval(g, bad_sizes);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("input_sizes") != std::string::npos);
  r = testing::Eval(g, bad_dy);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("expected [1,6,6,3]") != std::string::npos);
}

namespace {
struct PoolCase {
  Shape in;
  int64_t kh, kw, sh, sw;
  bool same;
};
}  // namespace

TEST_CASE("MaxPool, AvgPool and their gradients match naive loops", "[nn][pool]") {
  const std::vector<PoolCase> cases = {
      {{1, 4, 4, 1}, 2, 2, 2, 2, false}, {{2, 5, 5, 3}, 3, 3, 2, 2, true},
      {{2, 7, 6, 4}, 3, 2, 1, 2, false}, {{3, 16, 16, 32}, 2, 2, 2, 2, true},
      {{1, 5, 4, 2}, 2, 3, 1, 1, true},
  };
  for (const PoolCase& pc : cases) {
    const Geo geo = MakeGeo(pc.in, pc.kh, pc.kw, pc.in[3], pc.sh, pc.sw, pc.same);
    INFO("input " << ShapeString(pc.in) << " window " << pc.kh << "x" << pc.kw << " strides "
                  << pc.sh << "," << pc.sw << (pc.same ? " SAME" : " VALID"));
    const Shape oshape{geo.n, geo.oh, geo.ow, geo.c};
    // Distinct values so the max of each window is unique.
    std::vector<float> x(NumElements(pc.in));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 7919) % x.size()) / x.size();
    auto dy = Random(NumElements(oshape), 4);
    auto xi = [&](int64_t n, int64_t y, int64_t x_, int64_t c) { return ((n * geo.h + y) * geo.w + x_) * geo.c + c; };
    auto oi = [&](int64_t n, int64_t y, int64_t x_, int64_t c) { return ((n * geo.oh + y) * geo.ow + x_) * geo.c + c; };
    std::vector<double> mx(NumElements(oshape), -1e30), sum(mx.size()), cnt(mx.size());
    std::vector<int64_t> arg(mx.size(), -1);
    ForEachTap(geo, [&](int64_t n, int64_t oy, int64_t ox, int64_t, int64_t, int64_t iy, int64_t ix) {
      for (int64_t c = 0; c < geo.c; ++c) {
        const int64_t o = oi(n, oy, ox, c), i = xi(n, iy, ix, c);
        if (x[i] > mx[o]) mx[o] = x[i], arg[o] = i;
        sum[o] += x[i];
        cnt[o] += 1;
      }
    });
    std::vector<double> avg(mx.size()), dmax(x.size()), davg(x.size());
    for (size_t o = 0; o < mx.size(); ++o) {
      avg[o] = sum[o] / cnt[o];
      dmax[arg[o]] += dy[o];
    }
    ForEachTap(geo, [&](int64_t n, int64_t oy, int64_t ox, int64_t, int64_t, int64_t iy, int64_t ix) {
      for (int64_t c = 0; c < geo.c; ++c) davg[xi(n, iy, ix, c)] += dy[oi(n, oy, ox, c)] / cnt[oi(n, oy, ox, c)];
    });

    Graph g;
    ops::PoolAttrs a;
    a.ksize = {1, pc.kh, pc.kw, 1};
    a.strides = {1, pc.sh, pc.sw, 1};
    a.padding = pc.same ? "SAME" : "VALID";
    auto xo = ops::Const(g, x, pc.in), dyo = ops::Const(g, dy, oshape);
    auto ymax = ops::MaxPool(g, xo, a), yavg = ops::AvgPool(g, xo, a);
    AttrMap attrs;
    attrs.Set("ksize", a.ksize);
    attrs.Set("strides", a.strides);
    attrs.Set("padding", a.padding);
    attrs.Set("T", DType::kFloat32);
    std::vector<int32_t> in_sizes(pc.in.begin(), pc.in.end());
    auto gmax = g.Add1("MaxPoolGrad", {xo, ymax, dyo}, attrs);
    auto gavg = g.Add1("AvgPoolGrad", {ops::Const(g, in_sizes), dyo}, attrs);
    REQUIRE(g.status().ok());
    CHECK(ymax.shape() == PartialShape(oshape));
    auto r = testing::EvalGraph(g, {}, {ymax, yavg, gmax, gavg});
    REQUIRE(r.ok());
    CheckClose((*r)[0].ToVector<float>(), mx);
    CheckClose((*r)[1].ToVector<float>(), avg);
    CheckClose((*r)[2].ToVector<float>(), dmax);
    CheckClose((*r)[3].ToVector<float>(), davg);
  }
}

TEST_CASE("Pools give hand-computed values", "[nn][pool]") {
  Graph g;
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = float(i + 1);
  auto x = ops::Const(g, v, {1, 4, 4, 1});
  auto mp = ops::MaxPool(g, x), ap = ops::AvgPool(g, x);
  auto r = testing::EvalGraph(g, {}, {mp, ap});
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<float>() == std::vector<float>{6, 8, 14, 16});
  CHECK((*r)[1].ToVector<float>() == std::vector<float>{3.5f, 5.5f, 11.5f, 13.5f});

  Graph g2;
  auto x2 = ops::Placeholder(g2, DType::kFloat32, {1, 1, 1, 1});
  ops::MaxPool(g2, x2);  // a 2x2 VALID window does not fit a 1x1 image
  REQUIRE_FALSE(g2.status().ok());
  CHECK(g2.status().message().find("larger than the input") != std::string::npos);
}

TEST_CASE("FusedConv2D matches Conv2D + BiasAdd (+ Relu) in values and gradients", "[nn][conv][fused]") {
  struct Case {
    Shape in;
    int64_t k, oc, stride;
    std::string padding;
  };
  // The Fashion-MNIST CNN's layers (oneDNN, split over the pool), odd and strided ones.
  for (const Case& cc : std::vector<Case>{{{5, 28, 28, 1}, 5, 32, 1, "SAME"},
                                          {{6, 14, 14, 32}, 5, 64, 1, "SAME"},
                                          {{3, 11, 9, 5}, 3, 7, 2, "VALID"},
                                          {{2, 6, 6, 3}, 1, 4, 1, "SAME"}}) {
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      for (bool relu : {false, true}) {
        INFO("input " << ShapeString(cc.in) << " k " << cc.k << " oc " << cc.oc << " stride " << cc.stride << " "
                      << cc.padding << " " << DTypeName(dt) << " relu " << relu);
        Graph g;
        const Shape fshape{cc.k, cc.k, cc.in[3], cc.oc};
        auto cast = [&](std::vector<float> v, Shape s) {
          Tensor t = Tensor::FromVector<float>(v, s);
          return dt == DType::kFloat32 ? t : Tensor::FromVector<double>(std::vector<double>(v.begin(), v.end()), s);
        };
        auto x = ops::Placeholder(g, dt, cc.in, "x");
        auto f = ops::Placeholder(g, dt, fshape, "f");
        auto bias = ops::Placeholder(g, dt, {cc.oc}, "bias");
        const ops::Conv2DAttrs attrs{{1, cc.stride, cc.stride, 1}, cc.padding};
        auto fused = ops::FusedConv2D(g, x, f, bias, relu ? "relu" : "none", attrs);
        auto z = ops::BiasAdd(g, ops::Conv2D(g, x, f, attrs), bias);
        auto plain = relu ? ops::Relu(g, z) : z;
        REQUIRE(g.status().ok());
        const int64_t ny = NumElements(fused.shape().dims());
        REQUIRE(ny > 0);
        auto r = ops::Const(g, cast(Random(ny, 7), fused.shape().dims()));
        auto gf = Gradients(g, {ops::Sum(g, fused * r)}, {x, f, bias});
        auto gp = Gradients(g, {ops::Sum(g, plain * r)}, {x, f, bias});
        REQUIRE(gf.ok());
        REQUIRE(gp.ok());
        testing::Feeds feeds = {{x, cast(Random(NumElements(cc.in), 1), cc.in)},
                                {f, cast(Random(NumElements(fshape), 2), fshape)},
                                {bias, cast(Random(cc.oc, 3), {cc.oc})}};
        std::vector<std::pair<Output, Output>> pairs = {{fused, plain}};
        for (int i = 0; i < 3; ++i) pairs.push_back({(*gf)[i], (*gp)[i]});
        for (size_t p = 0; p < pairs.size(); ++p) {
          INFO("pair " << p << " (0: values, 1-3: gradients of x, f, bias)");
          auto got = testing::Eval(g, pairs[p].first, feeds);
          auto want = testing::Eval(g, pairs[p].second, feeds);
          REQUIRE(got.ok());
          REQUIRE(want.ok());
          REQUIRE(got->shape() == want->shape());
          auto a = got->ToVector<double>(), b = want->ToVector<double>();
          double worst = 0;
          int64_t positive = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            worst = std::max(worst, std::abs(a[i] - b[i]) / (1.0 + std::abs(b[i])));
            positive += b[i] > 0;
          }
          CHECK(worst < (dt == DType::kFloat32 ? 1e-4 : 1e-12));
          if (p == 0 && relu) CHECK((positive > 0 && positive < int64_t(a.size())));
        }
      }
    }
  }
}

TEST_CASE("FusedConv2D refuses a bad activation or bias naming the op", "[nn][conv][fused]") {
  auto x = [](Graph& g) { return ops::Const(g, Random(2 * 4 * 4 * 3, 1), {2, 4, 4, 3}); };
  auto f = [](Graph& g) { return ops::Const(g, Random(3 * 3 * 3 * 5, 2), {3, 3, 3, 5}); };
  {
    Graph g;
    ops::FusedConv2D(g, x(g), f(g), ops::Const(g, Random(5, 3), {5}), "tanh");
    REQUIRE_FALSE(g.status().ok());
    CHECK(g.status().message().find("activation") != std::string::npos);
  }
  {
    Graph g;
    ops::FusedConv2D(g, x(g), f(g), ops::Const(g, Random(4, 3), {4}), "relu");
    REQUIRE_FALSE(g.status().ok());
    CHECK(g.status().message().find("FusedConv2D bias") != std::string::npos);
  }
  {
    // An unknown bias shape passes the graph; the kernel refuses it.
    Graph g;
    auto bias = ops::Placeholder(g, DType::kFloat32, PartialShape::Unknown(), "bias");
    auto y = ops::FusedConv2D(g, x(g), f(g), bias, "relu");
    REQUIRE(g.status().ok());
    auto r = testing::Eval(g, y, {{bias, Tensor::FromVector<float>(Random(6, 3), {6})}});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("FusedConv2D bias") != std::string::npos);
  }
}

TEST_CASE("Conv2D and FusedConv2D of an empty spatial axis give the empty output, as TensorFlow", "[nn][conv]") {
  for (const char* padding : {"VALID", "SAME"}) {
    INFO(padding);
    Graph g;
    auto x = ops::Placeholder(g, DType::kFloat32, {1, 4, 0, 1}, "x");
    auto f = ops::Const(g, std::vector<float>{1, 2}, {1, 1, 1, 2});
    ops::Conv2DAttrs a;
    a.padding = padding;
    auto y = ops::Conv2D(g, x, f, a);
    AttrMap fa;
    fa.Set("padding", std::string(padding));
    auto fy = g.Add1("FusedConv2D", {x, f, ops::Const(g, std::vector<float>{0.5f, -1}, {2})}, fa);
    auto grads = Gradients(g, {ops::Sum(g, y)}, {x, f});
    REQUIRE(grads.ok());
    REQUIRE(g.status().ok());
    CHECK(y.shape() == PartialShape({1, 4, 0, 2}));
    auto r = testing::EvalGraph(g, {{x, Tensor::Zeros(DType::kFloat32, {1, 4, 0, 1})}}, {y, fy, (*grads)[0], (*grads)[1]});
    REQUIRE(r.ok());
    CHECK((*r)[0].shape() == Shape{1, 4, 0, 2});
    CHECK((*r)[1].shape() == Shape{1, 4, 0, 2});
    CHECK((*r)[2].shape() == Shape{1, 4, 0, 1});
    CHECK((*r)[3].ToVector<float>() == std::vector<float>{0, 0});
  }
  // A window larger than a non-empty input is still refused.
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {1, 4, 1, 1});
  ops::Conv2D(g, x, ops::Const(g, std::vector<float>{1, 2}, {1, 2, 1, 1}), ops::Conv2DAttrs{{1, 1, 1, 1}, "VALID"});
  CHECK(g.status().message().find("larger than the input") != std::string::npos);
}

TEST_CASE("Windowed ops get their registered defaults when a node leaves the attributes out", "[nn][conv]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {1, 5, 5, 1}, "x");
  auto f = ops::Const(g, std::vector<float>(9, 1.0f), {3, 3, 1, 1});
  // Conv2D's registered padding is SAME (it ran VALID when left out).
  auto c = g.Add1("Conv2D", {x, f});
  auto fc = g.Add1("FusedConv2D", {x, f, ops::Const(g, std::vector<float>{1}, {1})});  // activation "none"
  auto mp = g.Add1("MaxPool", {x});  // ksize and strides [1,2,2,1]
  REQUIRE(g.status().ok());
  CHECK(c.shape() == PartialShape({1, 5, 5, 1}));
  CHECK(g.node(c.node).attrs.Get<std::string>("padding").value() == "SAME");
  std::vector<float> v(25);
  for (int i = 0; i < 25; ++i) v[i] = float(i);
  auto r = testing::EvalGraph(g, {{x, Tensor::FromVector<float>(v, {1, 5, 5, 1})}}, {c, fc, mp});
  REQUIRE(r.ok());
  CHECK((*r)[0].shape() == Shape{1, 5, 5, 1});
  CHECK((*r)[0].data<float>()[0] == 0 + 1 + 5 + 6);  // a corner window, padded
  CHECK((*r)[1].data<float>()[0] == 0 + 1 + 5 + 6 + 1);
  CHECK((*r)[2].shape() == Shape{1, 2, 2, 1});
  CHECK((*r)[2].ToVector<float>() == std::vector<float>{6, 8, 16, 18});
}

TEST_CASE("Pools with windows and strides far past the input pool the whole input, quickly", "[nn][pool]") {
  // ksize 2^31 - 1 on a 2x2 input grew MaxPoolGrad to gigabytes, then hung
  // or crashed; windows are clamped to the padded input first.
  const std::vector<float> v = {3, 9, 4, 1, 2, 8, 7, 5};  // [1, 2, 2, 2]
  for (int64_t k : {int64_t{2147483647}, int64_t{1} << 40, std::numeric_limits<int64_t>::max()})
    for (int64_t s : {int64_t{1}, int64_t{2147483647}, std::numeric_limits<int64_t>::max()}) {
      INFO("ksize " << k << " stride " << s);
      Graph g;
      auto x = ops::Const(g, v, {1, 2, 2, 2});
      ops::PoolAttrs a{{1, k, k, 1}, {1, s, s, 1}, "SAME"};
      auto mp = ops::MaxPool(g, x, a), ap = ops::AvgPool(g, x, a);
      auto grads = Gradients(g, {ops::Sum(g, mp), ops::Sum(g, ap)}, {x});
      REQUIRE(grads.ok());
      REQUIRE(g.status().ok());
      auto r = testing::EvalGraph(g, {}, {mp, ap, (*grads)[0]});
      REQUIRE(r.ok());
      // Every output position's window covers the whole image.
      const Tensor& m = (*r)[0];
      REQUIRE(m.shape()[3] == 2);
      for (int64_t i = 0; i < m.num_elements(); ++i) {
        CHECK(m.data<float>()[i] == (i % 2 == 0 ? 7 : 9));
        CHECK((*r)[1].data<float>()[i] == (i % 2 == 0 ? 4 : 5.75f));
      }
      const int64_t outputs = m.num_elements() / 2;
      // dMax to the maximum's cell, dAvg spread evenly: each output adds 1/4 per cell.
      const std::vector<float> dx = (*r)[2].ToVector<float>();
      for (int i = 0; i < 8; ++i) {
        const bool is_max = v[i] == 7 || v[i] == 9;
        CHECK(dx[i] == Approx(outputs * ((is_max ? 1.0 : 0.0) + 0.25)));
      }
    }
}
