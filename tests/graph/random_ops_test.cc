#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "kernels/cpu/cpu_kernels.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"

using namespace sf;

namespace {

std::vector<double> EvalDoubles(const Graph& g, Output y) {
  INFO(g.status().ToString());
  REQUIRE(g.status().ok());
  auto r = testing::Eval(g, y);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return r->ToVector<double>();
}

struct Moments {
  double mean = 0, stddev = 0, min = 1e300, max = -1e300;
};
Moments MomentsOf(const std::vector<double>& v) {
  Moments m;
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= v.size();
  for (double x : v) m.stddev += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(m.stddev / v.size());
  return m;
}

// Runs one kernel object `runs` times (as a session does across steps).
std::vector<std::vector<double>> RunKernelTimes(const std::string& op, AttrMap attrs, DType dtype,
                                                int runs) {
  KernelInit init;
  init.op = op;
  init.node_name = "r";
  init.attrs = &attrs;
  init.output_dtypes = {dtype};
  auto factory = StandardKernelRegistry().Find(op, DeviceType::kCPU, dtype);
  REQUIRE(factory.ok());
  auto kernel = (**factory)(init);
  REQUIRE(kernel.ok());
  CHECK((*kernel)->IsStateful());
  std::vector<std::vector<double>> out;
  for (int i = 0; i < runs; ++i) {
    Tensor t;
    OpKernelContext ctx(nullptr, 0, &t, 1, nullptr, nullptr, i);
    (*kernel)->Compute(&ctx);
    REQUIRE(ctx.ok());
    out.push_back(t.ToVector<double>());
  }
  return out;
}

}  // namespace

TEST_CASE("Random ops are reproducible across graphs for a seed", "[random]") {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    Graph g1, g2;
    auto u1 = ops::RandomUniform(g1, {3, 5}, -1.0, 2.0, 42, t);
    auto u2 = ops::RandomUniform(g2, {3, 5}, -1.0, 2.0, 42, t);
    auto n1 = ops::RandomNormal(g1, {7}, 1.0, 0, t);
    auto n2 = ops::RandomNormal(g2, {7}, 1.0, 0, t);
    auto tn1 = ops::TruncatedNormal(g1, {7}, 1.0, 9, t);
    auto tn2 = ops::TruncatedNormal(g2, {7}, 1.0, 9, t);
    REQUIRE(u1.dtype() == t);
    REQUIRE(u1.shape() == PartialShape({3, 5}));
    CHECK(EvalDoubles(g1, u1) == EvalDoubles(g2, u2));
    CHECK(EvalDoubles(g1, n1) == EvalDoubles(g2, n2));
    CHECK(EvalDoubles(g1, tn1) == EvalDoubles(g2, tn2));
    auto other = ops::RandomUniform(g2, {3, 5}, -1.0, 2.0, 43, t);
    CHECK(EvalDoubles(g1, u1) != EvalDoubles(g2, other));
    CHECK(g1.node(u1.node).stateful);
  }
}

TEST_CASE("Random values are pinned for a seed (same in every process)", "[random]") {
  Graph g;
  auto u = EvalDoubles(g, ops::RandomUniform(g, {3}, 0.0, 1.0, 7, DType::kFloat64));
  auto n = EvalDoubles(g, ops::RandomNormal(g, {3}, 1.0, 7, DType::kFloat64));
  // Pinned when the generator was written: a change here breaks every seeded
  // model's reproducibility, so it must be deliberate.
  const std::vector<double> want_u = {0.59819510084009053, 0.29003591451209221, 0.52764851698070891};
  const std::vector<double> want_n = {-0.25232941567662348, 0.98183833256600539, 0.5866710132882571};
  for (int i = 0; i < 3; ++i) {
    CHECK(u[i] == Approx(want_u[i]).epsilon(1e-12));
    CHECK(n[i] == Approx(want_n[i]).epsilon(1e-9));
  }
}

TEST_CASE("Each run of a random node advances its stream", "[random]") {
  AttrMap a;
  a.Set("shape", Shape{4});
  a.Set("dtype", DType::kFloat64);
  a.Set("seed", int64_t{5});
  a.Set("minval", 0.0);
  a.Set("maxval", 1.0);
  auto runs = RunKernelTimes("RandomUniform", a, DType::kFloat64, 3);
  CHECK(runs[0] != runs[1]);
  CHECK(runs[1] != runs[2]);
  // A new kernel (a new session or process) replays the same sequence.
  auto again = RunKernelTimes("RandomUniform", a, DType::kFloat64, 2);
  CHECK(again[0] == runs[0]);
  CHECK(again[1] == runs[1]);
  // The first run is what a graph evaluation gives.
  Graph g;
  CHECK(EvalDoubles(g, ops::RandomUniform(g, {4}, 0.0, 1.0, 5, DType::kFloat64)) == runs[0]);
}

TEST_CASE("Random distributions have the right moments", "[random]") {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    Graph g;
    auto u = MomentsOf(EvalDoubles(g, ops::RandomUniform(g, {100, 100}, 2.0, 5.0, 1, t)));
    CHECK(u.mean == Approx(3.5).margin(0.05));
    CHECK(u.stddev == Approx(3.0 / std::sqrt(12.0)).margin(0.03));
    CHECK(u.min >= 2.0);
    CHECK(u.max < 5.0);

    auto n = MomentsOf(EvalDoubles(g, ops::RandomNormal(g, {10000}, 2.0, 3, t, 1.0)));
    CHECK(n.mean == Approx(1.0).margin(0.08));
    CHECK(n.stddev == Approx(2.0).margin(0.08));

    auto tn = MomentsOf(EvalDoubles(g, ops::TruncatedNormal(g, {10000}, 0.5, 4, t, -1.0)));
    CHECK(tn.mean == Approx(-1.0).margin(0.03));
    // The std of a normal truncated at 2 sd is 0.8796 sd.
    CHECK(tn.stddev == Approx(0.8796 * 0.5).margin(0.02));
    CHECK(tn.min >= -1.0 - 1.0 - 1e-6);
    CHECK(tn.max <= -1.0 + 1.0 + 1e-6);
  }
}

TEST_CASE("Large random tensors are filled in parallel, deterministically", "[random]") {
  Graph g;
  auto big = ops::RandomNormal(g, {300, 1000}, 1.0, 11);
  auto a = EvalDoubles(g, big);
  auto b = EvalDoubles(g, big);
  CHECK(a == b);
  auto m = MomentsOf(a);
  CHECK(m.mean == Approx(0.0).margin(0.01));
  CHECK(m.stddev == Approx(1.0).margin(0.01));
  // Blocks use distinct streams: the first two 16384-element blocks differ.
  CHECK(std::vector<double>(a.begin(), a.begin() + 8) !=
        std::vector<double>(a.begin() + 16384, a.begin() + 16392));
}

TEST_CASE("Random ops reject bad attributes", "[random]") {
  Graph g1;
  ops::RandomUniform(g1, {2}, 0.0, 1.0, 0, DType::kInt32);
  REQUIRE_FALSE(g1.status().ok());
  CHECK(g1.status().message().find("int32") != std::string::npos);
  Graph g2;
  ops::RandomNormal(g2, {2}, -1.0);
  REQUIRE_FALSE(g2.status().ok());
  CHECK(g2.status().message().find("stddev") != std::string::npos);
  Graph g3;
  ops::TruncatedNormal(g3, {2, -1});
  REQUIRE_FALSE(g3.status().ok());
  CHECK(g3.status().message().find("[2,-1]") != std::string::npos);
}

namespace {

// The three outputs of a candidate sampler node over true_classes.
std::vector<Tensor> Sample(const std::string& op, const Tensor& true_classes, int64_t num_sampled, bool unique,
                           int64_t range_max, int64_t seed) {
  Graph g;
  AttrMap a;
  a.Set("num_true", true_classes.dim(1));
  a.Set("num_sampled", num_sampled);
  a.Set("unique", unique);
  a.Set("range_max", range_max);
  a.Set("seed", seed);
  const int n = g.AddNode(op, {ops::Const(g, true_classes)}, std::move(a), "sampler");
  INFO(g.status().ToString());
  REQUIRE(n >= 0);
  auto v = testing::EvalGraph(g, {}, {Output{&g, n, 0}, Output{&g, n, 1}, Output{&g, n, 2}});
  INFO(v.status().ToString());
  REQUIRE(v.ok());
  return *v;
}

double LogUniformP(int64_t c, int64_t range_max) {
  return std::log((c + 2.0) / (c + 1.0)) / std::log(range_max + 1.0);
}

}  // namespace

TEST_CASE("LogUniformCandidateSampler draws distinct Zipfian classes with TensorFlow's expected counts", "[random]") {
  const Tensor labels = Tensor::FromVector<int64_t>({0, 5, 999, 42}, {2, 2});
  auto out = Sample("LogUniformCandidateSampler", labels, 64, true, 1000, 7);
  const std::vector<int64_t> s = out[0].ToVector<int64_t>();
  REQUIRE(s.size() == 64);
  CHECK(std::set<int64_t>(s.begin(), s.end()).size() == 64);
  for (int64_t v : s) CHECK((v >= 0 && v < 1000));
  // The expected counts are -expm1(tries * log1p(-p)) for one number of tries, the same for every class:
  // solve it from one sampled class and check the rest against it.
  const double p0 = LogUniformP(s[0], 1000);
  const double tries = std::log1p(-out[2].data<float>()[0]) / std::log1p(-p0);
  CHECK(tries >= 64);
  for (int i = 0; i < 64; ++i)
    CHECK(out[2].data<float>()[i] == Approx(-std::expm1(tries * std::log1p(-LogUniformP(s[i], 1000)))).epsilon(1e-4));
  const std::vector<int64_t> t = labels.ToVector<int64_t>();
  REQUIRE(out[1].shape() == Shape{2, 2});
  for (int i = 0; i < 4; ++i)
    CHECK(out[1].data<float>()[i] == Approx(-std::expm1(tries * std::log1p(-LogUniformP(t[i], 1000)))).epsilon(1e-4));
  // Small classes are the frequent ones: over many draws the frequencies follow P(c).
  auto many = Sample("LogUniformCandidateSampler", Tensor::FromVector<int64_t>({1}, {1, 1}), 20000, false, 50, 3);
  std::vector<int> counts(50);
  for (int64_t v : many[0].ToVector<int64_t>()) ++counts[v];
  for (int64_t c : {0, 1, 5, 20})
    CHECK(counts[c] / 20000.0 == Approx(LogUniformP(c, 50)).margin(0.012));
  // Without unique the expected count is num_sampled * P(c).
  CHECK(many[1].data<float>()[0] == Approx(20000 * LogUniformP(1, 50)).epsilon(1e-5));
}

TEST_CASE("Candidate samplers repeat by seed and run, and refuse bad input by name", "[random]") {
  const Tensor labels = Tensor::FromVector<int64_t>({3}, {1, 1});
  auto a = Sample("UniformCandidateSampler", labels, 10, true, 20, 11);
  auto b = Sample("UniformCandidateSampler", labels, 10, true, 20, 11);
  CHECK(a[0].ToVector<int64_t>() == b[0].ToVector<int64_t>());
  {  // one kernel object run twice (as a session's steps): the second run draws anew
    AttrMap attrs;
    attrs.Set("num_true", int64_t{1});
    attrs.Set("num_sampled", int64_t{10});
    attrs.Set("unique", true);
    attrs.Set("range_max", int64_t{20});
    attrs.Set("seed", int64_t{11});
    KernelInit init;
    init.op = "UniformCandidateSampler";
    init.node_name = "sampler";
    init.attrs = &attrs;
    init.input_dtypes = {DType::kInt64};
    init.output_dtypes = {DType::kInt64, DType::kFloat32, DType::kFloat32};
    auto factory = StandardKernelRegistry().Find(init.op, DeviceType::kCPU, DType::kInt64);
    REQUIRE(factory.ok());
    auto kernel = (**factory)(init);
    REQUIRE(kernel.ok());
    CHECK((*kernel)->IsStateful());
    std::vector<std::vector<int64_t>> runs;
    for (int i = 0; i < 2; ++i) {
      const Tensor* in = &labels;
      std::vector<Tensor> outs(3);
      OpKernelContext ctx(&in, 1, outs.data(), 3, nullptr, nullptr, i);
      (*kernel)->Compute(&ctx);
      REQUIRE(ctx.ok());
      runs.push_back(outs[0].ToVector<int64_t>());
    }
    CHECK(runs[0] == a[0].ToVector<int64_t>());  // the first run is what a graph evaluation gives
    CHECK(runs[1] != runs[0]);
  }
  // Uniform, every class once: the whole range, each expected once.
  auto all = Sample("UniformCandidateSampler", labels, 20, true, 20, 5);
  std::vector<int64_t> s = all[0].ToVector<int64_t>();
  std::sort(s.begin(), s.end());
  for (int64_t i = 0; i < 20; ++i) CHECK(s[i] == i);

  Graph g;
  AttrMap attrs;
  attrs.Set("num_true", int64_t{1});
  attrs.Set("num_sampled", int64_t{30});
  attrs.Set("unique", true);
  attrs.Set("range_max", int64_t{20});
  g.AddNode("LogUniformCandidateSampler", {ops::Const(g, labels)}, attrs);
  REQUIRE_FALSE(g.status().ok());
  CHECK(g.status().message().find("num_sampled (30) must be <= range_max (20) when unique") != std::string::npos);
  Graph g2;
  attrs.Set("num_sampled", int64_t{2});
  g2.AddNode("LogUniformCandidateSampler", {ops::Const(g2, Tensor::FromVector<int32_t>({1}, {1, 1}))}, attrs);
  REQUIRE_FALSE(g2.status().ok());
  CHECK(g2.status().message().find("true_classes must be int64") != std::string::npos);
  Graph g3;
  const int n = g3.AddNode("LogUniformCandidateSampler", {ops::Const(g3, Tensor::FromVector<int64_t>({20}, {1, 1}))},
                           attrs);
  auto r = testing::Eval(g3, Output{&g3, n, 0});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("true class 20 is outside [0, range_max = 20)") != std::string::npos);
}
