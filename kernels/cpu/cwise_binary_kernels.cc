// Kernels of the broadcasting arithmetic ops: Add, Sub, Mul, Div, FloorDiv,
// FloorMod, Pow, SquaredDifference, Maximum, Minimum.
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
struct SquaredDifferenceF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return (a - b).square(); }
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
// Floor division and its remainder, as Python's divmod, NumPy and PyTorch
// define them: the remainder takes the divisor's sign (a zero remainder is
// +-0 with the divisor's sign) and a == b * FloorDiv + FloorMod. For floats
// the quotient is (a - mod) / b rounded to the nearest integer, not
// floor(a / b): 1 // 0.1 is 9, as in Python (a / b rounds up to 10.0000...02).
// A zero float divisor gives a / b for the quotient and NaN for the remainder.
template <typename T>
struct FloorDivMod {
  static void Float(T a, T b, T* div_out, T* mod_out) {
    T mod = std::fmod(a, b);
    if (b == T(0)) {
      *div_out = a / b;
      *mod_out = mod;
      return;
    }
    T div = (a - mod) / b;
    if (mod != T(0)) {
      if ((b < T(0)) != (mod < T(0))) {
        mod += b;
        div -= T(1);
      }
    } else {
      mod = std::copysign(T(0), b);
    }
    T floordiv;
    if (div != T(0)) {
      floordiv = std::floor(div);
      if (div - floordiv > T(0.5)) floordiv += T(1);
    } else {
      floordiv = std::copysign(T(0), a / b);
    }
    *div_out = floordiv;
    *mod_out = mod;
  }
  // b != 0 (the kernel refuses zero divisors). b == -1 is taken apart: the
  // most negative value over -1 traps on x86; its floor quotient wraps to
  // itself (two's complement, as NumPy gives) and every remainder is 0.
  static void Int(T a, T b, T* div_out, T* mod_out) {
    if (b == T(-1)) {
      *div_out = IntQuotient<T>()(a, b);
      *mod_out = T(0);
      return;
    }
    T q = a / b, r = a % b;
    if (r != T(0) && ((r < T(0)) != (b < T(0)))) {
      q -= T(1);
      r += b;
    }
    *div_out = q;
    *mod_out = r;
  }
  static void Apply(T a, T b, T* div_out, T* mod_out) {
    if constexpr (std::is_floating_point_v<T>) Float(a, b, div_out, mod_out);
    else Int(a, b, div_out, mod_out);
  }
};
// One half of FloorDivMod per element: the quotient, or the remainder.
template <typename T, bool kRemainder>
struct FloorHalf {
  T operator()(T a, T b) const {
    T d, m;
    FloorDivMod<T>::Apply(a, b, &d, &m);
    return kRemainder ? m : d;
  }
};
template <typename T>
struct FloorDivF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a.binaryExpr(b, FloorHalf<T, false>()); }
};
template <typename T>
struct FloorModF {
  template <class A, class B> static auto Apply(const A& a, const B& b) { return a.binaryExpr(b, FloorHalf<T, true>()); }
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
template <typename T, typename F>
class IntDivKernel : public OpKernel {
 public:
  IntDivKernel(const KernelInit& init, Status*) : op_(init.op) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& b = ctx->input(1);
    const T* p = b.data<T>();
    if (std::find(p, p + b.num_elements(), T(0)) != p + b.num_elements()) {
      ctx->SetStatus(InvalidArgument("integer division by zero in " + op_ + " (divisor shape " +
                                     ShapeString(b.shape()) + ")"));
      return;
    }
    cwise::BinaryCompute<T, T, F>(ctx, DTypeOf<T>::value);
  }

 private:
  std::string op_;
};

// A division-like op on float32, float64, int32 and int64; F<T> is its functor.
template <template <typename> class F>
void RegisterDivision(KernelRegistry& reg, const std::string& op) {
  RegisterCPU<BinaryKernel<float, float, F<float>>>(reg, op, {DType::kFloat32});
  RegisterCPU<BinaryKernel<double, double, F<double>>>(reg, op, {DType::kFloat64});
  RegisterCPU<IntDivKernel<int32_t, F<int32_t>>>(reg, op, {DType::kInt32});
  RegisterCPU<IntDivKernel<int64_t, F<int64_t>>>(reg, op, {DType::kInt64});
}

template <typename F>
void RegisterAllNumeric(KernelRegistry& reg, const std::string& op) {
  RegisterCPU<BinaryKernel<float, float, F>>(reg, op, {DType::kFloat32});
  RegisterCPU<BinaryKernel<double, double, F>>(reg, op, {DType::kFloat64});
  RegisterCPU<BinaryKernel<int32_t, int32_t, F>>(reg, op, {DType::kInt32});
  RegisterCPU<BinaryKernel<int64_t, int64_t, F>>(reg, op, {DType::kInt64});
}

// The small integers (TensorFlow's int8, int16, uint8 kernels of these ops): results wrap as TF's do.
template <typename F>
void RegisterSmallInts(KernelRegistry& reg, const std::string& op) {
  RegisterCPU<BinaryKernel<int8_t, int8_t, F>>(reg, op, {DType::kInt8});
  RegisterCPU<BinaryKernel<int16_t, int16_t, F>>(reg, op, {DType::kInt16});
  RegisterCPU<BinaryKernel<uint8_t, uint8_t, F>>(reg, op, {DType::kUInt8});
}

}  // namespace

void RegisterCwiseBinaryKernels(KernelRegistry& reg) {
  RegisterAllNumeric<AddF>(reg, "Add");
  RegisterAllNumeric<SubF>(reg, "Sub");
  RegisterAllNumeric<MulF>(reg, "Mul");
  RegisterAllNumeric<SquaredDifferenceF>(reg, "SquaredDifference");
  RegisterAllNumeric<MaxF>(reg, "Maximum");
  RegisterAllNumeric<MinF>(reg, "Minimum");
  RegisterSmallInts<AddF>(reg, "Add");
  RegisterSmallInts<SubF>(reg, "Sub");
  RegisterSmallInts<MulF>(reg, "Mul");
  RegisterSmallInts<MaxF>(reg, "Maximum");
  RegisterSmallInts<MinF>(reg, "Minimum");
  RegisterCPU<BinaryKernel<float, float, DivF>>(reg, "Div", {DType::kFloat32});
  RegisterCPU<BinaryKernel<double, double, DivF>>(reg, "Div", {DType::kFloat64});
  RegisterCPU<IntDivKernel<int32_t, IntDivF<int32_t>>>(reg, "Div", {DType::kInt32});
  RegisterCPU<IntDivKernel<int64_t, IntDivF<int64_t>>>(reg, "Div", {DType::kInt64});
  RegisterDivision<FloorDivF>(reg, "FloorDiv");
  RegisterDivision<FloorModF>(reg, "FloorMod");
  RegisterCPU<BinaryKernel<float, float, PowF<float>>>(reg, "Pow", {DType::kFloat32});
  RegisterCPU<BinaryKernel<double, double, PowF<double>>>(reg, "Pow", {DType::kFloat64});
}

}  // namespace sf
