// Kernels of the reductions: Sum, Mean, Max, Min, Prod (attrs axes,
// keep_dims), ArgMax (attr axis) and SumToShape (the gradient of
// broadcasting).
//
// A reduction first collapses the input into alternating kept / reduced
// segments ([K, R], [K, R, K], [K, R, K, R], [K, R, K, R, K]), so one Eigen
// expression per collapsed rank covers every axis set of practical shapes.
#include "kernels/cpu/cwise_common.h"

#include <limits>

namespace sf {
namespace {

using cwise::Assign;
using cwise::RankMap;

struct SumR {
  template <class E, class D> static auto Apply(const E& e, const D& d) { return e.sum(d); }
  template <typename T> static T Identity() { return T(0); }
};
struct ProdR {
  template <class E, class D> static auto Apply(const E& e, const D& d) { return e.prod(d); }
  template <typename T> static T Identity() { return T(1); }
};
struct MaxR {
  template <class E, class D> static auto Apply(const E& e, const D& d) { return e.maximum(d); }
  template <typename T> static T Identity() {
    return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                : std::numeric_limits<T>::lowest();
  }
};
struct MinR {
  template <class E, class D> static auto Apply(const E& e, const D& d) { return e.minimum(d); }
  template <typename T> static T Identity() {
    return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                : std::numeric_limits<T>::max();
  }
};

// Reduces `in` over the axes flagged in `reduced` into `out` (already
// allocated with the kept element count; its shape does not matter).
template <typename T, typename R>
Status ReduceInto(OpKernelContext* ctx, const Tensor& in, const std::vector<bool>& reduced, Tensor& out) {
  if (in.num_elements() == 0) {
    out.flat<T>().setConstant(R::template Identity<T>());
    return Status::OK();
  }
  constexpr int kMaxSegments = 5;
  std::array<Eigen::Index, kMaxSegments> seg{};
  seg[0] = 1;  // segments alternate K, R, K, ...; the first K may be empty
  int ns = 1;
  bool last_reduced = false;
  for (int i = 0; i < in.rank(); ++i) {
    const int64_t d = in.dim(i);
    if (d == 1) continue;
    if (reduced[i] == last_reduced) {
      seg[ns - 1] *= d;
      continue;
    }
    if (ns == kMaxSegments)
      return Unimplemented("reducing shape " + ShapeString(in.shape()) +
                           " over more than two separate groups of axes");
    seg[ns++] = d;
    last_reduced = reduced[i];
  }
  const int64_t n = in.num_elements();
  auto run = [&](auto n_tag, auto m_tag) {
    constexpr int N = decltype(n_tag)::value;
    constexpr int M = decltype(m_tag)::value;
    Eigen::DSizes<Eigen::Index, N> in_dims;
    for (int i = 0; i < N; ++i) in_dims[i] = seg[i];
    Eigen::DSizes<Eigen::Index, N - M> out_dims;
    Eigen::array<Eigen::Index, M> axes;
    for (int i = 0; i < N - M; ++i) out_dims[i] = seg[2 * i];
    for (int i = 0; i < M; ++i) axes[i] = 2 * i + 1;
    RankMap<const T, N> im(in.data<T>(), in_dims);
    RankMap<T, N - M> om(out.data<T>(), out_dims);
    Assign(ctx, n, om, R::Apply(im, axes));
  };
  switch (ns) {
    case 1: Assign(ctx, n, out.flat<T>(), in.flat<T>()); break;
    case 2: run(std::integral_constant<int, 2>(), std::integral_constant<int, 1>()); break;
    case 3: run(std::integral_constant<int, 3>(), std::integral_constant<int, 1>()); break;
    case 4: run(std::integral_constant<int, 4>(), std::integral_constant<int, 2>()); break;
    case 5: run(std::integral_constant<int, 5>(), std::integral_constant<int, 2>()); break;
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
      Assign(ctx, out.num_elements(), out.flat<T>(), out.flat<T>() / count);
    }
  }

 private:
  std::vector<int64_t> axes_;
  bool keep_dims_ = false;
};

// Index of the first largest value along one axis; a loop over the collapsed
// [outer, axis, inner] view (an index op, not arithmetic).
template <typename T>
class ArgMaxKernel : public OpKernel {
 public:
  ArgMaxKernel(const KernelInit& init, Status* s) {
    auto a = init.Attr<int64_t>("axis");
    if (!a.ok()) *s = a.status();
    else axis_ = *a;
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const int r = x.rank();
    if (axis_ < -r || axis_ >= r) {
      ctx->SetStatus(InvalidArgument("ArgMax axis " + std::to_string(axis_) +
                                     " is out of range for shape " + ShapeString(x.shape())));
      return;
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + r : axis_);
    if (x.dim(axis) == 0) {
      ctx->SetStatus(InvalidArgument("ArgMax over an empty axis " + std::to_string(axis) +
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
          if (base[j * inner] > best_v) {
            best_v = base[j * inner];
            best = j;
          }
        }
        o[i * inner + k] = best;
      }
    }
  }

 private:
  int64_t axis_ = 0;
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
  RegisterCPU<ArgMaxKernel<T>>(reg, "ArgMax", {t});
  RegisterCPU<SumToShapeKernel<T>>(reg, "SumToShape", {t});
}

}  // namespace

void RegisterReductionKernels(KernelRegistry& reg) {
  RegisterForType<float>(reg, DType::kFloat32);
  RegisterForType<double>(reg, DType::kFloat64);
  RegisterForType<int32_t>(reg, DType::kInt32);
  RegisterForType<int64_t>(reg, DType::kInt64);
}

}  // namespace sf
