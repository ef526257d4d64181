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

#include <array>
#include <string>

#include <unsupported/Eigen/CXX11/Tensor>

#include "kernels/cpu/cpu_kernels.h"

namespace sf {
namespace cwise {

// Below this many output elements a kernel evaluates inline: dispatching to
// the pool costs more than the work.
constexpr int64_t kParallelThreshold = 32768;

constexpr int kMaxBroadcastRank = 5;

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

// A unary element-wise kernel: out = F::Apply(x) (same dtype).
template <typename T, typename F>
class UnaryKernel : public OpKernel {
 public:
  UnaryKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor& out = ctx->allocate_output(0, x.dtype(), x.shape());
    Assign(ctx, x.num_elements(), out.flat<T>(), F::Apply(x.flat<T>()));
  }
};

}  // namespace cwise

// The kernel files of the math group; RegisterMathKernels calls them all.
void RegisterCwiseBinaryKernels(KernelRegistry& reg);
void RegisterCwiseCompareKernels(KernelRegistry& reg);
void RegisterReductionKernels(KernelRegistry& reg);

}  // namespace sf
