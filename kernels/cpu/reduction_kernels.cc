// Kernels of the reductions: Sum, Mean, Max, Min, Prod (attrs axes,
// keep_dims), ArgMax and ArgMin (attr axis), SumToShape (the gradient of
// broadcasting), and the scans Cumsum and Cumprod (attrs axis, exclusive,
// reverse).
//
// A reduction collapses the input into alternating kept / reduced segments
// and removes the reduced ones innermost first, each with one of two
// vectorised Eigen-core primitives: a contiguous row reduction ([outer, R])
// or an accumulation of rows ([outer, R, inner]). Eigen's Tensor reductions
// measured 10-30x slower than these on the shapes training produces.
#include "kernels/cpu/cwise_common.h"

#include <Eigen/Core>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/compute_pool.h"

namespace sf {
namespace {

template <typename T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

struct SumR {
  template <class A, class B> static void Accum(A& acc, const B& row) { acc += row; }
  template <class V> static auto Redux(const V& v) { return v.sum(); }
  template <typename T> static T Identity() { return T(0); }
};
struct ProdR {
  template <class A, class B> static void Accum(A& acc, const B& row) { acc *= row; }
  template <class V> static auto Redux(const V& v) { return v.prod(); }
  template <typename T> static T Identity() { return T(1); }
};
// Max and Min give NaN where any reduced element is NaN, as NumPy and
// PyTorch do (Eigen's default keeps whichever operand the comparison favours,
// so a NaN survived only as the first element).
struct MaxR {
  template <class A, class B> static void Accum(A& acc, const B& row) {
    using T = typename A::Scalar;
    acc = acc.binaryExpr(row, Eigen::internal::scalar_max_op<T, T, Eigen::PropagateNaN>());
  }
  template <class V> static auto Redux(const V& v) { return v.template maxCoeff<Eigen::PropagateNaN>(); }
  template <typename T> static T Identity() {
    return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                : std::numeric_limits<T>::lowest();
  }
};
struct MinR {
  template <class A, class B> static void Accum(A& acc, const B& row) {
    using T = typename A::Scalar;
    acc = acc.binaryExpr(row, Eigen::internal::scalar_min_op<T, T, Eigen::PropagateNaN>());
  }
  template <class V> static auto Redux(const V& v) { return v.template minCoeff<Eigen::PropagateNaN>(); }
  template <typename T> static T Identity() {
    return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                : std::numeric_limits<T>::max();
  }
};

// Runs fn over [0, items) inline, or split over the pool when the work
// (elements read) is big enough to pay for the dispatch.
template <typename F>
void Split(OpKernelContext* ctx, int64_t items, int64_t work, int64_t work_per_item, const F& fn) {
  if (ctx->pool() == nullptr || items < 2 || work <= cwise::kParallelThreshold) {
    fn(0, items);
    return;
  }
  const int64_t min_block = std::max<int64_t>(1, cwise::kParallelThreshold / 4 / std::max<int64_t>(1, work_per_item));
  ctx->pool()->ParallelFor(items, min_block, fn);
}

// float32 sums are blocked (cwise::BlockedSum): along the inner axis blocks
// of kSumBlock values, across rows blocks of kSumRows rows, each summed in
// float, the blocks' sums in double. Cumsum keeps its running sums in double.
using cwise::kSumBlock;
constexpr int64_t kSumRows = 64;
template <typename T, typename R>
constexpr bool kBlockedSum = std::is_same_v<T, float> && std::is_same_v<R, SumR>;

// out[i] = reduce(in[i, 0:len]) for i < rows.
template <typename T, typename R>
void InnerReduce(OpKernelContext* ctx, const T* in, int64_t rows, int64_t len, T* out) {
  Split(ctx, rows, rows * len, len, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T* row = in + i * len;
      if constexpr (kBlockedSum<T, R>) {
        if (len > kSumBlock) {
          out[i] = static_cast<T>(
              cwise::BlockedSum(len, [&](int64_t k, int64_t count) { return ConstVec<T>(row + k, count).sum(); }));
          continue;
        }
      }
      out[i] = R::Redux(ConstVec<T>(row, len));
    }
  });
}

// out[o, :] = reduce over r of in[o, r, :] (rows of `inner` elements).
template <typename T, typename R>
void MiddleReduce(OpKernelContext* ctx, const T* in, int64_t outer, int64_t r, int64_t inner, T* out) {
  constexpr int64_t kChunk = 1024;  // columns per work item: stays in L1 while rows accumulate
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  Split(ctx, outer * chunks, outer * r * inner, r * std::min(inner, kChunk), [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t o = item / chunks, c0 = (item % chunks) * kChunk;
      const int64_t w = std::min(kChunk, inner - c0);
      const T* base = in + o * r * inner + c0;
      Vec<T> acc(out + o * inner + c0, w);
      if constexpr (kBlockedSum<T, R>) {
        if (r > kSumRows) {
          Eigen::Array<double, Eigen::Dynamic, 1> total = Eigen::Array<double, Eigen::Dynamic, 1>::Zero(w);
          for (int64_t j0 = 0; j0 < r; j0 += kSumRows) {
            acc = ConstVec<T>(base + j0 * inner, w);
            for (int64_t j = j0 + 1; j < std::min(r, j0 + kSumRows); ++j) acc += ConstVec<T>(base + j * inner, w);
            total += acc.template cast<double>();
          }
          acc = total.template cast<T>();
          continue;
        }
      }
      acc = ConstVec<T>(base, w);
      for (int64_t j = 1; j < r; ++j) R::Accum(acc, ConstVec<T>(base + j * inner, w));
    }
  });
}

// Reduces `in` over the axes flagged in `reduced` into `out` (already
// allocated with the kept element count; its shape does not matter).
template <typename T, typename R>
Status ReduceInto(OpKernelContext* ctx, const Tensor& in, const std::vector<bool>& reduced, Tensor& out) {
  if (in.num_elements() == 0) {
    Vec<T>(out.data<T>(), out.num_elements()).setConstant(R::template Identity<T>());
    return Status::OK();
  }
  struct Segment {
    int64_t size;
    bool reduced;
  };
  std::vector<Segment> seg;
  int num_reduced = 0;
  for (int i = 0; i < in.rank(); ++i) {
    const int64_t d = in.dim(i);
    if (d == 1) continue;
    if (!seg.empty() && seg.back().reduced == reduced[i]) {
      seg.back().size *= d;
      continue;
    }
    seg.push_back({d, static_cast<bool>(reduced[i])});
    num_reduced += reduced[i] ? 1 : 0;
  }
  if (num_reduced == 0) {
    std::memcpy(out.raw_data(), in.raw_data(), in.bytes());
    return Status::OK();
  }
  const T* src = in.data<T>();
  Tensor tmp;
  while (num_reduced > 0) {
    int j = static_cast<int>(seg.size()) - 1;
    while (!seg[j].reduced) --j;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < j; ++i) outer *= seg[i].size;
    for (int i = j + 1; i < static_cast<int>(seg.size()); ++i) inner *= seg[i].size;
    T* dst = out.data<T>();
    Tensor next;
    if (num_reduced > 1) {
      next = Tensor(in.dtype(), {outer * inner});
      dst = next.data<T>();
    }
    if (inner == 1) InnerReduce<T, R>(ctx, src, outer, seg[j].size, dst);
    else MiddleReduce<T, R>(ctx, src, outer, seg[j].size, inner, dst);
    seg.erase(seg.begin() + j);
    --num_reduced;
    tmp = std::move(next);  // keeps src alive for the next pass
    src = dst;
  }
  return Status::OK();
}

// Normalises axes (negative count from the end) against a rank into a mask;
// empty axes = every axis. InvalidArgument naming the axis and shape.
Status AxesMask(const std::vector<int64_t>& axes, const Shape& shape, std::vector<bool>* mask) {
  const int r = static_cast<int>(shape.size());
  mask->assign(r, axes.empty());
  for (int64_t a : axes) {
    if (a < -r || a >= r)
      return InvalidArgument("reduction axis " + std::to_string(a) + " is out of range for shape " +
                             ShapeString(shape));
    (*mask)[a < 0 ? a + r : a] = true;
  }
  return Status::OK();
}

template <typename T, typename R, bool kMean = false>
class ReduceKernel : public OpKernel {
 public:
  ReduceKernel(const KernelInit& init, Status* s) {
    auto axes = init.AttrOr<std::vector<int64_t>>("axes", {});
    auto keep = init.AttrOr<bool>("keep_dims", false);
    if (!axes.ok()) *s = axes.status();
    else if (!keep.ok()) *s = keep.status();
    else {
      axes_ = *axes;
      keep_dims_ = *keep;
    }
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    std::vector<bool> mask;
    Status s = AxesMask(axes_, x.shape(), &mask);
    if (!s.ok()) {
      ctx->SetStatus(s);
      return;
    }
    Shape out_shape;
    for (int i = 0; i < x.rank(); ++i) {
      if (!mask[i]) out_shape.push_back(x.dim(i));
      else if (keep_dims_) out_shape.push_back(1);
    }
    Tensor& out = ctx->allocate_output(0, x.dtype(), std::move(out_shape));
    s = ReduceInto<T, R>(ctx, x, mask, out);
    if (!s.ok()) {
      ctx->SetStatus(s);
      return;
    }
    if constexpr (kMean) {
      if (out.num_elements() == 0) return;
      const T count = static_cast<T>(x.num_elements() / out.num_elements());
      if (count == T(0)) {
        out.flat<T>().setConstant(std::numeric_limits<T>::quiet_NaN());
        return;
      }
      Vec<T>(out.data<T>(), out.num_elements()) /= count;
    }
  }

 private:
  std::vector<int64_t> axes_;
  bool keep_dims_ = false;
};

// Index of the first largest (ArgMax) or smallest (ArgMin) value along one
// axis; a loop over the collapsed [outer, axis, inner] view (an index op,
// not arithmetic).
template <typename T, bool kMin>
class ArgExtremeKernel : public OpKernel {
 public:
  ArgExtremeKernel(const KernelInit& init, Status* s) : op_(init.op) {
    auto a = init.Attr<int64_t>("axis");
    if (!a.ok()) *s = a.status();
    else axis_ = *a;
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const int r = x.rank();
    if (axis_ < -r || axis_ >= r) {
      ctx->SetStatus(InvalidArgument(op_ + " axis " + std::to_string(axis_) +
                                     " is out of range for shape " + ShapeString(x.shape())));
      return;
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + r : axis_);
    if (x.dim(axis) == 0) {
      ctx->SetStatus(InvalidArgument(op_ + " over an empty axis " + std::to_string(axis) +
                                     " of shape " + ShapeString(x.shape())));
      return;
    }
    Shape out_shape;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < r; ++i) {
      if (i < axis) outer *= x.dim(i);
      if (i > axis) inner *= x.dim(i);
      if (i != axis) out_shape.push_back(x.dim(i));
    }
    const int64_t len = x.dim(axis);
    Tensor& out = ctx->allocate_output(0, DType::kInt64, std::move(out_shape));
    const T* p = x.data<T>();
    int64_t* o = out.data<int64_t>();
    for (int64_t i = 0; i < outer; ++i) {
      for (int64_t k = 0; k < inner; ++k) {
        const T* base = p + i * len * inner + k;
        int64_t best = 0;
        T best_v = base[0];
        for (int64_t j = 1; j < len; ++j) {
          // The first NaN wins, as in NumPy (and nothing beats it after).
          const T v = base[j * inner];
          if ((kMin ? v < best_v : v > best_v) || (v != v && best_v == best_v)) {
            best_v = v;
            best = j;
          }
        }
        o[i * inner + k] = best;
      }
    }
  }

 private:
  std::string op_;
  int64_t axis_ = 0;
};

// The attrs of the scans (axis, exclusive, reverse) and the collapsed
// [outer, len, inner] view of an input along the axis.
class ScanKernelBase : public OpKernel {
 public:
  ScanKernelBase(const KernelInit& init, Status* s) : op_(init.op) {
    auto a = init.AttrOr<int64_t>("axis", 0);
    auto e = init.AttrOr<bool>("exclusive", false);
    auto r = init.AttrOr<bool>("reverse", false);
    for (const Status& st : {a.status(), e.status(), r.status()})
      if (!st.ok() && s->ok()) *s = st;
    if (!s->ok()) return;
    axis_ = *a;
    exclusive_ = *e;
    reverse_ = *r;
  }

 protected:
  // x's view along the axis; false (the step's status set) when the axis is
  // out of range for x.
  bool Layout(OpKernelContext* ctx, const Tensor& x, int64_t* outer, int64_t* len, int64_t* inner) const {
    const int r = x.rank();
    if (axis_ < -r || axis_ >= r) {
      ctx->SetStatus(InvalidArgument(op_ + " axis " + std::to_string(axis_) +
                                     " is out of range for shape " + ShapeString(x.shape())));
      return false;
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + r : axis_);
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < r; ++i) {
      if (i < axis) *outer *= x.dim(i);
      if (i > axis) *inner *= x.dim(i);
    }
    *len = x.dim(axis);
    return true;
  }

  std::string op_;
  int64_t axis_ = 0;
  bool exclusive_ = false, reverse_ = false;
};

// Cumsum / Cumprod along one axis of the collapsed [outer, len, inner] view:
// a running row of `inner` accumulators, so the inner loop is vectorised.
template <typename T, typename R>
class ScanKernel : public ScanKernelBase {
 public:
  using ScanKernelBase::ScanKernelBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    int64_t outer, len, inner;
    if (!Layout(ctx, x, &outer, &len, &inner)) return;
    Tensor& out = ctx->allocate_output(0, x.dtype(), x.shape());
    if (out.num_elements() == 0) return;
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    // A float32 running sum is kept in double (as PyTorch's): in float its
    // error grows with the count, 300x PyTorch's over 1e6 values.
    using Acc = std::conditional_t<kBlockedSum<T, R>, double, T>;
    Split(ctx, outer, x.num_elements(), len * inner, [&](int64_t b, int64_t e) {
      Eigen::Array<Acc, Eigen::Dynamic, 1> acc(inner);
      for (int64_t o = b; o < e; ++o) {
        acc.setConstant(static_cast<Acc>(R::template Identity<T>()));
        for (int64_t step = 0; step < len; ++step) {
          const int64_t j = reverse_ ? len - 1 - step : step;
          const int64_t at = (o * len + j) * inner;
          ConstVec<T> in(src + at, inner);
          Vec<T> y(dst + at, inner);
          if (exclusive_) y = acc.template cast<T>();
          if constexpr (std::is_same_v<Acc, T>) R::Accum(acc, in);
          else acc += in.template cast<Acc>();
          if (!exclusive_) y = acc.template cast<T>();
        }
      }
    });
  }
};

// CumprodGrad(x, dy): the gradient of Cumprod(x) with the same attrs,
// without dividing by x, so it is exact where x holds zeros. In scan order
// q (reverse flips the axis), an inclusive scan gives
//   dx_q = P_q * S_q,  P_q = prod_{p<q} x_p,  S_q = dy_q + x_{q+1} S_{q+1},
// and an exclusive one dx_q = P_q * T_q with T_q = dy_{q+1} + x_{q+1} T_{q+1}:
// one pass forward for P, one backward for S or T, rows of `inner` at once.
template <typename T>
class CumprodGradKernel : public ScanKernelBase {
 public:
  using ScanKernelBase::ScanKernelBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    if (dy.shape() != x.shape() || dy.dtype() != x.dtype()) {
      ctx->SetStatus(InvalidArgument("CumprodGrad: dy is " + dy.DebugString(0) + ", x is " + x.DebugString(0) +
                                     "; they must match"));
      return;
    }
    int64_t outer, len, inner;
    if (!Layout(ctx, x, &outer, &len, &inner)) return;
    Tensor& out = ctx->allocate_output(0, x.dtype(), x.shape());
    if (out.num_elements() == 0) return;
    const T* xs = x.data<T>();
    const T* gs = dy.data<T>();
    T* dst = out.data<T>();
    Split(ctx, outer, 3 * x.num_elements(), 3 * len * inner, [&](int64_t b, int64_t e) {
      Eigen::Array<T, Eigen::Dynamic, 1> acc(inner);
      for (int64_t o = b; o < e; ++o) {
        auto at = [&](int64_t q) { return (o * len + (reverse_ ? len - 1 - q : q)) * inner; };
        acc.setOnes();  // P_q: the product of the elements before q
        for (int64_t q = 0; q < len; ++q) {
          Vec<T>(dst + at(q), inner) = acc;
          acc *= ConstVec<T>(xs + at(q), inner);
        }
        acc.setZero();  // exclusive: T_q; inclusive: x_{q+1} S_{q+1}
        for (int64_t q = len - 1; q >= 0; --q) {
          Vec<T> d(dst + at(q), inner);
          ConstVec<T> xq(xs + at(q), inner), gq(gs + at(q), inner);
          if (exclusive_) {
            d *= acc;
            acc = gq + xq * acc;
          } else {
            acc += gq;  // S_q
            d *= acc;
            acc *= xq;
          }
        }
      }
    });
  }
};

// SumToShape(grad, shape): sums grad over the axes that broadcasting from
// `shape` expanded (leading extra axes and size-1 axes).
template <typename T>
class SumToShapeKernel : public OpKernel {
 public:
  SumToShapeKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& st = ctx->input(1);
    if (st.rank() != 1 || (st.dtype() != DType::kInt32 && st.dtype() != DType::kInt64)) {
      ctx->SetStatus(InvalidArgument(std::string("SumToShape needs an int32/int64 vector shape, got ") +
                                     DTypeName(st.dtype()) + ShapeString(st.shape())));
      return;
    }
    const Shape target = st.ToVector<int64_t>();
    const int gr = g.rank(), tr = static_cast<int>(target.size());
    auto bad = [&] {
      ctx->SetStatus(InvalidArgument("SumToShape cannot reduce shape " + ShapeString(g.shape()) +
                                     " to " + ShapeString(target)));
    };
    if (tr > gr) return bad();
    std::vector<bool> mask(gr, false);
    bool any = false;
    for (int i = 0; i < gr; ++i) {
      const int ti = i - (gr - tr);
      if (ti < 0) {
        mask[i] = true;
      } else if (target[ti] != g.dim(i)) {
        if (target[ti] != 1) return bad();
        mask[i] = true;
      }
      any = any || (mask[i] && g.dim(i) != 1);
    }
    if (!any) {
      auto r = g.Reshaped(target);
      if (!r.ok()) return ctx->SetStatus(r.status());
      ctx->set_output(0, std::move(r).value());
      return;
    }
    Tensor& out = ctx->allocate_output(0, g.dtype(), target);
    Status s = ReduceInto<T, SumR>(ctx, g, mask, out);
    if (!s.ok()) ctx->SetStatus(s);
  }
};

template <typename T>
void RegisterForType(KernelRegistry& reg, DType t) {
  RegisterCPU<ReduceKernel<T, SumR>>(reg, "Sum", {t});
  RegisterCPU<ReduceKernel<T, SumR, true>>(reg, "Mean", {t});
  RegisterCPU<ReduceKernel<T, MaxR>>(reg, "Max", {t});
  RegisterCPU<ReduceKernel<T, MinR>>(reg, "Min", {t});
  RegisterCPU<ReduceKernel<T, ProdR>>(reg, "Prod", {t});
  RegisterCPU<ArgExtremeKernel<T, false>>(reg, "ArgMax", {t});
  RegisterCPU<ArgExtremeKernel<T, true>>(reg, "ArgMin", {t});
  RegisterCPU<SumToShapeKernel<T>>(reg, "SumToShape", {t});
  RegisterCPU<ScanKernel<T, SumR>>(reg, "Cumsum", {t});
  RegisterCPU<ScanKernel<T, ProdR>>(reg, "Cumprod", {t});
  RegisterCPU<CumprodGradKernel<T>>(reg, "CumprodGrad", {t});
}

}  // namespace

void RegisterReductionKernels(KernelRegistry& reg) {
  RegisterForType<float>(reg, DType::kFloat32);
  RegisterForType<double>(reg, DType::kFloat64);
  RegisterForType<int32_t>(reg, DType::kInt32);
  RegisterForType<int64_t>(reg, DType::kInt64);
  RegisterForType<int8_t>(reg, DType::kInt8);
  RegisterForType<int16_t>(reg, DType::kInt16);
  RegisterForType<uint8_t>(reg, DType::kUInt8);
}

}  // namespace sf
