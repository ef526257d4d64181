// The oneDNN engines against the Eigen ones (kernels/cpu/dnnl_engines.h):
// every convolution shape the other tests use plus strided, padded (SAME and
// VALID), odd and uneven-batch ones, forward and both gradients, in fp32 and
// (on CPUs with AVX512_BF16) bf16; the bf16 matmul against Eigen's GEMM; and
// the graph-level precision switch (shardflow/precision.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/compute_pool.h"
#include "kernels/cpu/dnnl_engines.h"
#include "kernels/cpu/nn_gemm.h"
#include "kernels/cpu_features.h"
#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "shardflow/precision.h"
#include "shardflow/session.h"
#include "tests/support/eval_graph.h"
#include "tests/support/random_values.h"

using namespace sf;

namespace {

using testing::Random;

// ||got - want|| / ||want||, the error measure that suits bf16 (whose
// elements round at 2^-8 relative) as well as fp32.
double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

struct ConvCase {
  Shape in;
  int64_t kh, kw, oc, sh, sw;
  bool same;
};

nn::Window MakeWindow(const ConvCase& cc) {
  nn::Window w;
  w.n = cc.in[0];
  w.h = cc.in[1];
  w.w = cc.in[2];
  w.c = cc.in[3];
  w.kh = cc.kh;
  w.kw = cc.kw;
  w.sh = cc.sh;
  w.sw = cc.sw;
  REQUIRE(nn::ComputeWindow(cc.same, &w).ok());
  return w;
}

const std::vector<ConvCase>& ConvCases() {
  static const std::vector<ConvCase> cases = {
      // The shapes of nn_conv_test.cc.
      {{1, 5, 5, 2}, 3, 3, 3, 1, 1, true},  {{2, 7, 6, 3}, 3, 2, 4, 2, 2, true},
      {{2, 7, 6, 3}, 3, 3, 2, 2, 1, false}, {{3, 9, 9, 4}, 1, 1, 5, 1, 1, false},
      {{1, 8, 8, 2}, 5, 5, 3, 3, 3, true},  {{4, 20, 20, 8}, 3, 3, 16, 1, 1, true},
      {{2, 6, 6, 3}, 1, 1, 2, 2, 2, true},  {{1, 40, 40, 16}, 3, 3, 32, 1, 1, true},
      // Strided, padded, odd and uneven.
      {{3, 11, 13, 5}, 5, 3, 7, 2, 3, true},   // odd everything, SAME, unequal strides
      {{2, 9, 7, 3}, 4, 4, 6, 3, 2, false},    // even kernel, VALID with leftover rows
      {{2, 10, 10, 4}, 3, 3, 5, 4, 4, false},  // stride larger than the kernel
      {{5, 8, 8, 3}, 8, 8, 2, 1, 1, false},    // window = whole image
      {{3, 6, 7, 2}, 4, 2, 3, 1, 1, true},     // even kernel, SAME (asymmetric padding)
      {{7, 6, 6, 17}, 1, 1, 9, 1, 1, true},    // pointwise, odd channels, odd batch
      {{5, 28, 28, 1}, 5, 5, 32, 1, 1, true},  // the Fashion-MNIST CNN's layers, odd batch
      {{6, 14, 14, 32}, 5, 5, 64, 1, 1, true},
  };
  return cases;
}

void CheckConvEngine(nn::Precision p, double tol) {
  ComputePool pool(2);
  auto ref = nn::NewEigenConvEngine();
  auto dnnl = nn::NewDnnlConvEngine(p);
  REQUIRE(dnnl != nullptr);
  for (const ConvCase& cc : ConvCases()) {
    const nn::Window w = MakeWindow(cc);
    INFO("input " << ShapeString(cc.in) << " kernel " << cc.kh << "x" << cc.kw << " oc " << cc.oc << " strides "
                  << cc.sh << "," << cc.sw << (cc.same ? " SAME" : " VALID"));
    const int64_t nx = NumElements(cc.in), nf = cc.kh * cc.kw * w.c * cc.oc, ny = w.n * w.oh * w.ow * cc.oc;
    const auto x = Random(nx, 1), f = Random(nf, 2), dy = Random(ny, 3);
    std::vector<float> y_ref(ny), dx_ref(nx), df_ref(nf);
    REQUIRE(ref->Forward(&pool, w, cc.oc, x.data(), f.data(), {}, y_ref.data()).ok());
    REQUIRE(ref->BackwardInput(&pool, w, cc.oc, f.data(), dy.data(), dx_ref.data()).ok());
    REQUIRE(ref->BackwardFilter(&pool, w, cc.oc, x.data(), dy.data(), df_ref.data()).ok());
    // Twice: the second call runs the primitives cached by the first, and
    // must give the same bits; outputs start as garbage, never read.
    std::vector<float> first_y;
    for (int run = 0; run < 2; ++run) {
      std::vector<float> y(ny, NAN), dx(nx, NAN), df(nf, NAN);
      Status s = dnnl->Forward(&pool, w, cc.oc, x.data(), f.data(), {}, y.data());
      REQUIRE(s.ok());
      REQUIRE(dnnl->BackwardInput(&pool, w, cc.oc, f.data(), dy.data(), dx.data()).ok());
      REQUIRE(dnnl->BackwardFilter(&pool, w, cc.oc, x.data(), dy.data(), df.data()).ok());
      CHECK(RelError(y, y_ref) < tol);
      CHECK(RelError(dx, dx_ref) < tol);
      CHECK(RelError(df, df_ref) < tol);
      if (run == 0) first_y = y;
      else CHECK(y == first_y);
    }
    // Without a pool (one block, another cached plan) the same result.
    std::vector<float> y1(ny);
    REQUIRE(dnnl->Forward(nullptr, w, cc.oc, x.data(), f.data(), {}, y1.data()).ok());
    CHECK(RelError(y1, y_ref) < tol);
    // Fused epilogues (FusedConv2D): bias, relu, both; the reference is the
    // unfused output with the bias added and ReLU applied here.
    const auto bias = Random(cc.oc, 4);
    for (const nn::ConvEpilogue ep : {nn::ConvEpilogue{bias.data(), false}, nn::ConvEpilogue{nullptr, true},
                                      nn::ConvEpilogue{bias.data(), true}}) {
      INFO("bias " << (ep.bias != nullptr) << " relu " << ep.relu);
      std::vector<float> want = y_ref;
      for (int64_t i = 0; i < ny; ++i) {
        if (ep.bias) want[i] += ep.bias[i % cc.oc];
        if (ep.relu) want[i] = std::max(want[i], 0.0f);
      }
      std::vector<float> eigen(ny, NAN), fused(ny, NAN);
      REQUIRE(ref->Forward(&pool, w, cc.oc, x.data(), f.data(), ep, eigen.data()).ok());
      CHECK(RelError(eigen, want) < 1e-6);
      REQUIRE(dnnl->Forward(&pool, w, cc.oc, x.data(), f.data(), ep, fused.data()).ok());
      CHECK(RelError(fused, want) < tol);
    }
  }
}

}  // namespace

TEST_CASE("oneDNN fp32 convolutions match the Eigen ones", "[kernels][dnnl]") {
  if (!BuiltWithDnnl()) {
    CHECK(nn::NewDnnlConvEngine(nn::Precision::kFp32) == nullptr);
    return;
  }
  CheckConvEngine(nn::Precision::kFp32, 1e-5);
}

TEST_CASE("oneDNN bf16 convolutions stay within bf16 rounding of the fp32 ones", "[kernels][dnnl][bf16]") {
  if (!Bf16Supported().ok()) return;  // refused on such machines: tested below
  CheckConvEngine(nn::Precision::kBf16, 1e-2);
}

TEST_CASE("The bf16 matmul matches Eigen's GEMM over every transpose", "[kernels][dnnl][bf16]") {
  if (!Bf16Supported().ok()) return;
  ComputePool pool(2);
  auto mm = nn::NewDnnlBf16MatMulEngine();
  REQUIRE(mm != nullptr);
  struct Dims {
    int64_t m, n, k;
  };
  // Split by C's rows (m >= n) and by its columns (n > m, odd widths included).
  for (Dims d : {Dims{128, 512, 784}, Dims{784, 512, 128}, Dims{37, 5, 19}, Dims{3, 300, 7}, Dims{1, 1, 1},
                 Dims{64, 10, 1024}, Dims{5, 1001, 33}, Dims{16, 129, 64}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO("m " << d.m << " n " << d.n << " k " << d.k << " ta " << ta << " tb " << tb);
        const auto a = Random(d.m * d.k, 4), b = Random(d.k * d.n, 5);
        std::vector<float> want(d.m * d.n), got(d.m * d.n, NAN);
        nn::Gemm<float>(&pool, a.data(), b.data(), want.data(), d.m, d.n, d.k, ta, tb);
        REQUIRE(mm->Run(&pool, a.data(), b.data(), got.data(), d.m, d.n, d.k, ta, tb).ok());
        CHECK(RelError(got, want) < 1e-2);
        CHECK(RelError(got, want) > 0);  // it really rounded to bf16
      }
}

TEST_CASE("SetComputePrecision marks the products and bf16 trains like fp32", "[kernels][dnnl][bf16]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {4, 6, 6, 2}, "x");
  auto f = ops::Const(g, Random(3 * 3 * 2 * 4, 7), {3, 3, 2, 4});
  auto w = ops::Const(g, Random(6 * 6 * 4 * 3, 8), {6 * 6 * 4, 3});
  auto h = ops::Reshape(g, ops::Conv2D(g, x, f), std::vector<int64_t>{4, 6 * 6 * 4});
  auto loss = ops::Sum(g, ops::Square(g, ops::MatMul(g, h, w)));
  auto grads = Gradients(g, {loss}, {f, w});
  REQUIRE(grads.ok());
  REQUIRE(g.status().ok());
  CHECK(CheckComputePrecision("fp32").ok());
  CHECK(CheckComputePrecision("fp16").code() == Code::kInvalidArgument);
  CHECK(SetComputePrecision(g, "fp16").status().message().find("fp16") != std::string::npos);
  const testing::Feeds feeds = {{x, Tensor::FromVector<float>(Random(4 * 6 * 6 * 2, 9), {4, 6, 6, 2})}};
  auto fp32 = testing::EvalGraph(g, feeds, {loss, (*grads)[0], (*grads)[1]});
  REQUIRE(fp32.ok());
  if (!Bf16Supported().ok()) {
    auto r = SetComputePrecision(g, "bf16");
    CHECK(r.status().code() == Code::kFailedPrecondition);
    return;
  }
  auto set = SetComputePrecision(g, "bf16");
  REQUIRE(set.ok());
  // Forward Conv2D and MatMul, the conv's two gradients, the MatMul's two.
  CHECK(*set == 6);
  auto bf16 = testing::EvalGraph(g, feeds, {loss, (*grads)[0], (*grads)[1]});
  REQUIRE(bf16.ok());
  for (int i = 0; i < 3; ++i) {
    const double e = RelError((*bf16)[i].ToVector<float>(), (*fp32)[i].ToVector<float>());
    CHECK(e < 2e-2);
    CHECK(e > 0);
  }
}

TEST_CASE("A bad precision attr is refused naming it", "[kernels][dnnl]") {
  Graph g;
  auto a = ops::Const(g, Random(4, 1), {2, 2});
  AttrMap m;
  m.Set("precision", std::string("fp8"));
  auto c = g.Add1("MatMul", {a, a}, m);
  REQUIRE(g.status().ok());
  auto r = testing::Eval(g, c);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("precision") != std::string::npos);
  CHECK(r.status().message().find("fp8") != std::string::npos);
  // bf16 on float64 is refused too (oneDNN's bf16 takes float32 inputs).
  Graph g2;
  auto d = ops::Const(g2, Tensor::FromVector<double>({1, 2, 3, 4}, {2, 2}));
  AttrMap m2;
  m2.Set("precision", std::string("bf16"));
  auto c2 = g2.Add1("MatMul", {d, d}, m2);
  auto r2 = testing::Eval(g2, c2);
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.status().message().find("precision") != std::string::npos);
}

TEST_CASE("oneDNN MaxPoolGrad routes dy to the first maximum, ties included", "[kernels][dnnl]") {
  auto engine = nn::NewDnnlMaxPoolGradEngine();
  if (!BuiltWithDnnl()) {
    CHECK(engine == nullptr);
    return;
  }
  REQUIRE(engine != nullptr);
  ComputePool pool(2);
  struct PoolCase {
    Shape in;
    int64_t k, s;
    bool same;
  };
  for (const PoolCase& pc : {PoolCase{{64, 28, 28, 32}, 2, 2, false}, PoolCase{{3, 7, 9, 5}, 2, 2, false},
                             PoolCase{{3, 7, 9, 5}, 3, 2, true}, PoolCase{{2, 5, 5, 3}, 2, 2, true},
                             PoolCase{{5, 6, 6, 17}, 3, 1, false}}) {
    INFO("input " << ShapeString(pc.in) << " window " << pc.k << " stride " << pc.s << (pc.same ? " SAME" : " VALID"));
    nn::Window w;
    w.n = pc.in[0], w.h = pc.in[1], w.w = pc.in[2], w.c = pc.in[3];
    w.kh = w.kw = pc.k;
    w.sh = w.sw = pc.s;
    REQUIRE(nn::ComputeWindow(pc.same, &w).ok());
    // Values in {0, 1, 2}: most windows hold ties (as after a ReLU).
    std::vector<float> x = Random(NumElements(pc.in), 11);
    for (float& v : x) v = std::floor((v + 1) * 1.5f);
    const auto dy = Random(w.n * w.oh * w.ow * w.c, 12);
    std::vector<float> want(x.size(), 0.0f), got(x.size(), NAN);
    for (int64_t n = 0; n < w.n; ++n)
      for (int64_t oy = 0; oy < w.oh; ++oy)
        for (int64_t ox = 0; ox < w.ow; ++ox)
          for (int64_t c = 0; c < w.c; ++c) {
            int64_t arg = -1;
            for (int64_t ky = 0; ky < w.kh; ++ky)
              for (int64_t kx = 0; kx < w.kw; ++kx) {
                const int64_t iy = oy * w.sh - w.pad_top + ky, ix = ox * w.sw - w.pad_left + kx;
                if (iy < 0 || iy >= w.h || ix < 0 || ix >= w.w) continue;
                const int64_t at = ((n * w.h + iy) * w.w + ix) * w.c + c;
                if (arg < 0 || x[at] > x[arg]) arg = at;
              }
            want[arg] += dy[((n * w.oh + oy) * w.ow + ox) * w.c + c];
          }
    REQUIRE(engine->Run(&pool, w, x.data(), dy.data(), got.data()).ok());
    CHECK(RelError(got, want) < 1e-6);
  }
}

TEST_CASE("A bf16 FusedMatMul stays within bf16 rounding of the fp32 one, bias and relu included", "[kernels][dnnl][bf16]") {
  if (!Bf16Supported().ok()) return;
  for (auto [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{128, 784, 512}, {3, 5, 7}, {4, 0, 3}}) {
    for (bool relu : {false, true}) {
      INFO("m " << m << " k " << k << " n " << n << " relu " << relu);
      Graph g;
      auto a = ops::Const(g, Tensor::FromVector<float>(Random(m * k, 1), {m, k}));
      auto b = ops::Const(g, Tensor::FromVector<float>(Random(k * n, 2), {k, n}));
      auto bias = ops::Const(g, Tensor::FromVector<float>(Random(n, 3), {n}));
      auto fp32 = ops::FusedMatMul(g, a, b, bias, relu ? "relu" : "none");
      auto bf16 = ops::FusedMatMul(g, a, b, bias, relu ? "relu" : "none");
      REQUIRE(g.status().ok());
      g.mutable_node(bf16.node).attrs.Set("precision", std::string("bf16"));
      auto want = testing::Eval(g, fp32);
      auto got = testing::Eval(g, bf16);
      REQUIRE(want.ok());
      INFO(got.status().ToString());
      REQUIRE(got.ok());
      const auto w = want->ToVector<float>(), x = got->ToVector<float>();
      CHECK(RelError(x, w) < 1e-2);
      if (k > 0) CHECK(RelError(x, w) > 0);  // the product really ran in bf16
      if (k == 0) CHECK(x == w);             // bias (and relu) alone
    }
  }
}

namespace {

// A direct NHWC convolution in double, from the attributes as given (no
// stride clamping): the reference the clamped windows are held to.
struct DirectConv {
  ConvCase cc;
  int64_t oh, ow, pt, pl;
  explicit DirectConv(const ConvCase& c) : cc(c) {
    const int64_t h = c.in[1], w = c.in[2];
    if (c.same) {
      oh = h == 0 ? 0 : (h - 1) / c.sh + 1;
      ow = w == 0 ? 0 : (w - 1) / c.sw + 1;
      pt = std::max<int64_t>((oh - 1) * std::min(c.sh, h) + c.kh - h, 0) / 2;
      pl = std::max<int64_t>((ow - 1) * std::min(c.sw, w) + c.kw - w, 0) / 2;
    } else {
      oh = (h - c.kh) / c.sh + 1;
      ow = (w - c.kw) / c.sw + 1;
      pt = pl = 0;
    }
  }
  // pass 0: y from (x, f); 1: dx from (dy, f); 2: df from (x, dy).
  std::vector<float> Run(int pass, const std::vector<float>& a, const std::vector<float>& b) const {
    const int64_t n = cc.in[0], h = cc.in[1], w = cc.in[2], c = cc.in[3];
    std::vector<double> out(pass == 0 ? n * oh * ow * cc.oc : pass == 1 ? n * h * w * c : cc.kh * cc.kw * c * cc.oc);
    for (int64_t b0 = 0; b0 < n; ++b0)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          for (int64_t ky = 0; ky < cc.kh; ++ky)
            for (int64_t kx = 0; kx < cc.kw; ++kx) {
              const int64_t iy = oy * cc.sh + ky - pt, ix = ox * cc.sw + kx - pl;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              for (int64_t ci = 0; ci < c; ++ci)
                for (int64_t o = 0; o < cc.oc; ++o) {
                  const int64_t xi = ((b0 * h + iy) * w + ix) * c + ci, fi = ((ky * cc.kw + kx) * c + ci) * cc.oc + o,
                                yi = ((b0 * oh + oy) * ow + ox) * cc.oc + o;
                  if (pass == 0) out[yi] += double(a[xi]) * b[fi];
                  else if (pass == 1) out[xi] += double(a[yi]) * b[fi];
                  else out[fi] += double(a[xi]) * b[yi];
                }
            }
    return std::vector<float>(out.begin(), out.end());
  }
};

}  // namespace

// oneDNN 2.6's bf16 filter gradient left the taps of a W stride larger than
// the input width unwritten (garbage up to 1e37, different each run), and
// its bf16 forward crashed at a stride of 31478: ComputeWindow clamps each
// stride to its axis's extent, which leaves the output unchanged. Small
// images, strides up to 2^16 and beyond, every pass, each three times (a
// fresh plan, then cached ones), against a direct convolution of the
// attributes as given.
TEST_CASE("bf16 and fp32 convolutions of small images with strides past the input match a direct one",
          "[kernels][dnnl][bf16]") {
  if (!BuiltWithDnnl()) return;
  std::vector<nn::Precision> precisions = {nn::Precision::kFp32};
  if (Bf16Supported().ok()) precisions.push_back(nn::Precision::kBf16);
  std::vector<ConvCase> cases = {
      {{2, 8, 2, 3}, 3, 3, 1, 1, 3, true},       // the report's shape: tap kx = 2 covers only padding
      {{2, 8, 2, 3}, 3, 3, 1, 1, 65536, true},   // its stride 65536 (the filter gradient's SIGSEGV)
      {{2, 2, 8, 3}, 3, 3, 1, 3, 1, true},       // the same along H
      {{3, 2, 2, 5}, 2, 1, 2, 2, 31478, true},   // the forward's crash
      {{1, 8, 1, 5}, 4, 2, 3, 1, 3, true},
      {{2, 7, 3, 4}, 2, 3, 2, 9, 7, false},
      {{1, 1, 1, 2}, 3, 3, 2, int64_t{1} << 40, int64_t{1} << 40, true},
  };
  std::mt19937 rng(5);
  auto pick = [&](int lo, int hi) { return int64_t(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  while (cases.size() < 60) {
    ConvCase c{{pick(1, 3), pick(1, 6), pick(1, 6), pick(1, 4)}, pick(1, 4), pick(1, 4), pick(1, 4), pick(1, 12),
               pick(1, 12), pick(0, 1) == 1};
    if (pick(0, 3) == 0) c.sw = pick(13, 70000);
    if (!c.same && (c.in[1] < c.kh || c.in[2] < c.kw)) continue;
    cases.push_back(c);
  }
  ComputePool pool(2);
  for (nn::Precision p : precisions) {
    auto engine = nn::NewDnnlConvEngine(p);
    REQUIRE(engine != nullptr);
    const double tol = p == nn::Precision::kBf16 ? 1e-2 : 1e-5;
    for (const ConvCase& cc : cases) {
      INFO((p == nn::Precision::kBf16 ? "bf16" : "fp32") << " input " << ShapeString(cc.in) << " kernel " << cc.kh
                                                          << "x" << cc.kw << " oc " << cc.oc << " strides " << cc.sh
                                                          << "," << cc.sw << (cc.same ? " SAME" : " VALID"));
      const nn::Window w = MakeWindow(cc);
      const DirectConv direct(cc);
      REQUIRE(w.oh == direct.oh);
      REQUIRE(w.ow == direct.ow);
      const int64_t nx = NumElements(cc.in), nf = cc.kh * cc.kw * w.c * cc.oc, ny = w.n * w.oh * w.ow * cc.oc;
      // Values bf16 holds exactly, so only the accumulation differs.
      auto exact = [](std::vector<float> v) {
        for (float& x : v) x = std::round(x * 64) / 64;
        return v;
      };
      const auto x = exact(Random(nx, 21)), f = exact(Random(nf, 22)), dy = exact(Random(ny, 23));
      const auto y_ref = direct.Run(0, x, f), dx_ref = direct.Run(1, dy, f), df_ref = direct.Run(2, x, dy);
      for (int run = 0; run < 3; ++run) {
        std::vector<float> y(ny, NAN), dx(nx, NAN), df(nf, NAN);
        REQUIRE(engine->Forward(&pool, w, cc.oc, x.data(), f.data(), {}, y.data()).ok());
        REQUIRE(engine->BackwardInput(&pool, w, cc.oc, f.data(), dy.data(), dx.data()).ok());
        REQUIRE(engine->BackwardFilter(&pool, w, cc.oc, x.data(), dy.data(), df.data()).ok());
        CHECK(RelError(y, y_ref) < tol);
        CHECK(RelError(dx, dx_ref) < tol);
        CHECK(RelError(df, df_ref) < tol);
      }
    }
  }
}

// The report's graph: a bf16 Conv2D's filter gradient at a stride past the
// input beside a float32 Conv2D, on a two-thread session, run repeatedly:
// the float32 result is the same every run and the bf16 gradient is finite
// and within bf16 rounding of the fp32 one (0 where a tap covers only padding).
TEST_CASE("A bf16 convolution's gradient at a large stride leaves a float32 convolution beside it intact",
          "[kernels][dnnl][bf16]") {
  if (!Bf16Supported().ok()) return;
  for (int64_t stride : {int64_t{3}, int64_t{65536}}) {
    INFO("stride " << stride);
    Graph g;
    auto x = ops::Const(g, Random(2 * 8 * 2 * 3, 31), {2, 8, 2, 3});
    auto f = ops::Const(g, Random(3 * 3 * 3 * 1, 32), {3, 3, 3, 1});
    auto x2 = ops::Const(g, Random(4 * 9 * 9 * 8, 33), {4, 9, 9, 8});
    auto f2 = ops::Const(g, Random(3 * 3 * 8 * 8, 34), {3, 3, 8, 8});
    AttrMap bf16, fp32;
    for (AttrMap* m : {&bf16, &fp32}) {
      m->Set("strides", std::vector<int64_t>{1, 1, stride, 1});
      m->Set("padding", std::string("SAME"));
    }
    bf16.Set("precision", std::string("bf16"));
    auto y16 = g.Add1("Conv2D", {x, f}, bf16);
    auto y32 = g.Add1("Conv2D", {x, f}, fp32);
    auto loss16 = ops::Sum(g, ops::Square(g, y16)), loss32 = ops::Sum(g, ops::Square(g, y32));
    auto g16 = Gradients(g, {loss16}, {f}), g32 = Gradients(g, {loss32}, {f});
    REQUIRE(g16.ok());
    REQUIRE(g32.ok());
    auto other = ops::Conv2D(g, x2, f2);
    REQUIRE(g.status().ok());
    auto want = testing::EvalGraph(g, {}, {other, (*g32)[0]});
    REQUIRE(want.ok());
    const std::vector<float> other_ref = (*want)[0].ToVector<float>(), df_ref = (*want)[1].ToVector<float>();
    // Taps kx = 2 (stride 3 on a width of 2, SAME: padding 0 left, 1 right) see only padding.
    for (int64_t i = 0; i < 3 * 3 * 3; ++i)
      if ((i / 3) % 3 == 2) CHECK(df_ref[i] == 0.0f);
    SessionOptions o;
    o.compute_threads = 2;
    Session s(g, o);
    for (int run = 0; run < 30; ++run) {
      auto r = s.Run({}, Fetches{(*g16)[0], other});
      REQUIRE(r.ok());
      const std::vector<float> df = (*r)[0].ToVector<float>();
      for (float v : df) REQUIRE(std::isfinite(v));
      CHECK(RelError(df, df_ref) < 1e-2);
      REQUIRE(RelError((*r)[1].ToVector<float>(), other_ref) < 1e-5);
    }
  }
}
