// Kernels of MaxPool, AvgPool and their gradients (NHWC). Channels are
// innermost and contiguous, so each window cell is one vector operation over
// C; SAME padding cells are skipped (never part of a max or an average).
// float32 MaxPoolGrad runs on oneDNN when the build has it (dnnl_engines.h);
// these loops are then its fallback and test reference.
#include <algorithm>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/compute_pool.h"
#include "kernels/cpu/dnnl_engines.h"
#include "kernels/cpu/nn_kernels.h"

namespace sf {
namespace {

using nn::Window;

// Elements of work worth one thread.
constexpr int64_t kPoolParallelMin = 32768;

template <typename T>
using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;

void Split(ComputePool* pool, int64_t n, int64_t work_per_item,
           const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t min_block = std::max<int64_t>(1, kPoolParallelMin / std::max<int64_t>(work_per_item, 1));
  if (!pool || n <= min_block) fn(0, n);
  else pool->ParallelFor(n, min_block, fn);
}

// The valid window rows [y0, y1) and columns [x0, x1) of output pixel (oy, ox).
struct Cells {
  int64_t y0, y1, x0, x1;
};
Cells WindowCells(const Window& w, int64_t oy, int64_t ox) {
  const int64_t ys = oy * w.sh - w.pad_top, xs = ox * w.sw - w.pad_left;
  return {std::max<int64_t>(ys, 0), std::min(ys + w.kh, w.h), std::max<int64_t>(xs, 0),
          std::min(xs + w.kw, w.w)};
}

// Fills w from an NHWC input shape and the attrs; InvalidArgument naming the shape.
Status PoolWindow(const char* op, const Shape& in, const nn::WindowAttrs& a, Window* w) {
  if (in.size() != 4)
    return InvalidArgument(std::string(op) + " needs NHWC input of rank 4, got " + ShapeString(in));
  w->n = in[0];
  w->h = in[1];
  w->w = in[2];
  w->c = in[3];
  w->sh = a.strides[1];
  w->sw = a.strides[2];
  // A SAME window of at least (oh - 1) * stride + extent + 1 cells covers the
  // whole axis at every output position, so a larger one pools the same
  // cells: clamping it keeps the padding, the loops and oneDNN's workspace
  // sized by the input, not by the attribute (ksize 2^31 crashed and hung).
  auto clamp = [&](int64_t k, int64_t extent, int64_t stride) {
    if (!a.same) return k;
    const int64_t out = extent == 0 ? 0 : (extent - 1) / stride + 1;  // no overflow at any stride
    return std::min(k, std::max<int64_t>(1, (out - 1) * std::min(stride, extent) + extent + 1));
  };
  w->kh = clamp(a.ksize[1], w->h, w->sh);
  w->kw = clamp(a.ksize[2], w->w, w->sw);
  return nn::ComputeWindow(a.same, w);
}

Status CheckDy(const char* op, const Window& w, const Tensor& dy) {
  const Shape want{w.n, w.oh, w.ow, w.c};
  if (dy.shape() != want)
    return InvalidArgument(std::string(op) + ": gradient has shape " + ShapeString(dy.shape()) +
                           ", expected " + ShapeString(want));
  return Status::OK();
}

class PoolKernelBase : public OpKernel {
 public:
  PoolKernelBase(const KernelInit& init, Status* s) { *s = nn::ParseWindowAttrs(init, true, &a_); }

 protected:
  nn::WindowAttrs a_;
};

template <typename T, bool kMax>
class PoolKernel : public PoolKernelBase {
 public:
  using PoolKernelBase::PoolKernelBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    Window w;
    Status s = PoolWindow(kMax ? "MaxPool" : "AvgPool", in.shape(), a_, &w);
    if (!s.ok()) return ctx->SetStatus(s);
    Tensor& out = ctx->allocate_output(0, in.dtype(), {w.n, w.oh, w.ow, w.c});
    const T* x = in.data<T>();
    T* y = out.data<T>();
    // One item = one output row (n, oy).
    Split(ctx->pool(), w.n * w.oh, w.ow * w.c * w.kh * w.kw, [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        const int64_t n = item / w.oh, oy = item % w.oh;
        for (int64_t ox = 0; ox < w.ow; ++ox) {
          Eigen::Map<Vec<T>> acc(y + ((n * w.oh + oy) * w.ow + ox) * w.c, w.c);
          // -inf, not lowest(): a window of -inf values (masked cells) has max
          // -inf; lowest() gave -3.4e38, a value none of its cells holds.
          acc.setConstant(kMax ? -std::numeric_limits<T>::infinity() : T(0));
          const Cells cl = WindowCells(w, oy, ox);
          for (int64_t iy = cl.y0; iy < cl.y1; ++iy)
            for (int64_t ix = cl.x0; ix < cl.x1; ++ix) {
              Eigen::Map<const Vec<T>> v(x + ((n * w.h + iy) * w.w + ix) * w.c, w.c);
              // A NaN in the window gives NaN, as in NumPy and PyTorch.
              if (kMax) acc = acc.binaryExpr(v, Eigen::internal::scalar_max_op<T, T, Eigen::PropagateNaN>());
              else acc += v;
            }
          if (!kMax) acc /= static_cast<T>((cl.y1 - cl.y0) * (cl.x1 - cl.x0));
        }
      }
    });
  }
};

// MaxPoolGrad(x, y, dy): each window's dy goes to the first cell holding its
// maximum (as TensorFlow), so ties never double the gradient.
template <typename T>
class MaxPoolGradKernel : public PoolKernelBase {
 public:
  MaxPoolGradKernel(const KernelInit& init, Status* s) : PoolKernelBase(init, s) {
    if constexpr (std::is_same_v<T, float>) engine_ = nn::NewDnnlMaxPoolGradEngine();
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const Tensor& dy = ctx->input(2);
    Window w;
    Status s = PoolWindow("MaxPoolGrad", in.shape(), a_, &w);
    if (s.ok()) s = CheckDy("MaxPoolGrad", w, dy);
    if (!s.ok()) return ctx->SetStatus(s);
    Tensor& out = ctx->allocate_output(0, in.dtype(), in.shape());
    if (engine_ && out.num_elements() > 0 && dy.num_elements() > 0)
      return ctx->SetStatus(engine_->Run(ctx->pool(), w, in.data<float>(), dy.data<float>(), out.data<float>()));
    const T* x = in.data<T>();
    const T* g = dy.data<T>();
    T* dx = out.data<T>();
    std::fill(dx, dx + out.num_elements(), T(0));
    const int64_t image = w.h * w.w * w.c;
    // Windows overlap only within an image: split by image.
    Split(ctx->pool(), w.n, w.oh * w.ow * w.c * w.kh * w.kw, [&](int64_t b, int64_t e) {
      // Locals, so stores through the int64 `where` cannot alias the geometry.
      const int64_t chans = w.c, width = w.w;
      std::vector<T> best(chans);
      std::vector<int64_t> where(chans);
      T* pb = best.data();
      int64_t* pw = where.data();
      for (int64_t n = b; n < e; ++n) {
        const T* xi = x + n * image;
        T* dxi = dx + n * image;
        for (int64_t oy = 0; oy < w.oh; ++oy)
          for (int64_t ox = 0; ox < w.ow; ++ox) {
            // Every window has a valid cell; start from the first, then a
            // strict > keeps the first maximum.
            const Cells cl = WindowCells(w, oy, ox);
            const int64_t first = (cl.y0 * width + cl.x0) * chans;
            for (int64_t c = 0; c < chans; ++c) {
              pb[c] = xi[first + c];
              pw[c] = first + c;
            }
            for (int64_t iy = cl.y0; iy < cl.y1; ++iy)
              for (int64_t ix = cl.x0; ix < cl.x1; ++ix) {
                const int64_t base = (iy * width + ix) * chans;
                for (int64_t c = 0; c < chans; ++c) {
                  const T v = xi[base + c];
                  if (v > pb[c]) {
                    pb[c] = v;
                    pw[c] = base + c;
                  }
                }
              }
            const T* gi = g + ((n * w.oh + oy) * w.ow + ox) * chans;
            for (int64_t c = 0; c < chans; ++c) dxi[pw[c]] += gi[c];
          }
      }
    });
  }

 private:
  // oneDNN's max pooling backward (float32, non-empty), ~10x these loops.
  std::unique_ptr<nn::MaxPoolGradEngine> engine_;
};

// AvgPoolGrad(input_sizes, dy): dy / window size to every valid cell.
template <typename T>
class AvgPoolGradKernel : public PoolKernelBase {
 public:
  using PoolKernelBase::PoolKernelBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(1);
    Shape in_shape;
    Status s = nn::ShapeFromTensor(ctx->input(0), "AvgPoolGrad input_sizes", &in_shape);
    Window w;
    if (s.ok()) s = PoolWindow("AvgPoolGrad", in_shape, a_, &w);
    if (s.ok()) s = CheckDy("AvgPoolGrad", w, dy);
    if (!s.ok()) return ctx->SetStatus(s);
    Tensor& out = ctx->allocate_output(0, dy.dtype(), in_shape);
    const T* g = dy.data<T>();
    T* dx = out.data<T>();
    std::fill(dx, dx + out.num_elements(), T(0));
    Split(ctx->pool(), w.n, w.oh * w.ow * w.c * w.kh * w.kw, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n)
        for (int64_t oy = 0; oy < w.oh; ++oy)
          for (int64_t ox = 0; ox < w.ow; ++ox) {
            const Cells cl = WindowCells(w, oy, ox);
            const T scale = T(1) / static_cast<T>((cl.y1 - cl.y0) * (cl.x1 - cl.x0));
            Eigen::Map<const Vec<T>> gi(g + ((n * w.oh + oy) * w.ow + ox) * w.c, w.c);
            for (int64_t iy = cl.y0; iy < cl.y1; ++iy)
              for (int64_t ix = cl.x0; ix < cl.x1; ++ix)
                Eigen::Map<Vec<T>>(dx + ((n * w.h + iy) * w.w + ix) * w.c, w.c) += gi * scale;
          }
    });
  }
};

}  // namespace

void RegisterPoolKernels(KernelRegistry& reg) {
  RegisterCPU<PoolKernel<float, true>>(reg, "MaxPool", {DType::kFloat32});
  RegisterCPU<PoolKernel<double, true>>(reg, "MaxPool", {DType::kFloat64});
  RegisterCPU<PoolKernel<float, false>>(reg, "AvgPool", {DType::kFloat32});
  RegisterCPU<PoolKernel<double, false>>(reg, "AvgPool", {DType::kFloat64});
  RegisterCPU<MaxPoolGradKernel<float>>(reg, "MaxPoolGrad", {DType::kFloat32});
  RegisterCPU<MaxPoolGradKernel<double>>(reg, "MaxPoolGrad", {DType::kFloat64});
  RegisterCPU<AvgPoolGradKernel<float>>(reg, "AvgPoolGrad", {DType::kFloat32});
  RegisterCPU<AvgPoolGradKernel<double>>(reg, "AvgPoolGrad", {DType::kFloat64});
}

}  // namespace sf
