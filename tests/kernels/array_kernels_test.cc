// Direct tests of UnsortedSegmentSum, Unique and Where (kernels/cpu/array_kernels.cc):
// values against loops written here, and the errors a bad feed gets.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_kernels.h"

using namespace sf;

namespace {

// Runs op's CPU kernel (keyed by input 0's dtype) on inputs; its outputs, or the error.
Result<std::vector<Tensor>> Run(const std::string& op, const std::vector<Tensor>& inputs, int num_outputs = 1) {
  const KernelRegistry& reg = StandardKernelRegistry();
  SF_ASSIGN_OR_RETURN(const KernelFactory* f, reg.Find(op, DeviceType::kCPU, inputs[0].dtype()));
  AttrMap attrs;
  KernelInit init;
  init.op = op;
  init.node_name = op;
  init.attrs = &attrs;
  for (const Tensor& t : inputs) init.input_dtypes.push_back(t.dtype());
  SF_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> k, (*f)(init));
  std::vector<const Tensor*> ins;
  for (const Tensor& t : inputs) ins.push_back(&t);
  std::vector<Tensor> outs(num_outputs);
  OpKernelContext ctx(ins.data(), static_cast<int>(ins.size()), outs.data(), num_outputs, nullptr, nullptr, 1);
  k->Compute(&ctx);
  if (!ctx.ok()) return ctx.status();
  return outs;
}

Tensor I32(int32_t v) { return Tensor::FromVector<int32_t>({v}, {}); }

}  // namespace

TEST_CASE("UnsortedSegmentSum sums rows by segment, ids a prefix of data's shape", "[array]") {
  // data [2, 2, 3], ids [2, 2]: out[ids[i][j]] += data[i][j].
  std::vector<double> d(12);
  for (int i = 0; i < 12; ++i) d[i] = i * 0.5 - 2;
  const std::vector<int64_t> ids = {3, 0, 3, 1};
  auto r = Run("UnsortedSegmentSum", {Tensor::FromVector<double>(d, {2, 2, 3}),
                                      Tensor::FromVector<int64_t>(ids, {2, 2}), I32(5)});
  REQUIRE(r.ok());
  const Tensor& out = (*r)[0];
  REQUIRE(out.shape() == Shape{5, 3});
  std::vector<double> want(15, 0.0);
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 3; ++c) want[ids[i] * 3 + c] += d[i * 3 + c];
  CHECK(out.ToVector<double>() == want);
  // Every id is checked, and the first bad one named; num_segments must make sense.
  auto bad = Run("UnsortedSegmentSum", {Tensor::FromVector<float>({1, 2, 3}), Tensor::FromVector<int32_t>({0, -1, 7}),
                                        I32(3)});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("index -1 (at position 1"));
  CHECK_THAT(bad.status().message(), Catch::Contains("out of range: num_segments is 3"));
  auto neg = Run("UnsortedSegmentSum", {Tensor::FromVector<float>({1}), Tensor::FromVector<int32_t>({0}), I32(-2)});
  REQUIRE_FALSE(neg.ok());
  CHECK_THAT(neg.status().message(), Catch::Contains("num_segments must be >= 0"));
  auto shape = Run("UnsortedSegmentSum", {Tensor::FromVector<float>({1, 2}), Tensor::FromVector<int32_t>({0, 1, 1}),
                                          I32(2)});
  REQUIRE_FALSE(shape.ok());
  CHECK_THAT(shape.status().message(), Catch::Contains("must be a prefix of data's shape [2]"));
  auto huge = Run("UnsortedSegmentSum", {Tensor::FromVector<float>({1}, {1, 1}), Tensor::FromVector<int32_t>({0}),
                                         Tensor::FromVector<int64_t>({int64_t{1} << 62}, {})});
  REQUIRE_FALSE(huge.ok());  // the output alone would not fit: refused before allocating
  CHECK_THAT(huge.status().message(), Catch::Contains("too many elements"));
}

TEST_CASE("Unique keeps first appearances in order; -0 and +0 are one, each NaN its own", "[array]") {
  auto r = Run("Unique", {Tensor::FromVector<int64_t>({7, -3, 7, 7, 0, -3, 9})}, 2);
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<int64_t>() == std::vector<int64_t>{7, -3, 0, 9});
  CHECK((*r)[1].ToVector<int32_t>() == std::vector<int32_t>{0, 1, 0, 0, 2, 1, 3});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto f = Run("Unique", {Tensor::FromVector<float>({0.f, -0.f, nan, 1.f, nan})}, 2);
  REQUIRE(f.ok());
  REQUIRE((*f)[0].num_elements() == 4);
  CHECK((*f)[1].ToVector<int32_t>() == std::vector<int32_t>{0, 0, 1, 2, 3});
  auto m = Run("Unique", {Tensor::FromVector<int32_t>({1, 2, 3, 4}, {2, 2})}, 2);
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.status().message(), Catch::Contains("must be a vector"));
}

TEST_CASE("Where gives the coordinates of the true elements, row-major", "[array]") {
  Tensor c(DType::kBool, {2, 3});
  const bool v[6] = {false, true, false, true, false, true};
  std::copy(v, v + 6, c.data<bool>());
  auto r = Run("Where", {c});
  REQUIRE(r.ok());
  REQUIRE((*r)[0].shape() == Shape{3, 2});
  CHECK((*r)[0].ToVector<int64_t>() == std::vector<int64_t>{0, 1, 1, 0, 1, 2});
  Tensor none(DType::kBool, {0, 4});
  auto e = Run("Where", {none});
  REQUIRE(e.ok());
  CHECK((*e)[0].shape() == Shape{0, 2});
}
