// Kernels that build an output shape from a run-time tensor (a fed shape)
// must reject negative or overflowing dims with a clear error rather than
// allocate from them.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "kernels/cpu/cpu_kernels.h"

using namespace sf;

namespace {

// Runs op's CPU kernel on inputs with num_outputs outputs, keyed by key_dtype;
// returns output 0 or the kernel's error.
Result<Tensor> RunKernel(const std::string& op, const std::vector<Tensor>& inputs, DType key_dtype,
                         int num_outputs, const AttrMap& attrs = {}) {
  SF_ASSIGN_OR_RETURN(const KernelFactory* f,
                      StandardKernelRegistry().Find(op, DeviceType::kCPU, key_dtype));
  KernelInit init;
  init.op = op;
  init.node_name = op;
  init.attrs = &attrs;
  for (const Tensor& t : inputs) init.input_dtypes.push_back(t.dtype());
  init.output_dtypes.assign(num_outputs, inputs[0].dtype());
  SF_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> k, (*f)(init));
  std::vector<const Tensor*> ins;
  for (const Tensor& t : inputs) ins.push_back(&t);
  std::vector<Tensor> outs(num_outputs);
  OpKernelContext ctx(ins.data(), static_cast<int>(ins.size()), outs.data(), num_outputs, nullptr,
                      nullptr, 1);
  k->Compute(&ctx);
  if (!ctx.ok()) return ctx.status();
  return outs[0];
}

bool Mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

constexpr int64_t kHuge = std::numeric_limits<int64_t>::max() / 4;

}  // namespace

TEST_CASE("Fill rejects negative and overflowing dims", "[shape][bad_input]") {
  const Tensor v = Tensor::Scalar<float>(1.0f);
  auto neg = RunKernel("Fill", {Tensor::FromVector<int64_t>({2, -3}), v}, DType::kInt64, 1);
  REQUIRE_FALSE(neg.ok());
  CHECK(Mentions(neg.status(), "negative"));
  CHECK(Mentions(neg.status(), "[2,-3]"));
  auto huge = RunKernel("Fill", {Tensor::FromVector<int64_t>({kHuge, kHuge}), v}, DType::kInt64, 1);
  REQUIRE_FALSE(huge.ok());
  CHECK(Mentions(huge.status(), "too many elements"));
  auto ok = RunKernel("Fill", {Tensor::FromVector<int32_t>({2, 0}), v}, DType::kInt32, 1);
  REQUIRE(ok.ok());
  CHECK(ok->shape() == Shape{2, 0});
}

TEST_CASE("Reshape rejects a shape whose element count overflows", "[shape][bad_input]") {
  const Tensor x = Tensor::Zeros(DType::kFloat32, {0});
  // 2^62 * 4 wraps to 0 in int64, which would otherwise match 0 elements.
  auto r = RunKernel("Reshape", {x, Tensor::FromVector<int64_t>({int64_t{1} << 62, 4})},
                     DType::kFloat32, 1);
  REQUIRE_FALSE(r.ok());
  CHECK(Mentions(r.status(), "too many elements"));
}

TEST_CASE("GatherGrad rejects a negative params shape", "[array][bad_input]") {
  const Tensor dy = Tensor::Zeros(DType::kFloat32, {0});
  const Tensor indices = Tensor::Zeros(DType::kInt32, {0});
  auto r = RunKernel("GatherGrad", {dy, indices, Tensor::FromVector<int64_t>({-3})},
                     DType::kFloat32, 1);
  REQUIRE_FALSE(r.ok());
  CHECK(Mentions(r.status(), "negative"));
}

TEST_CASE("ConcatGrad rejects negative input sizes", "[array][bad_input]") {
  const Tensor dy = Tensor::FromVector<float>({1, 2});
  AttrMap attrs;
  attrs.Set("axis", int64_t{0});
  // -1 + 3 == 2 matches dy, so only the sign check stops it.
  auto r = RunKernel("ConcatGrad",
                     {dy, Tensor::FromVector<int64_t>({-1}), Tensor::FromVector<int64_t>({3})},
                     DType::kFloat32, 2, attrs);
  REQUIRE_FALSE(r.ok());
  CHECK(Mentions(r.status(), "negative"));
}

TEST_CASE("StridedSliceGrad rejects a negative shape", "[array][bad_input]") {
  AttrMap attrs;
  attrs.Set("begin", std::vector<int64_t>{0});
  attrs.Set("end", std::vector<int64_t>{1});
  attrs.Set("strides", std::vector<int64_t>{1});
  auto r = RunKernel("StridedSliceGrad",
                     {Tensor::FromVector<float>({1}), Tensor::FromVector<int64_t>({-2})},
                     DType::kFloat32, 1, attrs);
  REQUIRE_FALSE(r.ok());
  CHECK(Mentions(r.status(), "negative"));
}
