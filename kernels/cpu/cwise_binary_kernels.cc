// Kernels of the broadcasting arithmetic ops: Add, Sub, Mul, Div, Pow,
// Maximum, Minimum.
#include "kernels/cpu/cwise_common.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace sf {
namespace {

using cwise::BinaryKernel;

struct AddF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a + b; }
};
struct SubF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a - b; }
};
struct MulF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a * b; }
};
struct DivF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a / b; }
};
// NaN in either operand gives NaN, as in NumPy and PyTorch (Eigen's default
// keeps whichever operand the comparison favours).
struct MaxF {
  template <class A, class B> static auto Apply(const A& a, const B& b) {
    return a.template cwiseMax<Eigen::PropagateNaN>(b);
  }
};
struct MinF {
  template <class A, class B> static auto Apply(const A& a, const B& b) {
    return a.template cwiseMin<Eigen::PropagateNaN>(b);
  }
};
// Truncating integer division; the one quotient that overflows, the most
// negative value over -1, wraps to itself (two's complement, as NumPy gives)
// instead of trapping: x86 raises SIGFPE for it.
template <typename T>
struct IntQuotient {
  T operator()(T a, T b) const {
    using U = std::make_unsigned_t<T>;
    return b == T(-1) ? static_cast<T>(U(0) - static_cast<U>(a)) : a / b;
  }
};
template <typename T>
struct IntDivF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a.binaryExpr(b, IntQuotient<T>()); }
};
// std::pow per element, not Eigen's scalar_pow_op: its vectorised
// generic_pow (Eigen 3.4) drops the sign of a -0 or -inf base raised to an odd
// integer, so pow(-inf, 3) and pow(-0, -1) gave +inf instead of -inf (and
// pow(-inf, -3), pow(-0, 3) +0, not -0) in every full SIMD packet; a short
// tensor, evaluated scalar, was right. A functor
// without a packetOp makes Eigen evaluate it one element at a time.
template <typename T>
struct StdPow {
  T operator()(T a, T b) const { return std::pow(a, b); }
};
template <typename T>
struct PowF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a.binaryExpr(b, StdPow<T>()); }
};

// Integer division by zero is undefined behaviour in C++, so it is refused
// up front with an error instead of crashing the process.
template <typename T>
class IntDivKernel : public OpKernel {
 public:
  IntDivKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& b = ctx->input(1);
    const T* p = b.data<T>();
    if (std::find(p, p + b.num_elements(), T(0)) != p + b.num_elements()) {
      ctx->SetStatus(InvalidArgument("integer division by zero (divisor shape " +
                                     ShapeString(b.shape()) + ")"));
      return;
    }
    cwise::BinaryCompute<T, T, IntDivF<T>>(ctx, DTypeOf<T>::value);
  }
};

template <typename F>
void RegisterAllNumeric(KernelRegistry& reg, const std::string& op) {
  RegisterCPU<BinaryKernel<float, float, F>>(reg, op, {DType::kFloat32});
  RegisterCPU<BinaryKernel<double, double, F>>(reg, op, {DType::kFloat64});
  RegisterCPU<BinaryKernel<int32_t, int32_t, F>>(reg, op, {DType::kInt32});
  RegisterCPU<BinaryKernel<int64_t, int64_t, F>>(reg, op, {DType::kInt64});
}

}  // namespace

void RegisterCwiseBinaryKernels(KernelRegistry& reg) {
  RegisterAllNumeric<AddF>(reg, "Add");
  RegisterAllNumeric<SubF>(reg, "Sub");
  RegisterAllNumeric<MulF>(reg, "Mul");
  RegisterAllNumeric<MaxF>(reg, "Maximum");
  RegisterAllNumeric<MinF>(reg, "Minimum");
  RegisterCPU<BinaryKernel<float, float, DivF>>(reg, "Div", {DType::kFloat32});
  RegisterCPU<BinaryKernel<double, double, DivF>>(reg, "Div", {DType::kFloat64});
  RegisterCPU<IntDivKernel<int32_t>>(reg, "Div", {DType::kInt32});
  RegisterCPU<IntDivKernel<int64_t>>(reg, "Div", {DType::kInt64});
  RegisterCPU<BinaryKernel<float, float, PowF<float>>>(reg, "Pow", {DType::kFloat32});
  RegisterCPU<BinaryKernel<double, double, PowF<double>>>(reg, "Pow", {DType::kFloat64});
}

}  // namespace sf
