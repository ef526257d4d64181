// Kernels of the math ops: unary element-wise functions, AddN, Cast, Select,
// LogicalNot; RegisterMathKernels also registers the binary, comparison and
// reduction kernels of the other math files.
#include "kernels/cpu/cwise_common.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace sf {
namespace {

using cwise::Assign;
using cwise::UnaryKernel;

// -0.0 - x, not -x: Eigen 3.4's SSE/AVX/AVX-512 pnegate is 0.0 - x, which
// gives +0.0 for -(+0.0) in every full SIMD packet (1 / -x then came out +inf).
// -0.0 - x is -x for every float, NaN included; for integers it is 0 - x.
struct NegF {
  template <class X> static auto Apply(const X& x) {
    using T = std::remove_cv_t<typename X::Scalar>;
    return x.constant(T(-0.0)) - x;
  }
};
struct AbsF { template <class X> static auto Apply(const X& x) { return x.abs(); } };
struct SquareF { template <class X> static auto Apply(const X& x) { return x.square(); } };
// Eigen's packet rsqrt and log clamp subnormal arguments to the smallest
// normal (log of any subnormal float came out -87.34; rsqrt of a subnormal
// double NaN or inf): those are redone with the C library.
template <typename T>
bool IsSubnormal(T x) {
  return x > T(0) && x < std::numeric_limits<T>::min();
}
struct RsqrtF {
  template <class X> static auto Apply(const X& x) { return x.rsqrt(); }
  template <typename T> static bool Exact(T x) { return !IsSubnormal(x); }
  template <typename T> static T Scalar(T x) { return T(1) / std::sqrt(x); }
};
struct LogF {
  template <class X> static auto Apply(const X& x) { return x.log(); }
  template <typename T> static bool Exact(T x) { return !IsSubnormal(x); }
  template <typename T> static T Scalar(T x) { return std::log(x); }
};
struct SignF { template <class X> static auto Apply(const X& x) { return x.sign(); } };
struct ReciprocalF { template <class X> static auto Apply(const X& x) { return x.inverse(); } };
struct NotFn { bool operator()(bool v) const { return !v; } };

// Exp: Eigen's vector exp clamps its argument (to about [-709.8, 709.8] for
// double, [-88.4, 88.4] for float), so exp(-1000) came out 5.6e-309 instead
// of 0, exp(89.f) finite instead of inf, and subnormal results were wrong.
// Elements outside the range where it is exact (rare: their results are
// subnormal, zero or infinite) are redone with std::exp.
struct ExpF {
  template <class X> static auto Apply(const X& x) { return x.exp(); }
  template <typename T> static bool Exact(T x) {
    return std::fabs(x) <= (std::is_same_v<T, double> ? T(708) : T(87));
  }
  template <typename T> static T Scalar(T x) { return std::exp(x); }
};
// Sqrt: with EIGEN_FAST_MATH (Eigen's default) the AVX-512 psqrt is x *
// rsqrt(x) refined by one Newton step: sqrt(inf) came out inf * 0 = NaN, and
// float64 results were off by an ulp (sqrt(2.25) != 1.5), in every full SIMD
// packet. std::sqrt per element (a functor with no packet op) is exact IEEE.
template <typename T>
struct ExactSqrt {
  T operator()(T v) const { return std::sqrt(v); }
};
struct SqrtF {
  template <class X> static auto Apply(const X& x) {
    return x.unaryExpr(ExactSqrt<std::remove_cv_t<typename X::Scalar>>());
  }
};
struct NotF { template <class X> static auto Apply(const X& x) { return x.unaryExpr(NotFn()); } };

// Functions of the C library per element, exact to its ulp: Eigen's packet
// sin, cos, log1p and expm1 are range-reduced approximations (its exp and
// sqrt were off at the edges too), and a functor with no packet op makes
// Eigen evaluate one element at a time.
template <typename Fn>
struct StdUnaryF {
  template <class X> static auto Apply(const X& x) {
    using T = std::remove_cv_t<typename X::Scalar>;
    return x.unaryExpr([](T v) { return static_cast<T>(Fn()(v)); });
  }
};
struct SinFn { template <class T> T operator()(T v) const { return std::sin(v); } };
struct CosFn { template <class T> T operator()(T v) const { return std::cos(v); } };
struct Log1pFn { template <class T> T operator()(T v) const { return std::log1p(v); } };
struct Expm1Fn { template <class T> T operator()(T v) const { return std::expm1(v); } };

// IsNan, IsInf, IsFinite: a bool per element of a float tensor.
template <typename T, bool (*kPred)(T)>
class FloatPredicateKernel : public OpKernel {
 public:
  FloatPredicateKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor& out = ctx->allocate_output(0, DType::kBool, x.shape());
    const T* in = x.data<T>();
    bool* o = out.data<bool>();
    for (int64_t i = 0, n = x.num_elements(); i < n; ++i) o[i] = kPred(in[i]);
  }
};
// Floor, Ceil and Round are exact in Eigen's packets too (one rounding
// instruction each); Round is rint, halves to even as TensorFlow's and
// NumPy's (Eigen's round() takes them away from zero).
struct FloorF { template <class X> static auto Apply(const X& x) { return x.floor(); } };
struct CeilF { template <class X> static auto Apply(const X& x) { return x.ceil(); } };
struct RoundF { template <class X> static auto Apply(const X& x) { return x.rint(); } };

template <typename T> bool IsNanOf(T v) { return std::isnan(v); }
template <typename T> bool IsInfOf(T v) { return std::isinf(v); }
template <typename T> bool IsFiniteOf(T v) { return std::isfinite(v); }

template <typename F>
void RegisterUnary(KernelRegistry& reg, const std::string& op, bool ints) {
  RegisterCPU<UnaryKernel<float, F>>(reg, op, {DType::kFloat32});
  RegisterCPU<UnaryKernel<double, F>>(reg, op, {DType::kFloat64});
  if (ints) {
    RegisterCPU<UnaryKernel<int32_t, F>>(reg, op, {DType::kInt32});
    RegisterCPU<UnaryKernel<int64_t, F>>(reg, op, {DType::kInt64});
  }
}

// Sums any number of same-shape tensors.
template <typename T>
class AddNKernel : public OpKernel {
 public:
  AddNKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const int n = ctx->num_inputs();
    const Tensor& x0 = ctx->input(0);
    for (int i = 1; i < n; ++i) {
      if (ctx->input(i).shape() != x0.shape()) {
        ctx->SetStatus(InvalidArgument("AddN inputs must have one shape: input 0 is " +
                                       ShapeString(x0.shape()) + " but input " + std::to_string(i) +
                                       " is " + ShapeString(ctx->input(i).shape())));
        return;
      }
    }
    if (n == 1) {
      ctx->set_output(0, x0);
      return;
    }
    Tensor& out = ctx->allocate_output(0, x0.dtype(), x0.shape());
    const int64_t m = out.num_elements();
    // Up to four inputs per pass: one read of each and one write of the sum
    // (and one dispatch to the pool), not a pass per input over the output.
    auto in = [&](int i) { return ctx->input(i).flat<T>(); };
    auto o = out.flat<T>();
    int i = 0;
    switch (n) {
      case 2: Assign(ctx, m, o, in(0) + in(1)); i = 2; break;
      case 3: Assign(ctx, m, o, in(0) + in(1) + in(2)); i = 3; break;
      default: Assign(ctx, m, o, in(0) + in(1) + in(2) + in(3)); i = 4; break;
    }
    for (; i + 3 <= n; i += 3) Assign(ctx, m, o, o + in(i) + in(i + 1) + in(i + 2));
    if (n - i == 2) Assign(ctx, m, o, o + in(i) + in(i + 1));
    else if (n - i == 1) Assign(ctx, m, o, o + in(i));
  }
};

// Keyed by the input dtype; converts to any numeric output dtype (attr DstT).
template <typename T>
class CastKernel : public OpKernel {
 public:
  CastKernel(const KernelInit& init, Status* s) {
    auto d = init.Attr<DType>("DstT");
    if (!d.ok()) *s = d.status();
    else dst_ = *d;
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    if (dst_ == x.dtype()) {
      ctx->set_output(0, x);
      return;
    }
    Tensor out(dst_, x.shape());
    const bool ok = DispatchNumeric(dst_, [&](auto tag) {
      using U = typename decltype(tag)::type;
      Assign(ctx, x.num_elements(), out.flat<U>(), x.flat<T>().template cast<U>());
    });
    if (!ok) {
      ctx->SetStatus(Unimplemented(std::string("Cast from ") + DTypeName(x.dtype()) + " to " +
                                   DTypeName(dst_) + " is not supported"));
      return;
    }
    ctx->set_output(0, std::move(out));
  }

 private:
  DType dst_ = DType::kInvalid;
};

template <int N>
Eigen::DSizes<Eigen::Index, N> PaddedDims(const Shape& s) {
  Eigen::DSizes<Eigen::Index, N> d;
  const int pad = N - static_cast<int>(s.size());
  for (int i = 0; i < N; ++i) d[i] = i < pad ? 1 : s[i - pad];
  return d;
}

template <int N>
Eigen::array<Eigen::Index, N> FactorsTo(const Eigen::DSizes<Eigen::Index, N>& in, const Shape& out) {
  Eigen::array<Eigen::Index, N> f;
  for (int i = 0; i < N; ++i) f[i] = in[i] == out[i] ? 1 : out[i];
  return f;
}

// Select(cond, a, b): keyed by cond's dtype (bool); dispatches on a's dtype.
// All three operands broadcast together (NumPy rules).
class SelectKernel : public OpKernel {
 public:
  SelectKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& c = ctx->input(0);
    const Tensor& a = ctx->input(1);
    const Tensor& b = ctx->input(2);
    if (c.dtype() != DType::kBool || a.dtype() != b.dtype()) {
      ctx->SetStatus(InvalidArgument(std::string("Select needs a bool condition and two values of "
                                                 "one dtype, got ") +
                                     DTypeName(c.dtype()) + ", " + DTypeName(a.dtype()) + ", " +
                                     DTypeName(b.dtype())));
      return;
    }
    const bool ok = DispatchNumeric(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Run<T>(ctx, c, a, b);
    });
    if (!ok) ctx->SetStatus(Unimplemented(std::string("Select of ") + DTypeName(a.dtype())));
  }

 private:
  template <typename T>
  void Run(OpKernelContext* ctx, const Tensor& c, const Tensor& a, const Tensor& b) {
    if (c.shape() == a.shape() && a.shape() == b.shape()) {
      Tensor& out = ctx->allocate_output(0, a.dtype(), a.shape());
      Assign(ctx, out.num_elements(), out.flat<T>(), c.flat<bool>().select(a.flat<T>(), b.flat<T>()));
      return;
    }
    cwise::Broadcast bc1, bc2;
    Status s = cwise::ComputeBroadcast(c.shape(), a.shape(), &bc1);
    if (s.ok()) s = cwise::ComputeBroadcast(bc1.out_shape, b.shape(), &bc2);
    if (!s.ok()) {
      ctx->SetStatus(InvalidArgument("Select operands do not broadcast: condition " +
                                     ShapeString(c.shape()) + ", values " + ShapeString(a.shape()) +
                                     " and " + ShapeString(b.shape())));
      return;
    }
    const Shape& os = bc2.out_shape;
    Tensor& out = ctx->allocate_output(0, a.dtype(), os);
    const int64_t n = out.num_elements();
    if (n == 0) return;
    auto run = [&](auto rank_tag) {
      constexpr int N = decltype(rank_tag)::value;
      auto cd = PaddedDims<N>(c.shape()), ad = PaddedDims<N>(a.shape()), bd = PaddedDims<N>(b.shape());
      Shape po(N, 1);
      for (int i = 0; i < static_cast<int>(os.size()); ++i) po[N - os.size() + i] = os[i];
      cwise::RankMap<const bool, N> cm(c.data<bool>(), cd);
      cwise::RankMap<const T, N> am(a.data<T>(), ad);
      cwise::RankMap<const T, N> bm(b.data<T>(), bd);
      cwise::RankMap<T, N> om(out.data<T>(), PaddedDims<N>(po));
      Assign(ctx, n, om,
             cm.broadcast(FactorsTo<N>(cd, po))
                 .select(am.broadcast(FactorsTo<N>(ad, po)), bm.broadcast(FactorsTo<N>(bd, po))));
    };
    switch (os.size()) {
      case 0:
      case 1: run(std::integral_constant<int, 1>()); break;
      case 2: run(std::integral_constant<int, 2>()); break;
      case 3: run(std::integral_constant<int, 3>()); break;
      case 4: run(std::integral_constant<int, 4>()); break;
      case 5: run(std::integral_constant<int, 5>()); break;
      default:
        ctx->SetStatus(Unimplemented("Select with broadcasting supports rank <= 5, got " +
                                     ShapeString(os)));
    }
  }
};

}  // namespace

void RegisterMathKernels(KernelRegistry& reg) {
  RegisterUnary<NegF>(reg, "Neg", true);
  RegisterUnary<AbsF>(reg, "Abs", true);
  RegisterUnary<SquareF>(reg, "Square", true);
  RegisterUnary<SignF>(reg, "Sign", true);
  RegisterUnary<SqrtF>(reg, "Sqrt", false);
  RegisterUnary<RsqrtF>(reg, "Rsqrt", false);
  RegisterUnary<ExpF>(reg, "Exp", false);
  RegisterUnary<LogF>(reg, "Log", false);
  RegisterUnary<ReciprocalF>(reg, "Reciprocal", false);
  RegisterUnary<FloorF>(reg, "Floor", false);
  RegisterUnary<CeilF>(reg, "Ceil", false);
  RegisterUnary<RoundF>(reg, "Round", false);
  RegisterUnary<StdUnaryF<SinFn>>(reg, "Sin", false);
  RegisterUnary<StdUnaryF<CosFn>>(reg, "Cos", false);
  RegisterUnary<StdUnaryF<Log1pFn>>(reg, "Log1p", false);
  RegisterUnary<StdUnaryF<Expm1Fn>>(reg, "Expm1", false);
  RegisterCPU<FloatPredicateKernel<float, IsNanOf<float>>>(reg, "IsNan", {DType::kFloat32});
  RegisterCPU<FloatPredicateKernel<double, IsNanOf<double>>>(reg, "IsNan", {DType::kFloat64});
  RegisterCPU<FloatPredicateKernel<float, IsInfOf<float>>>(reg, "IsInf", {DType::kFloat32});
  RegisterCPU<FloatPredicateKernel<double, IsInfOf<double>>>(reg, "IsInf", {DType::kFloat64});
  RegisterCPU<FloatPredicateKernel<float, IsFiniteOf<float>>>(reg, "IsFinite", {DType::kFloat32});
  RegisterCPU<FloatPredicateKernel<double, IsFiniteOf<double>>>(reg, "IsFinite", {DType::kFloat64});
  RegisterCPU<UnaryKernel<bool, NotF>>(reg, "LogicalNot", {DType::kBool});

  RegisterCPU<AddNKernel<float>>(reg, "AddN", {DType::kFloat32});
  RegisterCPU<AddNKernel<double>>(reg, "AddN", {DType::kFloat64});
  RegisterCPU<AddNKernel<int32_t>>(reg, "AddN", {DType::kInt32});
  RegisterCPU<AddNKernel<int64_t>>(reg, "AddN", {DType::kInt64});

  RegisterCPU<CastKernel<float>>(reg, "Cast", {DType::kFloat32});
  RegisterCPU<CastKernel<double>>(reg, "Cast", {DType::kFloat64});
  RegisterCPU<CastKernel<int32_t>>(reg, "Cast", {DType::kInt32});
  RegisterCPU<CastKernel<int64_t>>(reg, "Cast", {DType::kInt64});
  RegisterCPU<CastKernel<bool>>(reg, "Cast", {DType::kBool});
  RegisterCPU<CastKernel<int8_t>>(reg, "Cast", {DType::kInt8});
  RegisterCPU<CastKernel<int16_t>>(reg, "Cast", {DType::kInt16});
  RegisterCPU<CastKernel<uint8_t>>(reg, "Cast", {DType::kUInt8});

  RegisterCPU<SelectKernel>(reg, "Select", {DType::kBool});

  RegisterCwiseBinaryKernels(reg);
  RegisterCwiseCompareKernels(reg);
  RegisterReductionKernels(reg);
}

}  // namespace sf
