// Direct tests of the math and shape kernels: dtype coverage, the
// small-tensor path that must stay off the thread pool (per-op overhead), and
// edge values an independent NumPy check found wrong (NaN, overflow, exp's
// clamp, long float sums, Cumprod's gradient at zero).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "kernels/compute_pool.h"
#include "kernels/cpu/cpu_kernels.h"

using namespace sf;

namespace {

// Runs op's CPU kernel on inputs, a kernel of `outputs` outputs (all of
// out_dtype); pool may be null (small inputs never use it).
Result<std::vector<Tensor>> RunKernelN(const std::string& op, const std::vector<Tensor>& inputs, DType out_dtype,
                                       int outputs, const AttrMap& attrs = {}, ComputePool* pool = nullptr) {
  const KernelRegistry& reg = StandardKernelRegistry();
  SF_ASSIGN_OR_RETURN(const KernelFactory* f, reg.Find(op, DeviceType::kCPU, inputs[0].dtype()));
  KernelInit init;
  init.op = op;
  init.node_name = op;
  init.attrs = &attrs;
  for (const Tensor& t : inputs) init.input_dtypes.push_back(t.dtype());
  init.output_dtypes.assign(outputs, out_dtype);
  SF_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> k, (*f)(init));
  std::vector<const Tensor*> ins;
  for (const Tensor& t : inputs) ins.push_back(&t);
  std::vector<Tensor> out(outputs);
  OpKernelContext ctx(ins.data(), static_cast<int>(ins.size()), out.data(), outputs, pool, nullptr, 1);
  k->Compute(&ctx);
  if (!ctx.ok()) return ctx.status();
  return out;
}

// The one output of op's kernel.
Result<Tensor> RunKernel(const std::string& op, const std::vector<Tensor>& inputs, DType out_dtype,
                         const AttrMap& attrs = {}, ComputePool* pool = nullptr) {
  SF_ASSIGN_OR_RETURN(std::vector<Tensor> out, RunKernelN(op, inputs, out_dtype, 1, attrs, pool));
  return std::move(out[0]);
}

}  // namespace

TEST_CASE("Every float math op has float32 and float64 kernels", "[math]") {
  const KernelRegistry& reg = StandardKernelRegistry();
  for (const char* op : {"Add", "Sub", "Mul", "Div", "FloorDiv", "FloorMod", "Pow", "Maximum", "Minimum", "Neg", "Abs",
                         "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Sign", "Reciprocal", "AddN", "Cast",
                         "SquaredDifference", "Sin", "Cos", "Log1p", "Expm1", "Floor", "Ceil", "Round",
                         "ArgMin", "Range",
                         "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "Sum",
                         "Mean", "Max", "Min", "Prod", "ArgMax", "SumToShape", "ZerosLike", "OnesLike"}) {
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
      const bool float_only = std::string(op) == "Pow" || std::string(op) == "Sqrt" ||
                              std::string(op) == "Rsqrt" || std::string(op) == "Exp" ||
                              std::string(op) == "Log" || std::string(op) == "Reciprocal" ||
                              std::set<std::string>{"Sin", "Cos", "Log1p", "Expm1", "Floor", "Ceil", "Round"}.count(op);
      if (float_only && !IsFloating(t)) continue;
      INFO(op << " " << DTypeName(t));
      CHECK(reg.Has(op, DeviceType::kCPU, t));
    }
  }
  for (const char* op : {"LogicalAnd", "LogicalOr", "LogicalNot", "Select", "Cast"})
    CHECK(reg.Has(op, DeviceType::kCPU, DType::kBool));
  for (const char* op : {"Shape", "Size", "Rank", "Fill", "Reshape", "ExpandDims", "Squeeze"})
    CHECK(reg.Has(op, DeviceType::kCPU, DType::kInvalid));
}

TEST_CASE("Small element-wise and reduction kernels never touch the pool", "[math]") {
  const Tensor a = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor row = Tensor::FromVector<float>({1, 2, 3});
  const Tensor s = Tensor::Scalar<float>(2);
  auto add = RunKernel("Add", {a, row}, DType::kFloat32);
  REQUIRE(add.ok());
  CHECK(add->ToVector<float>() == std::vector<float>{2, 4, 6, 5, 7, 9});
  auto mul = RunKernel("Mul", {s, a}, DType::kFloat32);
  REQUIRE(mul.ok());
  CHECK(mul->ToVector<float>() == std::vector<float>{2, 4, 6, 8, 10, 12});
  auto same = RunKernel("Sub", {a, a}, DType::kFloat32);
  REQUIRE(same.ok());
  CHECK(same->ToVector<float>() == std::vector<float>(6, 0.f));
  AttrMap axes;
  axes.Set("axes", std::vector<int64_t>{0});
  auto sum = RunKernel("Sum", {a}, DType::kFloat32, axes);
  REQUIRE(sum.ok());
  CHECK(sum->ToVector<float>() == std::vector<float>{5, 7, 9});
}

TEST_CASE("Big element-wise kernels split over the pool and agree with the small path", "[math]") {
  ComputePool pool(2);
  const int64_t n = 100000;
  std::vector<double> av(n), bv(n);
  for (int64_t i = 0; i < n; ++i) {
    av[i] = 0.001 * i;
    bv[i] = 1.0 + 0.002 * (i % 7);
  }
  const Tensor a = Tensor::FromVector(av), b = Tensor::FromVector(bv);
  auto q = RunKernel("Div", {a, b}, DType::kFloat64, {}, &pool);
  REQUIRE(q.ok());
  const double* p = q->data<double>();
  bool all = true;
  for (int64_t i = 0; i < n; ++i) all = all && p[i] == av[i] / bv[i];
  CHECK(all);

  // Select with a broadcast condition, and Cast, on the pool.
  const Tensor a2 = Tensor::FromVector(av, {1000, 100});
  std::vector<bool> cv(100);
  for (int i = 0; i < 100; ++i) cv[i] = i % 3 == 0;
  auto sel = RunKernel("Select", {Tensor::FromBools(cv, {100}), a2, Tensor::Scalar<double>(-1)},
                       DType::kFloat64, {}, &pool);
  REQUIRE(sel.ok());
  REQUIRE(sel->shape() == Shape{1000, 100});
  all = true;
  for (int64_t i = 0; i < n; ++i) all = all && sel->data<double>()[i] == (i % 100 % 3 == 0 ? av[i] : -1);
  CHECK(all);
  AttrMap to_int;
  to_int.Set("DstT", DType::kInt32);
  auto ci = RunKernel("Cast", {a}, DType::kInt32, to_int, &pool);
  REQUIRE(ci.ok());
  all = true;
  for (int64_t i = 0; i < n; ++i) all = all && ci->data<int32_t>()[i] == static_cast<int32_t>(av[i]);
  CHECK(all);
}

TEST_CASE("Kernels report bad run-time input with the values involved", "[math]") {
  auto r = RunKernel("Add", {Tensor::FromVector<float>({1, 2}), Tensor::FromVector<float>({1, 2, 3})},
                     DType::kFloat32);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("[2] and [3]"));
  auto rs = RunKernel("Reshape", {Tensor::FromVector<float>({1, 2, 3}), Tensor::FromVector<int32_t>({2, 2})},
                      DType::kFloat32);
  REQUIRE_FALSE(rs.ok());
  CHECK_THAT(rs.status().message(), Catch::Contains("3 elements"));
  CHECK_THAT(rs.status().message(), Catch::Contains("4 elements"));
  auto an = RunKernel("AddN", {Tensor::FromVector<float>({1, 2}), Tensor::FromVector<float>({1})},
                      DType::kFloat32);
  REQUIRE_FALSE(an.ok());
  CHECK_THAT(an.status().message(), Catch::Contains("[1]"));
}

TEST_CASE("Edge values: NaN propagates through max and min, quotients and exps stay right", "[math]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // NaN in either operand of Maximum / Minimum, as NumPy: the old kernels
  // kept the first operand's value when the second was NaN.
  for (const char* op : {"Maximum", "Minimum"}) {
    auto r = RunKernel(op, {Tensor::FromVector<float>({nan, 1, 2}), Tensor::FromVector<float>({1, nan, 0})},
                       DType::kFloat32);
    REQUIRE(r.ok());
    INFO(op);
    CHECK(std::isnan(r->data<float>()[0]));
    CHECK(std::isnan(r->data<float>()[1]));
    CHECK(r->data<float>()[2] == (std::string(op) == "Maximum" ? 2 : 0));
  }
  // Reductions: a NaN anywhere in the reduced row, not only first.
  AttrMap rows;
  rows.Set("axes", std::vector<int64_t>{1});
  for (const char* op : {"Max", "Min"}) {
    auto r = RunKernel(op, {Tensor::FromVector<float>({1, nan, 2, 3, 4, 5}, {2, 3})}, DType::kFloat32, rows);
    REQUIRE(r.ok());
    INFO(op);
    CHECK(std::isnan(r->data<float>()[0]));
    CHECK(r->data<float>()[1] == (std::string(op) == "Max" ? 5 : 3));
  }
  AttrMap axis1;
  axis1.Set("axis", int64_t{1});
  auto am = RunKernel("ArgMax", {Tensor::FromVector<float>({1, nan, 9, nan}, {1, 4})}, DType::kInt64, axis1);
  REQUIRE(am.ok());
  CHECK(am->data<int64_t>()[0] == 1);  // the first NaN, as NumPy
  // The one overflowing integer quotient wraps (it trapped with SIGFPE).
  auto q32 = RunKernel("Div", {Tensor::FromVector<int32_t>({std::numeric_limits<int32_t>::min(), 7}),
                               Tensor::FromVector<int32_t>({-1, -1})},
                       DType::kInt32);
  REQUIRE(q32.ok());
  CHECK(q32->data<int32_t>()[0] == std::numeric_limits<int32_t>::min());
  CHECK(q32->data<int32_t>()[1] == -7);
  auto q64 = RunKernel("Div", {Tensor::FromVector<int64_t>({std::numeric_limits<int64_t>::min()}),
                               Tensor::FromVector<int64_t>({-1})},
                       DType::kInt64);
  REQUIRE(q64.ok());
  CHECK(q64->data<int64_t>()[0] == std::numeric_limits<int64_t>::min());
  // exp past Eigen's clamp (the vector path: 16 values).
  std::vector<double> xd(16, -1000.0);
  xd[1] = -720;
  xd[2] = 710;
  auto ed = RunKernel("Exp", {Tensor::FromVector<double>(xd)}, DType::kFloat64);
  REQUIRE(ed.ok());
  CHECK(ed->data<double>()[0] == 0.0);
  CHECK(ed->data<double>()[1] == std::exp(-720.0));
  CHECK(std::isinf(ed->data<double>()[2]));
  std::vector<float> xf(16, -100.f);  // subnormal: 3.7e-44
  xf[1] = 89.f;
  auto ef = RunKernel("Exp", {Tensor::FromVector<float>(xf)}, DType::kFloat32);
  REQUIRE(ef.ok());
  CHECK(ef->data<float>()[0] == std::exp(-100.f));
  CHECK(std::isinf(ef->data<float>()[1]));
}

TEST_CASE("FloorDiv and FloorMod follow Python's // and % on every sign", "[math]") {
  // Python's divmod, all four sign combinations plus exact quotients.
  const std::vector<int64_t> a = {7, -7, 7, -7, 6, -6, 0, 1};
  const std::vector<int64_t> b = {2, 2, -2, -2, 3, -3, 5, -1};
  auto py_div = [](int64_t x, int64_t y) { return x / y - ((x % y != 0) && ((x < 0) != (y < 0))); };
  for (DType t : {DType::kInt32, DType::kInt64, DType::kFloat32, DType::kFloat64}) {
    INFO(DTypeName(t));
    Tensor ta = Tensor::FromVector<int64_t>(a), tb = Tensor::FromVector<int64_t>(b);
    auto cast = [t](const Tensor& x) {
      AttrMap attrs;
      attrs.Set("DstT", t);
      return *RunKernel("Cast", {x}, t, attrs);
    };
    auto d = RunKernel("FloorDiv", {cast(ta), cast(tb)}, t);
    auto m = RunKernel("FloorMod", {cast(ta), cast(tb)}, t);
    REQUIRE(d.ok());
    REQUIRE(m.ok());
    AttrMap to64;
    to64.Set("DstT", DType::kFloat64);
    Tensor d64 = *RunKernel("Cast", {*d}, DType::kFloat64, to64), m64 = *RunKernel("Cast", {*m}, DType::kFloat64, to64);
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(a[i] << " // " << b[i]);
      CHECK(d64.data<double>()[i] == static_cast<double>(py_div(a[i], b[i])));
      CHECK(m64.data<double>()[i] == static_cast<double>(a[i] - b[i] * py_div(a[i], b[i])));
    }
  }
  // Floats: the remainder's sign is the divisor's, and the quotient is
  // Python's (1 // 0.1 == 9.0, not floor(1 / 0.1) == 10).
  auto fd = RunKernel("FloorDiv", {Tensor::FromVector<double>({1.0, -0.0, 5.5, 1.0}),
                                   Tensor::FromVector<double>({0.1, 3.0, -2.0, 0.0})}, DType::kFloat64);
  auto fm = RunKernel("FloorMod", {Tensor::FromVector<double>({1.0, -0.0, 5.5, 1.0, -4.0}),
                                   Tensor::FromVector<double>({0.1, 3.0, -2.0, 0.0, 2.0})}, DType::kFloat64);
  REQUIRE(fd.ok());
  REQUIRE(fm.ok());
  CHECK(fd->data<double>()[0] == 9.0);
  CHECK(fd->data<double>()[1] == 0.0);
  CHECK(std::signbit(fd->data<double>()[1]));
  CHECK(fd->data<double>()[2] == -3.0);
  CHECK(std::isinf(fd->data<double>()[3]));
  CHECK(fm->data<double>()[0] == std::fmod(1.0, 0.1));
  CHECK(fm->data<double>()[2] == -0.5);
  CHECK(std::isnan(fm->data<double>()[3]));
  CHECK(fm->data<double>()[4] == 0.0);
  CHECK_FALSE(std::signbit(fm->data<double>()[4]));
  // The full-packet path (16 and more values) gives the same as the scalar one.
  std::vector<float> xs, ys;
  for (int i = 0; i < 37; ++i) {
    xs.push_back(static_cast<float>(i - 18) * 0.75f);
    ys.push_back(i % 2 ? 1.5f : -2.25f);
  }
  auto pm = RunKernel("FloorMod", {Tensor::FromVector<float>(xs), Tensor::FromVector<float>(ys)}, DType::kFloat32);
  REQUIRE(pm.ok());
  for (int i = 0; i < 37; ++i) {
    const float r = pm->data<float>()[i];
    INFO(xs[i] << " % " << ys[i] << " = " << r);
    CHECK((r == 0 || (r < 0) == (ys[i] < 0)));
    CHECK(std::fabs(r) < std::fabs(ys[i]));
  }
  // Integer edge cases: the most negative value over -1 wraps (no SIGFPE),
  // and a zero divisor is an error naming the op.
  auto w = RunKernel("FloorDiv", {Tensor::FromVector<int32_t>({std::numeric_limits<int32_t>::min()}),
                                  Tensor::FromVector<int32_t>({-1})}, DType::kInt32);
  REQUIRE(w.ok());
  CHECK(w->data<int32_t>()[0] == std::numeric_limits<int32_t>::min());
  auto wm = RunKernel("FloorMod", {Tensor::FromVector<int64_t>({std::numeric_limits<int64_t>::min()}),
                                   Tensor::FromVector<int64_t>({-1})}, DType::kInt64);
  REQUIRE(wm.ok());
  CHECK(wm->data<int64_t>()[0] == 0);
  for (const char* op : {"FloorDiv", "FloorMod"}) {
    auto z = RunKernel(op, {Tensor::FromVector<int32_t>({1, 2}), Tensor::FromVector<int32_t>({1, 0})}, DType::kInt32);
    REQUIRE_FALSE(z.ok());
    CHECK_THAT(z.status().message(), Catch::Contains("integer division by zero in " + std::string(op)));
  }
}

TEST_CASE("Sin, Cos, Log1p, Expm1, Floor, Ceil and Round are the C library's, in every SIMD packet", "[math]") {
  // 40 values: full AVX-512 packets and a tail; edges included.
  std::vector<double> xs = {0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e-10, -1e-10, 1e300, -0.75,
                            std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN(), 3.0, 710.0};
  while (xs.size() < 40) xs.push_back(static_cast<double>(xs.size()) * 0.37 - 7.0);
  using Fn = double (*)(double);
  const std::vector<std::pair<const char*, Fn>> fns = {
      {"Sin", [](double v) { return std::sin(v); }},     {"Cos", [](double v) { return std::cos(v); }},
      {"Log1p", [](double v) { return std::log1p(v); }}, {"Expm1", [](double v) { return std::expm1(v); }},
      {"Floor", [](double v) { return std::floor(v); }}, {"Ceil", [](double v) { return std::ceil(v); }},
      {"Round", [](double v) { return std::nearbyint(v); }}};
  auto same = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b)); };
  for (const auto& [op, fn] : fns) {
    std::vector<float> xf(xs.begin(), xs.end());
    auto d = RunKernel(op, {Tensor::FromVector<double>(xs)}, DType::kFloat64);
    auto f = RunKernel(op, {Tensor::FromVector<float>(xf)}, DType::kFloat32);
    REQUIRE(d.ok());
    REQUIRE(f.ok());
    for (size_t i = 0; i < xs.size(); ++i) {
      INFO(op << "(" << xs[i] << ")");
      CHECK(same(d->data<double>()[i], fn(xs[i])));
      const float want = static_cast<float>(fn(static_cast<double>(xf[i])));
      // float: the float function, within an ulp of the rounded double one
      CHECK((same(f->data<float>()[i], want) ||
             std::fabs(f->data<float>()[i] - want) <= std::numeric_limits<float>::epsilon() * std::fabs(want)));
    }
  }
  // Halves go to even, as NumPy's and TensorFlow's round.
  auto r = RunKernel("Round", {Tensor::FromVector<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f})}, DType::kFloat32);
  REQUIRE(r.ok());
  CHECK(std::vector<float>(r->data<float>(), r->data<float>() + 6) == std::vector<float>{0, 2, 2, -0.f, -2, 2});
}

TEST_CASE("IsNan, IsInf and IsFinite give bools; SquaredDifference broadcasts", "[math]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::FromVector<float>({1, nan, inf, -inf, 0, -0.f}, {2, 3});
  const std::vector<std::pair<const char*, std::vector<bool>>> want = {
      {"IsNan", {false, true, false, false, false, false}},
      {"IsInf", {false, false, true, true, false, false}},
      {"IsFinite", {true, false, false, false, true, true}}};
  for (const auto& [op, w] : want) {
    auto r = RunKernel(op, {x}, DType::kBool);
    REQUIRE(r.ok());
    CHECK(r->dtype() == DType::kBool);
    CHECK(r->shape() == Shape{2, 3});
    for (int i = 0; i < 6; ++i) CHECK(r->data<bool>()[i] == w[i]);
  }
  auto sd = RunKernel("SquaredDifference", {Tensor::FromVector<int32_t>({1, 5, -3, 2}, {2, 2}),
                                            Tensor::FromVector<int32_t>({4, -1})}, DType::kInt32);
  REQUIRE(sd.ok());
  CHECK(std::vector<int32_t>(sd->data<int32_t>(), sd->data<int32_t>() + 4) == std::vector<int32_t>{9, 36, 49, 9});
}

TEST_CASE("ArgMin takes the first smallest value, or the first NaN", "[math]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  AttrMap axis1;
  axis1.Set("axis", int64_t{1});
  auto a = RunKernel("ArgMin", {Tensor::FromVector<float>({3, 1, 1, 2, 5, nan, 0, nan}, {2, 4})}, DType::kInt64, axis1);
  REQUIRE(a.ok());
  CHECK(a->data<int64_t>()[0] == 1);
  CHECK(a->data<int64_t>()[1] == 1);
  AttrMap axis0;
  axis0.Set("axis", int64_t{-2});
  auto b = RunKernel("ArgMin", {Tensor::FromVector<int64_t>({3, 1, -7, 2}, {2, 2})}, DType::kInt64, axis0);
  REQUIRE(b.ok());
  CHECK(b->data<int64_t>()[0] == 1);
  CHECK(b->data<int64_t>()[1] == 0);
  AttrMap bad;
  bad.Set("axis", int64_t{2});
  auto c = RunKernel("ArgMin", {Tensor::FromVector<float>({1, 2})}, DType::kInt64, bad);
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("ArgMin axis 2"));
}

TEST_CASE("Range: values, lengths at the edges of each dtype, and clear errors", "[math]") {
  auto range = [](const Tensor& a, const Tensor& b, const Tensor& d) {
    return RunKernel("Range", {a, b, d}, a.dtype());
  };
  auto i32 = [](int32_t v) { return Tensor::FromVector<int32_t>({v}, {}); };
  auto r = range(i32(3), i32(-4), i32(-3));
  REQUIRE(r.ok());
  CHECK(std::vector<int32_t>(r->data<int32_t>(), r->data<int32_t>() + r->num_elements()) ==
        std::vector<int32_t>{3, 0, -3});
  // NumPy's arange(0, 1, 0.1): ten values, each start + i * delta.
  auto f = RunKernel("Range", {Tensor::FromVector<double>({0.0}, {}), Tensor::FromVector<double>({1.0}, {}),
                               Tensor::FromVector<double>({0.1}, {})}, DType::kFloat64);
  REQUIRE(f.ok());
  REQUIRE(f->num_elements() == 10);
  for (int i = 0; i < 10; ++i) CHECK(f->data<double>()[i] == i * 0.1);
  // The whole int32 range by a step that overflows start + i * delta midway.
  const int32_t lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  auto w = range(i32(lo), i32(hi), i32(1 << 30));
  REQUIRE(w.ok());
  CHECK(std::vector<int32_t>(w->data<int32_t>(), w->data<int32_t>() + w->num_elements()) ==
        std::vector<int32_t>{lo, -(1 << 30), 0, 1 << 30});
  auto e = range(i32(5), i32(5), i32(1));
  REQUIRE(e.ok());
  CHECK(e->num_elements() == 0);
  const std::vector<std::pair<std::vector<Tensor>, std::string>> bad = {
      {{i32(0), i32(5), i32(0)}, "delta must not be 0"},
      {{i32(5), i32(0), i32(1)}, "start 5 is above limit 0"},
      {{i32(0), i32(5), i32(-1)}, "start 0 is below limit 5"},
      {{Tensor::FromVector<int32_t>({0, 1}), i32(5), i32(1)}, "start must be a scalar"},
      {{i32(0), Tensor::FromVector<int64_t>({5}, {}), i32(1)}, "limit is int64 but start is int32"},
      {{Tensor::FromVector<float>({0}, {}), Tensor::FromVector<float>({std::numeric_limits<float>::infinity()}, {}),
        Tensor::FromVector<float>({1}, {})}, "must be finite"},
      {{Tensor::FromVector<double>({0}, {}), Tensor::FromVector<double>({1e300}, {}),
        Tensor::FromVector<double>({1e-300}, {})}, "more than 2^63 values"}};
  for (const auto& [in, msg] : bad) {
    auto b = RunKernel("Range", in, in[0].dtype());
    INFO(msg);
    REQUIRE_FALSE(b.ok());
    CHECK_THAT(b.status().message(), Catch::Contains(msg));
  }
}

TEST_CASE("float32 sums of many values keep float's precision", "[math]") {
  // A million 0.1s: sequential per-lane sums were off by 2e-4 relative.
  const int64_t n = 1'000'000;
  const double exact = n * static_cast<double>(0.1f);
  std::vector<float> v(n, 0.1f);
  auto all = RunKernel("Sum", {Tensor::FromVector<float>(v)}, DType::kFloat32);
  REQUIRE(all.ok());
  CHECK(std::abs(all->data<float>()[0] - exact) / exact < 1e-6);
  // The same over the outer axis of [n/4, 4] (the row-accumulating path).
  AttrMap outer;
  outer.Set("axes", std::vector<int64_t>{0});
  auto cols = RunKernel("Sum", {Tensor::FromVector<float>(v, {n / 4, 4})}, DType::kFloat32, outer);
  REQUIRE(cols.ok());
  for (int i = 0; i < 4; ++i) CHECK(std::abs(cols->data<float>()[i] - exact / 4) / (exact / 4) < 2e-6);
}

TEST_CASE("CumprodGrad is exact where x holds zeros", "[math]") {
  // x = [2, 0, 3, 4], dy = 1: d/dx of sum(cumprod(x)) is [1, 2 (1 + 3 + 12), 0, 0].
  const Tensor x = Tensor::FromVector<double>({2, 0, 3, 4});
  const Tensor dy = Tensor::FromVector<double>({1, 1, 1, 1});
  auto g = RunKernel("CumprodGrad", {x, dy}, DType::kFloat64);
  REQUIRE(g.ok());
  CHECK(g->ToVector<double>() == std::vector<double>{1, 32, 0, 0});
  // Exclusive: y = [1, 2, 0, 0]; d/dx = [1 + 0 + 0, 2 (1 + 3), 0, 0] = [1, 8, 0, 0].
  AttrMap ex;
  ex.Set("exclusive", true);
  auto ge = RunKernel("CumprodGrad", {x, dy}, DType::kFloat64, ex);
  REQUIRE(ge.ok());
  CHECK(ge->ToVector<double>() == std::vector<double>{1, 8, 0, 0});
  // Reverse mirrors the axis: reversed x [4, 3, 0, 2] gives the mirrored gradient.
  AttrMap rev;
  rev.Set("reverse", true);
  auto gr = RunKernel("CumprodGrad", {Tensor::FromVector<double>({4, 3, 0, 2}), dy}, DType::kFloat64, rev);
  REQUIRE(gr.ok());
  CHECK(gr->ToVector<double>() == std::vector<double>{0, 0, 32, 1});
  auto bad = RunKernel("CumprodGrad", {x, Tensor::FromVector<double>({1, 1})}, DType::kFloat64);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("must match"));
}

TEST_CASE("AddN sums any number of inputs, small and split over the pool", "[math]") {
  ComputePool pool(2);
  for (int64_t len : {int64_t{5}, int64_t{100'003}}) {
    for (int n = 1; n <= 9; ++n) {
      INFO(n << " inputs of " << len);
      std::vector<Tensor> ins;
      std::vector<double> want(len, 0.0);
      for (int k = 0; k < n; ++k) {
        std::vector<double> v(len);
        for (int64_t i = 0; i < len; ++i) v[i] = static_cast<double>((i * 7 + k * 13) % 101) - 50.0 + k * 0.25;
        for (int64_t i = 0; i < len; ++i) want[i] += v[i];
        ins.push_back(Tensor::FromVector<double>(v));
      }
      auto r = RunKernel("AddN", ins, DType::kFloat64, {}, &pool);
      REQUIRE(r.ok());
      CHECK(r->ToVector<double>() == want);
    }
  }
}

namespace {

// The same value at every position of tensors of 1 to 70 elements (every
// SIMD tail length): op's answer for it, which must be one answer.
template <typename T>
T OneAnswer(const std::string& op, T value) {
  std::set<T> answers;
  bool nan = false;
  for (int64_t n = 1; n <= 70; ++n) {
    auto r = RunKernel(op, {Tensor::FromVector<T>(std::vector<T>(n, value))}, DTypeOf<T>::value);
    REQUIRE(r.ok());
    for (int64_t i = 0; i < n; ++i) {
      const T y = r->template data<T>()[i];
      if (std::isnan(y)) nan = true;
      else answers.insert(y);
    }
  }
  INFO(op << "(" << value << ")");
  REQUIRE(answers.size() + (nan ? 1 : 0) == 1);
  return nan ? std::numeric_limits<T>::quiet_NaN() : *answers.begin();
}

// |got - want| / |want| (0 when both are 0).
double Rel(double got, long double want) {
  if (want == 0) return std::fabs(got);
  return std::fabs(static_cast<double>((got - want) / want));
}

}  // namespace

TEST_CASE("Softmax cross-entropy of large logits keeps float32's precision", "[math]") {
  // Logits near 1e4 and 1e6: adding the max back lost log(sum) to rounding
  // (relative loss error 3e-4 and 8.5e-3; PyTorch 7e-8 and 3e-8).
  for (float scale : {1e4f, 1e6f}) {
    INFO("logits near " << scale);
    const std::vector<float> logits = {scale, scale - 0.5f * (scale / 1e4f), scale - 3 * (scale / 1e4f),
                                       scale + 1 * (scale / 1e4f)};
    const std::vector<float> probs = {0.25f, 0.25f, 0.25f, 0.25f};
    long double mx = *std::max_element(logits.begin(), logits.end()), s = 0;
    for (float x : logits) s += std::exp(static_cast<long double>(x) - mx);
    const long double lse = std::log(s) + mx;
    long double dense = 0;
    for (size_t i = 0; i < 4; ++i) dense += probs[i] * (lse - logits[i]);
    auto d = RunKernelN("SoftmaxCrossEntropyWithLogits",
                        {Tensor::FromVector<float>(logits, {1, 4}), Tensor::FromVector<float>(probs, {1, 4})},
                        DType::kFloat32, 2);
    REQUIRE(d.ok());
    CHECK(Rel((*d)[0].data<float>()[0], dense) < 1e-6);
    auto sp = RunKernelN("SparseSoftmaxCrossEntropyWithLogits",
                         {Tensor::FromVector<float>(logits, {1, 4}), Tensor::FromVector<int32_t>({2}, {1})},
                         DType::kFloat32, 2);
    REQUIRE(sp.ok());
    CHECK(Rel((*sp)[0].data<float>()[0], lse - logits[2]) < 1e-6);
  }
}

TEST_CASE("Log, Rsqrt, Exp, Sigmoid and Softplus give one right answer per value, subnormal and tails included",
          "[math]") {
  const float sub = 1e-40f, tiny = std::numeric_limits<float>::denorm_min();
  // Eigen's packets clamped subnormal arguments: log of any of them -87.34.
  CHECK(Rel(OneAnswer<float>("Log", sub), std::log(static_cast<long double>(sub))) < 1e-6);
  CHECK(Rel(OneAnswer<float>("Log", tiny), std::log(static_cast<long double>(tiny))) < 1e-6);
  CHECK(Rel(OneAnswer<double>("Log", 1e-310), std::log(1e-310L)) < 1e-12);
  CHECK(Rel(OneAnswer<float>("Rsqrt", tiny), 1 / std::sqrt(static_cast<long double>(tiny))) < 1e-6);
  CHECK(Rel(OneAnswer<double>("Rsqrt", 1e-310), 1 / std::sqrt(1e-310L)) < 1e-12);
  CHECK(Rel(OneAnswer<double>("Rsqrt", 5e-324), 1 / std::sqrt(static_cast<long double>(5e-324))) < 1e-12);
  CHECK(OneAnswer<float>("Log", 0.0f) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(OneAnswer<float>("Log", -1.0f)));
  CHECK(Rel(OneAnswer<float>("Log", 3.0f), std::log(3.0L)) < 2e-7);
  // Sigmoid and Softplus tails: results subnormal (packets gave 0).
  for (float x : {-88.5f, -95.0f, -100.0f}) {
    const long double want = std::exp(static_cast<long double>(x));  // both ~ e^x this far out
    // A subnormal float holds fewer bits: compare within its spacing.
    const double ulp = std::numeric_limits<float>::denorm_min();
    CHECK(std::fabs(OneAnswer<float>("Sigmoid", x) - static_cast<double>(want)) <= ulp + 1e-6 * double(want));
    CHECK(std::fabs(OneAnswer<float>("Softplus", x) - static_cast<double>(want)) <= ulp + 1e-6 * double(want));
    CHECK(OneAnswer<float>("Sigmoid", x) > 0);
  }
  CHECK(OneAnswer<float>("Sigmoid", -200.0f) == 0.0f);
  CHECK(Rel(OneAnswer<double>("Sigmoid", -720.0), std::exp(-720.0L)) < 1e-3);  // subnormal double
  CHECK(OneAnswer<float>("Sigmoid", 100.0f) == 1.0f);
  CHECK(Rel(OneAnswer<float>("Softplus", 100.0f), 100.0L) < 1e-7);
  CHECK(OneAnswer<float>("Exp", -100.0f) > 0);
  CHECK(OneAnswer<float>("Exp", 89.0f) == std::numeric_limits<float>::infinity());
  // Ordinary values too: every position, one answer (packet and tail agree).
  for (float x : {0.3f, -2.5f, 7.0f}) {
    CHECK(Rel(OneAnswer<float>("Sigmoid", x), 1 / (1 + std::exp(-static_cast<long double>(x)))) < 1e-6);
    CHECK(Rel(OneAnswer<float>("Softplus", x), std::log1p(std::exp(static_cast<long double>(x)))) < 1e-6);
    CHECK(Rel(OneAnswer<float>("Tanh", x), std::tanh(static_cast<long double>(x))) < 1e-6);
  }
}

TEST_CASE("float32 Cumsum and L2Loss of a million values keep float's precision", "[math]") {
  const int64_t n = 1'000'000;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.1f + 0.001f * static_cast<float>(i % 7);
  auto c = RunKernel("Cumsum", {Tensor::FromVector<float>(v)}, DType::kFloat32);
  REQUIRE(c.ok());
  long double run = 0;
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    run += v[i];
    worst = std::max(worst, Rel(c->data<float>()[i], run));
  }
  CHECK(worst < 1e-7);  // a float running sum was off by ~1e-4 here
  // Reverse and exclusive take the same path.
  AttrMap rev;
  rev.Set("reverse", true);
  rev.Set("exclusive", true);
  auto r = RunKernel("Cumsum", {Tensor::FromVector<float>(v)}, DType::kFloat32, rev);
  REQUIRE(r.ok());
  long double total = 0;
  for (float x : v) total += x;
  CHECK(r->data<float>()[n - 1] == 0.0f);
  CHECK(Rel(r->data<float>()[0], total - v[0]) < 1e-7);
  auto l2 = RunKernel("L2Loss", {Tensor::FromVector<float>(v)}, DType::kFloat32);
  REQUIRE(l2.ok());
  long double sq = 0;
  for (float x : v) sq += static_cast<long double>(x) * x;
  CHECK(Rel(l2->data<float>()[0], sq / 2) < 1e-6);
}
