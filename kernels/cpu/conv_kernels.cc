// Kernels of Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter (NHWC input,
// HWIO filter): im2col + GEMM. A filter [KH,KW,C,OC] is a [KH*KW*C, OC]
// matrix and an im2col row (one output pixel's window, in (ky, kx, c) order)
// is a row of KH*KW*C values, so each output pixel is one GEMM row, already
// in NHWC order. Rows are processed in chunks so the im2col buffer stays
// small (cache-sized), and chunks are split over the compute pool.
//
// float32 kernels run on oneDNN when the build has it (dnnl_engines.h); these
// Eigen loops are then the fallback (float64, zero-size tensors, builds
// without oneDNN) and the reference tests hold the oneDNN engine to.
#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <type_traits>
#include <vector>

#include "kernels/cpu/dnnl_engines.h"
#include "kernels/cpu/nn_gemm.h"
#include "kernels/cpu/nn_kernels.h"
#include "kernels/cpu/precision_choice.h"

namespace sf {
namespace nn {

Status ParseWindowAttrs(const KernelInit& init, bool with_ksize, WindowAttrs* out) {
  auto check4 = [](const std::string& name, const std::vector<int64_t>& v) -> Status {
    if (v.size() != 4)
      return InvalidArgument("attr " + name + " must have 4 values (NHWC), got " +
                             std::to_string(v.size()));
    for (int64_t x : v)
      if (x < 1) return InvalidArgument("attr " + name + " values must be >= 1");
    if (v[0] != 1 || v[3] != 1)
      return InvalidArgument("attr " + name + " must be 1 in the batch and channel dimensions");
    return Status::OK();
  };
  SF_ASSIGN_OR_RETURN(out->strides, init.AttrOr<std::vector<int64_t>>("strides", {1, 1, 1, 1}));
  SF_RETURN_IF_ERROR(check4("strides", out->strides));
  if (with_ksize) {
    SF_ASSIGN_OR_RETURN(out->ksize, init.AttrOr<std::vector<int64_t>>("ksize", {1, 2, 2, 1}));
    SF_RETURN_IF_ERROR(check4("ksize", out->ksize));
  }
  SF_ASSIGN_OR_RETURN(std::string p, init.AttrOr<std::string>("padding", "VALID"));
  if (p != "SAME" && p != "VALID")
    return InvalidArgument("attr padding must be \"SAME\" or \"VALID\", got \"" + p + "\"");
  out->same = p == "SAME";
  return Status::OK();
}

Status ComputeWindow(bool same, Window* w) {
  // A stride at least the input's extent leaves one output position along
  // that axis whatever its value, so clamping it changes no result. It keeps
  // the libraries inside the geometry they handle: oneDNN 2.6's bf16 filter
  // gradient left taps unwritten (garbage up to 1e37) when the W stride
  // exceeded the input width, and its bf16 forward crashed at a stride of
  // 31478 (tests/kernels/dnnl_engines_test.cc).
  w->sh = std::min(w->sh, std::max<int64_t>(w->h, 1));
  w->sw = std::min(w->sw, std::max<int64_t>(w->w, 1));
  if (same) {
    w->oh = (w->h + w->sh - 1) / w->sh;
    w->ow = (w->w + w->sw - 1) / w->sw;
    w->pad_top = std::max<int64_t>((w->oh - 1) * w->sh + w->kh - w->h, 0) / 2;
    w->pad_left = std::max<int64_t>((w->ow - 1) * w->sw + w->kw - w->w, 0) / 2;
    return Status::OK();
  }
  // An empty axis gives an empty output, as in TensorFlow; a window larger
  // than a non-empty input has no valid position.
  if ((w->h != 0 && w->h < w->kh) || (w->w != 0 && w->w < w->kw))
    return InvalidArgument("window " + std::to_string(w->kh) + "x" + std::to_string(w->kw) +
                           " is larger than the input " + std::to_string(w->h) + "x" +
                           std::to_string(w->w) + " with VALID padding");
  w->oh = w->h == 0 ? 0 : (w->h - w->kh) / w->sh + 1;
  w->ow = w->w == 0 ? 0 : (w->w - w->kw) / w->sw + 1;
  w->pad_top = w->pad_left = 0;
  return Status::OK();
}

Status ShapeFromTensor(const Tensor& t, const char* what, Shape* out) {
  if ((t.dtype() != DType::kInt32 && t.dtype() != DType::kInt64) || t.num_elements() != 4)
    return InvalidArgument(std::string(what) + " must be 4 int32/int64 values, got " +
                           DTypeName(t.dtype()) + ShapeString(t.shape()));
  std::vector<int64_t> v = t.ToVector<int64_t>();
  for (int64_t d : v)
    if (d < 0) return InvalidArgument(std::string(what) + " has a negative dimension");
  *out = Shape(v.begin(), v.end());
  return Status::OK();
}

}  // namespace nn

namespace {

using nn::Window;

// Elements of im2col buffer per chunk (1 MiB of float).
constexpr int64_t kColBudget = int64_t{1} << 18;

bool IsPointwise(const Window& w) {
  return w.kh == 1 && w.kw == 1 && w.sh == 1 && w.sw == 1 && w.pad_top == 0 && w.pad_left == 0;
}

// Rows [r0, r0+rows) of the im2col matrix of `in` into col.
template <typename T>
void Im2Col(const Window& w, const T* in, int64_t r0, int64_t rows, T* col) {
  const int64_t kkc = w.kh * w.kw * w.c, pix = w.oh * w.ow;
  for (int64_t r = r0; r < r0 + rows; ++r) {
    const int64_t n = r / pix, p = r % pix, y = p / w.ow, x = p % w.ow;
    T* dst = col + (r - r0) * kkc;
    const int64_t iw0 = x * w.sw - w.pad_left;
    // The valid columns [lo, hi) of the window row are contiguous in NHWC.
    const int64_t lo = std::max<int64_t>(0, -iw0), hi = std::min<int64_t>(w.kw, w.w - iw0);
    for (int64_t ky = 0; ky < w.kh; ++ky, dst += w.kw * w.c) {
      const int64_t ih = y * w.sh - w.pad_top + ky;
      if (ih < 0 || ih >= w.h || hi <= lo) {
        std::fill(dst, dst + w.kw * w.c, T(0));
        continue;
      }
      if (lo > 0) std::fill(dst, dst + lo * w.c, T(0));
      std::memcpy(dst + lo * w.c, in + ((n * w.h + ih) * w.w + iw0 + lo) * w.c,
                  sizeof(T) * (hi - lo) * w.c);
      if (hi < w.kw) std::fill(dst + hi * w.c, dst + w.kw * w.c, T(0));
    }
  }
}

// Adds rows [r0, r0+rows) of an im2col-shaped gradient back into dx.
template <typename T>
void Col2ImAdd(const Window& w, const T* col, int64_t r0, int64_t rows, T* dx) {
  using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;
  const int64_t kkc = w.kh * w.kw * w.c, pix = w.oh * w.ow;
  for (int64_t r = r0; r < r0 + rows; ++r) {
    const int64_t n = r / pix, p = r % pix, y = p / w.ow, x = p % w.ow;
    const T* src = col + (r - r0) * kkc;
    const int64_t iw0 = x * w.sw - w.pad_left;
    const int64_t lo = std::max<int64_t>(0, -iw0), hi = std::min<int64_t>(w.kw, w.w - iw0);
    for (int64_t ky = 0; ky < w.kh; ++ky, src += w.kw * w.c) {
      const int64_t ih = y * w.sh - w.pad_top + ky;
      if (ih < 0 || ih >= w.h || hi <= lo) continue;
      const int64_t len = (hi - lo) * w.c;
      Eigen::Map<Vec>(dx + ((n * w.h + ih) * w.w + iw0 + lo) * w.c, len) +=
          Eigen::Map<const Vec>(src + lo * w.c, len);
    }
  }
}

// Runs fn(begin, end) over [0, n) on the pool when the work is big, else inline.
void Split(ComputePool* pool, int64_t n, int64_t min_block,
           const std::function<void(int64_t, int64_t)>& fn) {
  if (!pool || n <= min_block) fn(0, n);
  else pool->ParallelFor(n, min_block, fn);
}

// The row chunk that keeps an im2col buffer within budget.
int64_t ChunkRows(int64_t kkc) { return std::max<int64_t>(1, kColBudget / std::max<int64_t>(kkc, 1)); }

// Rows of GEMM work worth one thread.
int64_t MinRows(int64_t per_row_flops) {
  return std::max<int64_t>(1, nn::kGemmParallelMin / std::max<int64_t>(per_row_flops, 1));
}

template <typename T>
void ConvForward(ComputePool* pool, const Window& w, int64_t oc, const T* in, const T* f, T* out) {
  const int64_t rows = w.n * w.oh * w.ow, kkc = w.kh * w.kw * w.c;
  if (IsPointwise(w)) {
    nn::Gemm<T>(pool, in, f, out, rows, oc, w.c, false, false, /*accumulate=*/false, /*library=*/false);
    return;
  }
  const int64_t chunk = ChunkRows(kkc);
  Split(pool, rows, MinRows(kkc * oc), [&](int64_t b, int64_t e) {
    std::vector<T> col(std::min(chunk, e - b) * kkc);
    for (int64_t r = b; r < e; r += chunk) {
      const int64_t len = std::min(chunk, e - r);
      Im2Col(w, in, r, len, col.data());
      nn::GemmBlock<T>(col.data(), f, out + r * oc, len, oc, kkc, false, false, 0, len, 0, oc, false);
    }
  });
}

template <typename T>
void ConvBackpropInput(ComputePool* pool, const Window& w, int64_t oc, const T* f, const T* dy,
                       T* dx) {
  const int64_t pix = w.oh * w.ow, kkc = w.kh * w.kw * w.c;
  if (IsPointwise(w)) {
    nn::Gemm<T>(pool, dy, f, dx, w.n * pix, w.c, oc, false, true, /*accumulate=*/false, /*library=*/false);
    return;
  }
  std::fill(dx, dx + w.n * w.h * w.w * w.c, T(0));
  const int64_t chunk = ChunkRows(kkc);
  if (pool && w.n < pool->num_threads()) {
    // Too few images to split: split each chunk's GEMM instead and scatter inline.
    std::vector<T> col(std::min(chunk, w.n * pix) * kkc);
    for (int64_t r = 0; r < w.n * pix; r += chunk) {
      const int64_t len = std::min(chunk, w.n * pix - r);
      nn::Gemm<T>(pool, dy + r * oc, f, col.data(), len, kkc, oc, false, true, /*accumulate=*/false,
                  /*library=*/false);
      Col2ImAdd(w, col.data(), r, len, dx);
    }
    return;
  }
  // Windows of one image overlap in dx, so images (not rows) are split.
  Split(pool, w.n, std::max<int64_t>(1, MinRows(kkc * oc) / std::max<int64_t>(pix, 1)),
        [&](int64_t b, int64_t e) {
          std::vector<T> col(std::min(chunk, (e - b) * pix) * kkc);
          for (int64_t r = b * pix; r < e * pix; r += chunk) {
            const int64_t len = std::min(chunk, e * pix - r);
            nn::GemmBlock<T>(dy + r * oc, f, col.data(), len, kkc, oc, false, true, 0, len, 0, kkc,
                             false);
            Col2ImAdd(w, col.data(), r, len, dx);
          }
        });
}

template <typename T>
void ConvBackpropFilter(ComputePool* pool, const Window& w, int64_t oc, const T* in, const T* dy,
                        T* df) {
  const int64_t rows = w.n * w.oh * w.ow, kkc = w.kh * w.kw * w.c;
  if (IsPointwise(w)) {
    nn::Gemm<T>(pool, in, dy, df, w.c, oc, rows, true, false, /*accumulate=*/false, /*library=*/false);
    return;
  }
  std::fill(df, df + kkc * oc, T(0));
  const int64_t chunk = ChunkRows(kkc);
  std::mutex mu;
  Split(pool, rows, MinRows(kkc * oc), [&](int64_t b, int64_t e) {
    std::vector<T> col(std::min(chunk, e - b) * kkc);
    std::vector<T> part(kkc * oc, T(0));
    for (int64_t r = b; r < e; r += chunk) {
      const int64_t len = std::min(chunk, e - r);
      Im2Col(w, in, r, len, col.data());
      nn::GemmBlock<T>(col.data(), dy + r * oc, part.data(), kkc, oc, len, true, false, 0, kkc, 0,
                       oc, true);
    }
    using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;
    std::lock_guard<std::mutex> l(mu);
    Eigen::Map<Vec>(df, kkc * oc) += Eigen::Map<const Vec>(part.data(), kkc * oc);
  });
}

// Fills w from an input shape and a filter shape; InvalidArgument naming both.
Status ConvWindow(const char* op, const Shape& in, const Shape& f, const nn::WindowAttrs& a,
                  Window* w) {
  if (in.size() != 4 || f.size() != 4)
    return InvalidArgument(std::string(op) + " needs input [N,H,W,C] and filter [KH,KW,C,OC], got " +
                           ShapeString(in) + " and " + ShapeString(f));
  // A window of no rows or columns has no output size (oneDNN refused it
  // with an opaque "could not create a descriptor"). No input channels is
  // fine: a sum over nothing, zeros; no output channels, an empty output.
  if (f[0] == 0 || f[1] == 0)
    return InvalidArgument(std::string(op) + ": the filter's window must be at least 1 x 1, got filter " +
                           ShapeString(f));
  if (in[3] != f[2])
    return InvalidArgument(std::string(op) + " input channels " + std::to_string(in[3]) +
                           " differ from the filter's " + std::to_string(f[2]) + ": input " +
                           ShapeString(in) + ", filter " + ShapeString(f));
  w->n = in[0];
  w->h = in[1];
  w->w = in[2];
  w->c = in[3];
  w->kh = f[0];
  w->kw = f[1];
  w->sh = a.strides[1];
  w->sw = a.strides[2];
  return nn::ComputeWindow(a.same, w);
}

// Requires dy to have the shape Conv2D would have produced.
Status CheckDy(const char* op, const Window& w, int64_t oc, const Tensor& dy) {
  const Shape want{w.n, w.oh, w.ow, oc};
  if (dy.shape() != want)
    return InvalidArgument(std::string(op) + ": out_backprop has shape " + ShapeString(dy.shape()) +
                           ", expected " + ShapeString(want));
  return Status::OK();
}

// out[r, c] = relu?(out[r, c] + bias[c]) over rows [0, rows), split over the
// pool; bias may be null. A fused convolution's epilogue where the library
// cannot fuse it (Eigen, float64).
template <typename T>
void ApplyEpilogue(ComputePool* pool, int64_t rows, int64_t oc, const T* bias, bool relu, T* out) {
  if (!bias && !relu) return;
  using Row = Eigen::Array<T, 1, Eigen::Dynamic>;
  Split(pool, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(oc, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      Eigen::Map<Row> y(out + r * oc, oc);
      if (bias) y += Eigen::Map<const Row>(bias, oc);
      if (relu) y = y.max(T(0));
    }
  });
}

class EigenConv : public nn::ConvEngine {
 public:
  Status Forward(ComputePool* pool, const Window& w, int64_t oc, const float* in, const float* f,
                 const nn::ConvEpilogue& ep, float* out) override {
    ConvForward<float>(pool, w, oc, in, f, out);
    ApplyEpilogue(pool, w.n * w.oh * w.ow, oc, ep.bias, ep.relu, out);
    return Status::OK();
  }
  Status BackwardInput(ComputePool* pool, const Window& w, int64_t oc, const float* f, const float* dy,
                       float* dx) override {
    ConvBackpropInput<float>(pool, w, oc, f, dy, dx);
    return Status::OK();
  }
  Status BackwardFilter(ComputePool* pool, const Window& w, int64_t oc, const float* in,
                        const float* dy, float* df) override {
    ConvBackpropFilter<float>(pool, w, oc, in, dy, df);
    return Status::OK();
  }
};

// What every convolution kernel parses: the window attrs, the precision, and
// (float32) the oneDNN engine when the build has one.
template <typename T>
class ConvKernelBase : public OpKernel {
 public:
  ConvKernelBase(const KernelInit& init, Status* s) {
    *s = nn::ParseWindowAttrs(init, false, &a_);
    nn::Precision p = nn::Precision::kFp32;
    bool always = false;
    if (s->ok()) *s = nn::ParsePrecision(init, &p, &always);
    if (!s->ok()) return;
    if constexpr (std::is_same_v<T, float>) {
      engine_ = nn::NewDnnlConvEngine(p);
      if (p == nn::Precision::kBf16 && !always) {
        fp32_ = nn::NewDnnlConvEngine(nn::Precision::kFp32);
        choice_ = std::make_unique<nn::PrecisionChoice>();
      }
    } else if (p != nn::Precision::kFp32) {
      *s = InvalidArgument("precision bf16 applies to float32 convolutions, not " +
                           std::string(DTypeName(DTypeOf<T>::value)));
    }
  }

 protected:
  // The oneDNN engine, or null: Eigen (float64, builds without oneDNN, and
  // tensors with a zero dimension, which need no library call).
  nn::ConvEngine* Engine(const Window& w, int64_t oc) const {
    const bool empty = w.n == 0 || w.c == 0 || oc == 0 || w.oh == 0 || w.ow == 0;
    return empty ? nullptr : engine_.get();
  }
  // Runs pass (0 forward, 1 input gradient, 2 filter gradient) on the
  // engine, or, for precision "bf16", on whichever of bf16 and fp32 is the
  // faster for this window (PrecisionChoice).
  Status RunEngine(int pass, const Window& w, int64_t oc, const std::function<Status(nn::ConvEngine*)>& fn) {
    if (!choice_) return fn(engine_.get());
    return choice_->Run({pass, w.n, w.h, w.w, w.c, w.kh, w.kw, oc, w.sh, w.sw, w.pad_top, w.pad_left},
                        [&](nn::Precision p) { return fn(p == nn::Precision::kBf16 ? engine_.get() : fp32_.get()); });
  }
  nn::WindowAttrs a_;
  std::unique_ptr<nn::ConvEngine> engine_;
  std::unique_ptr<nn::ConvEngine> fp32_;         // "bf16": the fp32 engine it is timed against
  std::unique_ptr<nn::PrecisionChoice> choice_;  // "bf16": bf16 or fp32 per window, the faster
};

template <typename T>
class Conv2DKernel : public ConvKernelBase<T> {
 public:
  using ConvKernelBase<T>::ConvKernelBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const Tensor& f = ctx->input(1);
    Window w;
    Status s = ConvWindow("Conv2D", in.shape(), f.shape(), this->a_, &w);
    if (!s.ok()) return ctx->SetStatus(s);
    const int64_t oc = f.dim(3);
    Tensor& out = ctx->allocate_output(0, in.dtype(), {w.n, w.oh, w.ow, oc});
    if (this->Engine(w, oc))
      return ctx->SetStatus(this->RunEngine(0, w, oc, [&](nn::ConvEngine* e) {
        return e->Forward(ctx->pool(), w, oc, in.data<float>(), f.data<float>(), {}, out.data<float>());
      }));
    ConvForward<T>(ctx->pool(), w, oc, in.data<T>(), f.data<T>(), out.data<T>());
  }
};

// FusedConv2D: Conv2D, BiasAdd and (activation "relu") Relu in one kernel:
// oneDNN adds the bias and applies ReLU in the convolution itself; the Eigen
// path runs them over the output right after.
template <typename T>
class FusedConv2DKernel : public ConvKernelBase<T> {
 public:
  FusedConv2DKernel(const KernelInit& init, Status* s) : ConvKernelBase<T>(init, s) {
    if (!s->ok()) return;
    auto act = init.Attr<std::string>("activation");
    if (!act.ok()) *s = act.status();
    else if (*act != "none" && *act != "relu")
      *s = InvalidArgument("FusedConv2D activation must be \"none\" or \"relu\", got \"" + *act + "\"");
    else relu_ = *act == "relu";
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const Tensor& f = ctx->input(1);
    const Tensor& bias = ctx->input(2);
    Window w;
    Status s = ConvWindow("FusedConv2D", in.shape(), f.shape(), this->a_, &w);
    if (!s.ok()) return ctx->SetStatus(s);
    const int64_t oc = f.dim(3);
    if (bias.rank() != 1 || bias.dim(0) != oc)
      return ctx->SetStatus(InvalidArgument("FusedConv2D bias must be a vector of the filter's " +
                                            std::to_string(oc) + " output channels, got " + ShapeString(bias.shape())));
    Tensor& out = ctx->allocate_output(0, in.dtype(), {w.n, w.oh, w.ow, oc});
    if (this->Engine(w, oc))
      return ctx->SetStatus(this->RunEngine(0, w, oc, [&](nn::ConvEngine* e) {
        return e->Forward(ctx->pool(), w, oc, in.data<float>(), f.data<float>(),
                          nn::ConvEpilogue{bias.data<float>(), relu_}, out.data<float>());
      }));
    ConvForward<T>(ctx->pool(), w, oc, in.data<T>(), f.data<T>(), out.data<T>());
    ApplyEpilogue<T>(ctx->pool(), w.n * w.oh * w.ow, oc, bias.data<T>(), relu_, out.data<T>());
  }

 private:
  bool relu_ = false;
};

template <typename T>
class Conv2DBackpropInputKernel : public ConvKernelBase<T> {
 public:
  using ConvKernelBase<T>::ConvKernelBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& f = ctx->input(1);
    const Tensor& dy = ctx->input(2);
    Shape in_shape;
    Status s = nn::ShapeFromTensor(ctx->input(0), "Conv2DBackpropInput input_sizes", &in_shape);
    Window w;
    if (s.ok()) s = ConvWindow("Conv2DBackpropInput", in_shape, f.shape(), this->a_, &w);
    if (s.ok()) s = CheckDy("Conv2DBackpropInput", w, f.dim(3), dy);
    if (!s.ok()) return ctx->SetStatus(s);
    Tensor& dx = ctx->allocate_output(0, f.dtype(), in_shape);
    if (this->Engine(w, f.dim(3)))
      return ctx->SetStatus(this->RunEngine(1, w, f.dim(3), [&](nn::ConvEngine* e) {
        return e->BackwardInput(ctx->pool(), w, f.dim(3), f.data<float>(), dy.data<float>(), dx.data<float>());
      }));
    ConvBackpropInput<T>(ctx->pool(), w, f.dim(3), f.data<T>(), dy.data<T>(), dx.data<T>());
  }
};

template <typename T>
class Conv2DBackpropFilterKernel : public ConvKernelBase<T> {
 public:
  using ConvKernelBase<T>::ConvKernelBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const Tensor& dy = ctx->input(2);
    Shape f_shape;
    Status s = nn::ShapeFromTensor(ctx->input(1), "Conv2DBackpropFilter filter_sizes", &f_shape);
    Window w;
    if (s.ok()) s = ConvWindow("Conv2DBackpropFilter", in.shape(), f_shape, this->a_, &w);
    if (s.ok()) s = CheckDy("Conv2DBackpropFilter", w, f_shape[3], dy);
    if (!s.ok()) return ctx->SetStatus(s);
    Tensor& df = ctx->allocate_output(0, in.dtype(), f_shape);
    if (this->Engine(w, f_shape[3]))
      return ctx->SetStatus(this->RunEngine(2, w, f_shape[3], [&](nn::ConvEngine* e) {
        return e->BackwardFilter(ctx->pool(), w, f_shape[3], in.data<float>(), dy.data<float>(), df.data<float>());
      }));
    ConvBackpropFilter<T>(ctx->pool(), w, f_shape[3], in.data<T>(), dy.data<T>(), df.data<T>());
  }
};

}  // namespace

namespace nn {
std::unique_ptr<ConvEngine> NewEigenConvEngine() { return std::make_unique<EigenConv>(); }
}  // namespace nn

void RegisterConvKernels(KernelRegistry& reg) {
  RegisterCPU<Conv2DKernel<float>>(reg, "Conv2D", {DType::kFloat32});
  RegisterCPU<Conv2DKernel<double>>(reg, "Conv2D", {DType::kFloat64});
  RegisterCPU<FusedConv2DKernel<float>>(reg, "FusedConv2D", {DType::kFloat32});
  RegisterCPU<FusedConv2DKernel<double>>(reg, "FusedConv2D", {DType::kFloat64});
  RegisterCPU<Conv2DBackpropInputKernel<float>>(reg, "Conv2DBackpropInput", {DType::kFloat32});
  RegisterCPU<Conv2DBackpropInputKernel<double>>(reg, "Conv2DBackpropInput", {DType::kFloat64});
  RegisterCPU<Conv2DBackpropFilterKernel<float>>(reg, "Conv2DBackpropFilter", {DType::kFloat32});
  RegisterCPU<Conv2DBackpropFilterKernel<double>>(reg, "Conv2DBackpropFilter", {DType::kFloat64});
}

}  // namespace sf
