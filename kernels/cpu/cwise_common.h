// Shared machinery of the element-wise CPU kernels: NumPy broadcasting of two
// operands reduced to the cheapest case (same shape, one scalar, or a
// collapsed rank-2..5 Eigen broadcast), and the "big enough for the thread
// pool" threshold.
//
// Include this file first in a kernel .cc: it defines EIGEN_USE_THREADS
// before Eigen is seen, so ctx->eigen_device() can evaluate expressions.
#pragma once

#ifndef EIGEN_USE_THREADS
#define EIGEN_USE_THREADS
#endif

#include <algorithm>
#include <array>
#include <string>
#include <type_traits>

#include <unsupported/Eigen/CXX11/Tensor>

#include "kernels/cpu/cpu_kernels.h"

namespace sf {
namespace cwise {

// Below this many output elements a kernel evaluates inline: dispatching to
// the pool costs more than the work.
constexpr int64_t kParallelThreshold = 32768;

constexpr int kMaxBroadcastRank = 5;

// A float32 sum of n terms as blocks of kSumBlock terms, each summed in
// float (vectorised) by block(first, count), and the blocks' sums added in
// double: Eigen adds each SIMD lane's terms in sequence, an error that grows
// with the count (2e-4 relative for a million values); this stays near
// float's own precision (NumPy sums pairwise for the same reason).
constexpr int64_t kSumBlock = 1024;
template <typename BlockSum>
double BlockedSum(int64_t n, const BlockSum& block) {
  double total = 0;
  for (int64_t k = 0; k < n; k += kSumBlock) total += static_cast<double>(block(k, std::min(kSumBlock, n - k)));
  return total;
}

// How two shapes broadcast, after dropping size-1 output dims and merging
// neighbouring dims that broadcast the same way.
struct Broadcast {
  Shape out_shape;  // the full NumPy result shape
  int rank = 0;     // collapsed rank
  std::array<Eigen::Index, kMaxBroadcastRank> out{}, a{}, b{};  // collapsed dims (a/b: 1 = broadcast)
};

// Fills bc for shapes a and b; InvalidArgument naming both shapes when they
// do not broadcast, Unimplemented when the collapsed rank exceeds 5.
inline Status ComputeBroadcast(const Shape& a, const Shape& b, Broadcast* bc) {
  const int r = static_cast<int>(std::max(a.size(), b.size()));
  bc->out_shape.assign(r, 1);
  bc->rank = 0;
  int prev_kind = -1;
  int big_rank = 0;
  for (int i = 0; i < r; ++i) {
    const int ia = static_cast<int>(a.size()) - r + i, ib = static_cast<int>(b.size()) - r + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    int64_t d;
    if (da == db) d = da;
    else if (da == 1) d = db;
    else if (db == 1) d = da;
    else
      return InvalidArgument("incompatible shapes for broadcasting: " + ShapeString(a) + " and " +
                             ShapeString(b));
    bc->out_shape[i] = d;
    if (d == 1) continue;
    const int kind = (da == 1 ? 1 : 0) | (db == 1 ? 2 : 0);
    if (kind == prev_kind) {
      bc->out[bc->rank - 1] *= d;
      bc->a[bc->rank - 1] *= da;
      bc->b[bc->rank - 1] *= db;
      continue;
    }
    prev_kind = kind;
    ++big_rank;
    if (bc->rank < kMaxBroadcastRank) {
      bc->out[bc->rank] = d;
      bc->a[bc->rank] = da;
      bc->b[bc->rank] = db;
    }
    ++bc->rank;
  }
  if (big_rank > kMaxBroadcastRank)
    return Unimplemented("broadcasting " + ShapeString(a) + " with " + ShapeString(b) +
                         " needs more than 5 alternating broadcast dimensions");
  return Status::OK();
}

template <typename T, int N>
using RankMap = Eigen::TensorMap<Eigen::Tensor<T, N, Eigen::RowMajor>>;

template <int N>
Eigen::DSizes<Eigen::Index, N> Dims(const std::array<Eigen::Index, kMaxBroadcastRank>& d) {
  Eigen::DSizes<Eigen::Index, N> out;
  for (int i = 0; i < N; ++i) out[i] = d[i];
  return out;
}

template <int N>
Eigen::array<Eigen::Index, N> Factors(const std::array<Eigen::Index, kMaxBroadcastRank>& out,
                                      const std::array<Eigen::Index, kMaxBroadcastRank>& in) {
  Eigen::array<Eigen::Index, N> f;
  for (int i = 0; i < N; ++i) f[i] = out[i] / in[i];
  return f;
}

// Assigns expr to lhs, on the pool's Eigen device when n is large.
template <typename L, typename E>
void Assign(OpKernelContext* ctx, int64_t n, L lhs, const E& expr) {
  if (n > kParallelThreshold) lhs.device(ctx->eigen_device()) = expr;
  else lhs = expr;
}

// Evaluates out = F::Apply(a, b) for F with
//   template <class A, class B> static auto Apply(const A&, const B&)
// over Eigen expressions of T, writing Out elements, with broadcasting.
template <typename T, typename Out, typename F>
void BinaryCompute(OpKernelContext* ctx, DType out_dtype) {
  const Tensor& a = ctx->input(0);
  const Tensor& b = ctx->input(1);
  if (a.shape() == b.shape()) {
    Tensor& out = ctx->allocate_output(0, out_dtype, a.shape());
    Assign(ctx, out.num_elements(), out.flat<Out>(), F::Apply(a.flat<T>(), b.flat<T>()));
    return;
  }
  Broadcast bc;
  Status s = ComputeBroadcast(a.shape(), b.shape(), &bc);
  if (!s.ok()) {
    ctx->SetStatus(s);
    return;
  }
  Tensor& out = ctx->allocate_output(0, out_dtype, bc.out_shape);
  const int64_t n = out.num_elements();
  if (n == 0) return;
  if (a.num_elements() == n && b.num_elements() == n) {
    Assign(ctx, n, out.flat<Out>(), F::Apply(a.flat<T>(), b.flat<T>()));
    return;
  }
  if (a.num_elements() == 1) {
    auto bf = b.flat<T>();
    Assign(ctx, n, out.flat<Out>(), F::Apply(bf.constant(a.data<T>()[0]), bf));
    return;
  }
  if (b.num_elements() == 1) {
    auto af = a.flat<T>();
    Assign(ctx, n, out.flat<Out>(), F::Apply(af, af.constant(b.data<T>()[0])));
    return;
  }
  auto run = [&](auto rank_tag) {
    constexpr int N = decltype(rank_tag)::value;
    RankMap<const T, N> am(a.data<T>(), Dims<N>(bc.a));
    RankMap<const T, N> bm(b.data<T>(), Dims<N>(bc.b));
    RankMap<Out, N> om(out.data<Out>(), Dims<N>(bc.out));
    Assign(ctx, n, om,
           F::Apply(am.broadcast(Factors<N>(bc.out, bc.a)), bm.broadcast(Factors<N>(bc.out, bc.b))));
  };
  switch (bc.rank) {
    case 2: run(std::integral_constant<int, 2>()); break;
    case 3: run(std::integral_constant<int, 3>()); break;
    case 4: run(std::integral_constant<int, 4>()); break;
    case 5: run(std::integral_constant<int, 5>()); break;
    default:
      ctx->SetStatus(Internal("unexpected collapsed broadcast rank " + std::to_string(bc.rank)));
  }
}

// A binary element-wise kernel: same-dtype inputs, Out elements out.
template <typename T, typename Out, typename F>
class BinaryKernel : public OpKernel {
 public:
  BinaryKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override { BinaryCompute<T, Out, F>(ctx, DTypeOf<Out>::value); }
};

// y[i] = apply(x)[i] for i < n, every element of a float tensor through
// Eigen's packet path: the body on the pool's device as usual (its blocks
// are whole packets), the last n % P elements in a packet-sized scratch.
// Eigen evaluates that tail with its scalar functors, which differ from its
// packet ones (by an ulp, or wholly where a packet function clamps), so a
// value's answer depended on where it fell in the tensor.
template <typename T, typename Apply>
void AssignUnary(OpKernelContext* ctx, const T* x, T* y, int64_t n, const Apply& apply) {
  using In = Eigen::TensorMap<Eigen::Tensor<const T, 1, Eigen::RowMajor>>;
  using Out = Eigen::TensorMap<Eigen::Tensor<T, 1, Eigen::RowMajor>>;
  if constexpr (!std::is_floating_point_v<T>) {
    Assign(ctx, n, Out(y, n), apply(In(x, n)));
  } else {
    constexpr int64_t P = Eigen::internal::packet_traits<T>::size;
    const int64_t body = n - n % P;
    if (body > 0) Assign(ctx, body, Out(y, body), apply(In(x, body)));
    if (body == n) return;
    alignas(64) T in[P], out[P];
    for (int64_t i = 0; i < P; ++i) in[i] = x[body + std::min(i, n - body - 1)];
    Out(out, P) = apply(In(in, P));
    std::copy(out, out + (n - body), y + body);
  }
}

// A unary functor may say where Eigen's packet function is inexact (it
// clamps its argument: subnormal inputs or results) by declaring
//   template <typename T> static bool Exact(T x);   // false: redo x
//   template <typename T> static T Scalar(T x);     // the C library's answer
template <typename F, typename = void>
struct HasFixUp : std::false_type {};
template <typename F>
struct HasFixUp<F, std::void_t<decltype(F::template Exact<float>(0.0f))>> : std::true_type {};

// Redoes with F::Scalar the elements of a float tensor where F is inexact
// (nothing for a functor without fix-ups). A branch-free look first.
template <typename T, typename F>
void FixUp(const T* x, T* y, int64_t n) {
  if constexpr (HasFixUp<F>::value && std::is_floating_point_v<T>) {
    bool any = false;
    for (int64_t i = 0; i < n; ++i) any |= !F::template Exact<T>(x[i]);
    if (!any) return;
    for (int64_t i = 0; i < n; ++i)
      if (!F::template Exact<T>(x[i])) y[i] = F::template Scalar<T>(x[i]);
  }
}

// A unary element-wise kernel: out = F::Apply(x) (same dtype), one answer
// per value wherever it falls in the tensor (AssignUnary, FixUp).
template <typename T, typename F>
class UnaryKernel : public OpKernel {
 public:
  UnaryKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor& out = ctx->allocate_output(0, x.dtype(), x.shape());
    const int64_t n = x.num_elements();
    AssignUnary(ctx, x.data<T>(), out.data<T>(), n, [](const auto& m) { return F::Apply(m); });
    FixUp<T, F>(x.data<T>(), out.data<T>(), n);
  }
};

}  // namespace cwise

// The kernel files of the math group; RegisterMathKernels calls them all.
void RegisterCwiseBinaryKernels(KernelRegistry& reg);
void RegisterCwiseCompareKernels(KernelRegistry& reg);
void RegisterReductionKernels(KernelRegistry& reg);

}  // namespace sf
