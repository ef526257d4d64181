// Direct tests of the math and shape kernels: dtype coverage, and the
// small-tensor path that must stay off the thread pool (per-op overhead).
#include <catch2/catch.hpp>

#include "kernels/compute_pool.h"
#include "kernels/cpu/cpu_kernels.h"

using namespace sf;

namespace {

// Runs op's CPU kernel on inputs; pool may be null (small inputs never use it).
Result<Tensor> RunKernel(const std::string& op, const std::vector<Tensor>& inputs, DType out_dtype,
                         const AttrMap& attrs = {}, ComputePool* pool = nullptr) {
  const KernelRegistry& reg = StandardKernelRegistry();
  SF_ASSIGN_OR_RETURN(const KernelFactory* f, reg.Find(op, DeviceType::kCPU, inputs[0].dtype()));
  KernelInit init;
  init.op = op;
  init.node_name = op;
  init.attrs = &attrs;
  for (const Tensor& t : inputs) init.input_dtypes.push_back(t.dtype());
  init.output_dtypes = {out_dtype};
  SF_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> k, (*f)(init));
  std::vector<const Tensor*> ins;
  for (const Tensor& t : inputs) ins.push_back(&t);
  Tensor out;
  OpKernelContext ctx(ins.data(), static_cast<int>(ins.size()), &out, 1, pool, nullptr, 1);
  k->Compute(&ctx);
  if (!ctx.ok()) return ctx.status();
  return out;
}

}  // namespace

TEST_CASE("Every float math op has float32 and float64 kernels", "[math]") {
  const KernelRegistry& reg = StandardKernelRegistry();
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Maximum", "Minimum", "Neg", "Abs",
                         "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Sign", "Reciprocal", "AddN", "Cast",
                         "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "Sum",
                         "Mean", "Max", "Min", "Prod", "ArgMax", "SumToShape", "ZerosLike", "OnesLike"}) {
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
      const bool float_only = std::string(op) == "Pow" || std::string(op) == "Sqrt" ||
                              std::string(op) == "Rsqrt" || std::string(op) == "Exp" ||
                              std::string(op) == "Log" || std::string(op) == "Reciprocal";
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
