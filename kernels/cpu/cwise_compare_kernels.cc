// Kernels of the broadcasting comparisons (bool results) and the logical ops.
#include "kernels/cpu/cwise_common.h"

namespace sf {
namespace {

using cwise::BinaryKernel;

struct EqF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a == b; }
};
struct NeF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a != b; }
};
struct LtF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a < b; }
};
struct LeF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a <= b; }
};
struct GtF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a > b; }
};
struct GeF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a >= b; }
};
struct AndF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a && b; }
};
struct OrF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a || b; }
};

template <typename F>
void RegisterCompare(KernelRegistry& reg, const std::string& op) {
  RegisterCPU<BinaryKernel<float, bool, F>>(reg, op, {DType::kFloat32});
  RegisterCPU<BinaryKernel<double, bool, F>>(reg, op, {DType::kFloat64});
  RegisterCPU<BinaryKernel<int32_t, bool, F>>(reg, op, {DType::kInt32});
  RegisterCPU<BinaryKernel<int64_t, bool, F>>(reg, op, {DType::kInt64});
  RegisterCPU<BinaryKernel<int8_t, bool, F>>(reg, op, {DType::kInt8});
  RegisterCPU<BinaryKernel<int16_t, bool, F>>(reg, op, {DType::kInt16});
  RegisterCPU<BinaryKernel<uint8_t, bool, F>>(reg, op, {DType::kUInt8});
}

}  // namespace

void RegisterCwiseCompareKernels(KernelRegistry& reg) {
  RegisterCompare<EqF>(reg, "Equal");
  RegisterCompare<NeF>(reg, "NotEqual");
  RegisterCompare<LtF>(reg, "Less");
  RegisterCompare<LeF>(reg, "LessEqual");
  RegisterCompare<GtF>(reg, "Greater");
  RegisterCompare<GeF>(reg, "GreaterEqual");
  RegisterCPU<BinaryKernel<bool, bool, EqF>>(reg, "Equal", {DType::kBool});
  RegisterCPU<BinaryKernel<bool, bool, NeF>>(reg, "NotEqual", {DType::kBool});
  RegisterCPU<BinaryKernel<bool, bool, AndF>>(reg, "LogicalAnd", {DType::kBool});
  RegisterCPU<BinaryKernel<bool, bool, OrF>>(reg, "LogicalOr", {DType::kBool});
}

}  // namespace sf
