// Kernels of the interaction ops (graph/ops/interaction_ops.cc):
// DotInteraction and DotInteractionGrad, float32 and float64. Each example's
// m + 1 vectors (dense, then the m sparse rows) are small (DLRM: 27 x 16), so
// one example's work stays in L1: the kernels loop over examples, split over
// the compute pool, with the vectors' width a compile-time constant for the
// common widths (16, 32, 64) so the loops over it vectorize fully.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/compute_pool.h"
#include "kernels/cpu/cpu_kernels.h"

namespace sf {
namespace {

// Examples per block handed to a pool thread (one example is ~10k flops).
constexpr int64_t kExamplesPerBlock = 32;

// Checks dense [n, d] and sparse [n, m, d]; sets n, m, d.
Status CheckInputs(const Tensor& x, const Tensor& s, const char* op, int64_t* n, int64_t* m, int64_t* d) {
  if (x.rank() != 2 || s.rank() != 3 || s.dim(0) != x.dim(0) || s.dim(2) != x.dim(1))
    return InvalidArgument(std::string(op) + " needs dense [n, d] and sparse [n, m, d], got " + ShapeString(x.shape()) +
                           " and " + ShapeString(s.shape()));
  *n = x.dim(0);
  *m = s.dim(1);
  *d = x.dim(1);
  return Status::OK();
}

// Runs fn(begin, end) over n examples, on the pool when there are several blocks.
template <typename Fn>
void ForExamples(OpKernelContext* ctx, int64_t n, const Fn& fn) {
  if (!ctx->pool() || n <= kExamplesPerBlock) fn(0, n);
  else ctx->pool()->ParallelFor(n, kExamplesPerBlock, fn);
}

// The vector v of example e: v_0 its dense row, v_i (i >= 1) its sparse row i - 1.
template <typename T>
inline const T* Vec(const T* x, const T* s, int64_t e, int64_t m, int64_t d, int64_t i) {
  return i == 0 ? x + e * d : s + (e * m + i - 1) * d;
}

template <typename T, int kD>
inline void Axpy(T alpha, const T* x, T* y, int64_t d) {
  const int64_t w = kD > 0 ? kD : d;
#pragma GCC ivdep
  for (int64_t k = 0; k < w; ++k) y[k] += alpha * x[k];
}

// Vectors per chunk of the transposed forward: one 512-bit register of floats.
constexpr int64_t kChunk = 16;

// The forward of examples [begin, end): each example's vectors are copied
// transposed (d rows of m + 1 values, zero-padded to whole chunks), so row i
// of the Gram matrix, v_i . v_j for every j < i, is d multiply-adds of a
// broadcast v_i[k] with contiguous chunks of row k: vectorized over j, with
// no horizontal sum per dot product (what the plain loop spends most on).
template <typename T, int kD>
void Forward(const T* x, const T* s, T* out, int64_t begin, int64_t end, int64_t m, int64_t d) {
  const int64_t width = d + (m + 1) * m / 2;
  const int64_t f = m + 1, fp = (f + kChunk - 1) / kChunk * kChunk;
  std::vector<T> tt(static_cast<size_t>(d * fp), T(0));  // [d, fp]
  for (int64_t e = begin; e < end; ++e) {
    for (int64_t j = 0; j < f; ++j) {
      const T* vj = Vec(x, s, e, m, d, j);
      for (int64_t k = 0; k < d; ++k) tt[k * fp + j] = vj[k];
    }
    T* o = out + e * width;
    std::memcpy(o, x + e * d, sizeof(T) * d);
    o += d;
    for (int64_t i = 1; i <= m; ++i) {
      const T* vi = Vec(x, s, e, m, d, i);
      for (int64_t c = 0; c < i; c += kChunk) {
        T acc[kChunk] = {};
        const int64_t kd = kD > 0 ? kD : d;
        for (int64_t k = 0; k < kd; ++k) {
          const T a = vi[k];
          const T* row = tt.data() + k * fp + c;
          for (int64_t l = 0; l < kChunk; ++l) acc[l] += a * row[l];
        }
        const int64_t n = std::min(kChunk, i - c);
        std::memcpy(o, acc, sizeof(T) * n);
        o += n;
      }
    }
  }
}

template <typename T, int kD>
void Backward(const T* dy, const T* x, const T* s, T* dx, T* ds, int64_t begin, int64_t end, int64_t m, int64_t d) {
  const int64_t width = d + (m + 1) * m / 2;
  for (int64_t e = begin; e < end; ++e) {
    const T* g = dy + e * width;
    T* gx = dx + e * d;
    T* gs = ds + e * m * d;
    std::memcpy(gx, g, sizeof(T) * d);
    std::fill(gs, gs + m * d, T(0));
    g += d;
    auto grad = [&](int64_t i) { return i == 0 ? gx : gs + (i - 1) * d; };
    for (int64_t i = 1; i <= m; ++i) {
      const T* vi = Vec(x, s, e, m, d, i);
      T* gi = grad(i);
      for (int64_t j = 0; j < i; ++j) {
        const T c = *g++;
        Axpy<T, kD>(c, Vec(x, s, e, m, d, j), gi, d);
        Axpy<T, kD>(c, vi, grad(j), d);
      }
    }
  }
}

// Calls f with the width as a template constant where it is a common one.
template <typename F>
void WithWidth(int64_t d, const F& f) {
  switch (d) {
    case 16: f(std::integral_constant<int, 16>{}); break;
    case 32: f(std::integral_constant<int, 32>{}); break;
    case 64: f(std::integral_constant<int, 64>{}); break;
    default: f(std::integral_constant<int, 0>{}); break;
  }
}

template <typename T>
class DotInteractionKernel : public OpKernel {
 public:
  DotInteractionKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& xt = ctx->input(0);
    const Tensor& st = ctx->input(1);
    int64_t n, m, d;
    if (Status c = CheckInputs(xt, st, "DotInteraction", &n, &m, &d); !c.ok()) return ctx->SetStatus(c);
    Tensor& out = ctx->allocate_output(0, xt.dtype(), {n, d + (m + 1) * m / 2});
    const T* x = xt.data<T>();
    const T* s = st.data<T>();
    T* o = out.data<T>();
    WithWidth(d, [&](auto w) {
      ForExamples(ctx, n, [&](int64_t b, int64_t e) { Forward<T, decltype(w)::value>(x, s, o, b, e, m, d); });
    });
  }
};

template <typename T>
class DotInteractionGradKernel : public OpKernel {
 public:
  DotInteractionGradKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& gt = ctx->input(0);
    const Tensor& xt = ctx->input(1);
    const Tensor& st = ctx->input(2);
    int64_t n, m, d;
    if (Status c = CheckInputs(xt, st, "DotInteractionGrad", &n, &m, &d); !c.ok()) return ctx->SetStatus(c);
    if (gt.rank() != 2 || gt.dim(0) != n || gt.dim(1) != d + (m + 1) * m / 2)
      return ctx->SetStatus(InvalidArgument("DotInteractionGrad: dy must be [" + std::to_string(n) + ", " +
                                            std::to_string(d + (m + 1) * m / 2) + "], got " + ShapeString(gt.shape())));
    Tensor& dx = ctx->allocate_output(0, xt.dtype(), xt.shape());
    Tensor& ds = ctx->allocate_output(1, st.dtype(), st.shape());
    const T* g = gt.data<T>();
    const T* x = xt.data<T>();
    const T* s = st.data<T>();
    T* gx = dx.data<T>();
    T* gs = ds.data<T>();
    WithWidth(d, [&](auto w) {
      ForExamples(ctx, n, [&](int64_t b, int64_t e) { Backward<T, decltype(w)::value>(g, x, s, gx, gs, b, e, m, d); });
    });
  }
};

}  // namespace

void RegisterInteractionKernels(KernelRegistry& reg) {
  RegisterCPU<DotInteractionKernel<float>>(reg, "DotInteraction", {DType::kFloat32});
  RegisterCPU<DotInteractionKernel<double>>(reg, "DotInteraction", {DType::kFloat64});
  RegisterCPU<DotInteractionGradKernel<float>>(reg, "DotInteractionGrad", {DType::kFloat32});
  RegisterCPU<DotInteractionGradKernel<double>>(reg, "DotInteractionGrad", {DType::kFloat64});
}

}  // namespace sf
