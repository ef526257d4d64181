// Kernels of MatMul and BatchMatMul: Eigen GEMM split over the compute pool;
// a float32 MatMul with attr precision "bf16" runs on oneDNN's bf16 matmul
// (dnnl_engines.h) instead.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/dnnl_engines.h"
#include "kernels/cpu/nn_gemm.h"
#include "kernels/cpu/nn_kernels.h"
#include "kernels/cpu/precision_choice.h"

namespace sf {
namespace {

struct MatMulFlags {
  bool ta = false, tb = false;
};

MatMulFlags ParseFlags(const KernelInit& init, Status* s) {
  MatMulFlags f;
  auto ta = init.AttrOr<bool>("transpose_a", false);
  auto tb = init.AttrOr<bool>("transpose_b", false);
  if (!ta.ok()) *s = ta.status();
  else if (!tb.ok()) *s = tb.status();
  else f = {*ta, *tb};
  return f;
}

std::string Describe(const Tensor& a, bool ta, const Tensor& b, bool tb) {
  return "a " + ShapeString(a.shape()) + (ta ? " (transposed)" : "") + " and b " +
         ShapeString(b.shape()) + (tb ? " (transposed)" : "");
}

// The m x k by k x n of op(a) op(b); InvalidArgument naming op for inputs
// that are not matrices or whose inner dimensions differ.
Status ProductDims(const char* op, const Tensor& a, const Tensor& b, const MatMulFlags& f, int64_t* m, int64_t* n,
                   int64_t* k) {
  if (a.rank() != 2 || b.rank() != 2)
    return InvalidArgument(std::string(op) + " needs rank-2 inputs, got " + Describe(a, f.ta, b, f.tb));
  *m = a.dim(f.ta ? 1 : 0);
  *k = a.dim(f.ta ? 0 : 1);
  *n = b.dim(f.tb ? 0 : 1);
  if (*k != b.dim(f.tb ? 1 : 0))
    return InvalidArgument(std::string(op) + " inner dimensions differ: " + Describe(a, f.ta, b, f.tb));
  return Status::OK();
}

template <typename T>
class MatMulKernel : public OpKernel {
 public:
  MatMulKernel(const KernelInit& init, Status* s) : f_(ParseFlags(init, s)) {
    nn::Precision p = nn::Precision::kFp32;
    bool always = false;
    if (s->ok()) *s = nn::ParsePrecision(init, &p, &always);
    if (!s->ok() || p == nn::Precision::kFp32) return;
    if constexpr (std::is_same_v<T, float>) {
      bf16_ = nn::NewDnnlBf16MatMulEngine();  // ParsePrecision checked that oneDNN is built in
      if (!always) choice_ = std::make_unique<nn::PrecisionChoice>();
    } else {
      *s = InvalidArgument("precision bf16 applies to float32 MatMul, not " +
                           std::string(DTypeName(DTypeOf<T>::value)));
    }
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    int64_t m, n, k;
    Status st = ProductDims("MatMul", a, b, f_, &m, &n, &k);
    if (!st.ok()) return ctx->SetStatus(st);
    Tensor& c = ctx->allocate_output(0, a.dtype(), {m, n});
    auto run = [&](nn::Precision p) -> Status {
      if (p == nn::Precision::kBf16)
        return bf16_->Run(ctx->pool(), a.data<float>(), b.data<float>(), c.data<float>(), m, n, k, f_.ta, f_.tb);
      nn::Gemm<T>(ctx->pool(), a.data<T>(), b.data<T>(), c.data<T>(), m, n, k, f_.ta, f_.tb);
      return Status::OK();
    };
    if (!bf16_) return ctx->SetStatus(run(nn::Precision::kFp32));
    ctx->SetStatus(choice_ ? choice_->Run({m, n, k}, run) : run(nn::Precision::kBf16));
  }

 private:
  MatMulFlags f_;
  std::unique_ptr<nn::MatMulEngine> bf16_;      // null: fp32 on Eigen
  std::unique_ptr<nn::PrecisionChoice> choice_;  // "bf16": bf16 or fp32 per shape, the faster
};

// activation(op(a) op(b) + bias) (graph/ops/nn_ops.cc). Each thread's block
// of the output is written by the product (oneDNN's sgemm with beta 0 never
// reads it), then one pass adds the bias and applies the activation while
// the block is in cache. Filling the block with the bias first for the
// product to accumulate onto cost a third pass over it: 2.9% of DLRM's step
// CPU on an AVX2 EPYC, where the step is GEMM-bound (docs/PERFORMANCE.md).
template <typename T>
class FusedMatMulKernel : public OpKernel {
 public:
  FusedMatMulKernel(const KernelInit& init, Status* s) : f_(ParseFlags(init, s)) {
    auto act = init.AttrOr<std::string>("activation", "none");
    if (!act.ok()) *s = act.status();
    else if (*act == "relu") relu_ = true;
    else if (*act != "none") *s = InvalidArgument("FusedMatMul activation must be \"none\" or \"relu\", got \"" + *act + "\"");
    nn::Precision p = nn::Precision::kFp32;
    bool always = false;
    if (s->ok()) *s = nn::ParsePrecision(init, &p, &always);
    if (!s->ok() || p == nn::Precision::kFp32) return;
    if constexpr (std::is_same_v<T, float>) {
      bf16_ = nn::NewDnnlBf16MatMulEngine();
      if (!always) choice_ = std::make_unique<nn::PrecisionChoice>();
    } else {
      *s = InvalidArgument("precision bf16 applies to float32 FusedMatMul, not " +
                           std::string(DTypeName(DTypeOf<T>::value)));
    }
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    const Tensor& bias = ctx->input(2);
    int64_t m, n, k;
    Status st = ProductDims("FusedMatMul", a, b, f_, &m, &n, &k);
    if (!st.ok()) return ctx->SetStatus(st);
    if (bias.rank() != 1 || bias.dim(0) != n || bias.dtype() != a.dtype()) {
      ctx->SetStatus(InvalidArgument("FusedMatMul bias must be a vector of the product's " + std::to_string(n) +
                                     " columns, got " + bias.DebugString(0)));
      return;
    }
    Tensor& c = ctx->allocate_output(0, a.dtype(), {m, n});
    if (m == 0 || n == 0) return;
    auto run = [&](nn::Precision p) -> Status {
      if (p == nn::Precision::kBf16) return Bf16(ctx, a, b, bias, c, m, n, k);
      Fp32(ctx, a, b, bias, c, m, n, k);
      return Status::OK();
    };
    if (!bf16_) return ctx->SetStatus(run(nn::Precision::kFp32));
    ctx->SetStatus(choice_ ? choice_->Run({m, n, k}, run) : run(nn::Precision::kBf16));
  }

 private:
  // The bf16 product writes c; bias and activation follow in one pass.
  Status Bf16(OpKernelContext* ctx, const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& c, int64_t m,
              int64_t n, int64_t k) {
    if (k == 0) {
      std::fill(c.data<T>(), c.data<T>() + m * n, T(0));
    } else {
      Status run = bf16_->Run(ctx->pool(), a.data<float>(), b.data<float>(), c.data<float>(), m, n, k, f_.ta, f_.tb);
      if (!run.ok()) return run;
    }
    using RMf = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<RMf> C(c.data<T>(), m, n);
    C.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(bias.data<T>(), n);
    if (relu_) C = C.cwiseMax(T(0));
    return Status::OK();
  }

  void Fp32(OpKernelContext* ctx, const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& c, int64_t m,
            int64_t n, int64_t k) {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    const T* pbias = bias.data<T>();
    T* pc = c.data<T>();
    using RM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    nn::GemmSplit(ctx->pool(), m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      Eigen::Map<RM> C(pc, m, n);
      auto cb = C.block(r0, c0, r1 - r0, c1 - c0);
      const Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> brow(pbias + c0, c1 - c0);
      if (k > 0) nn::GemmBlock(pa, pb, pc, m, n, k, f_.ta, f_.tb, r0, r1, c0, c1, /*accumulate=*/false);
      else cb.setZero();
      if (relu_) cb = (cb.rowwise() + brow).cwiseMax(T(0));
      else cb.rowwise() += brow;
    });
  }

  MatMulFlags f_;
  bool relu_ = false;
  std::unique_ptr<nn::MatMulEngine> bf16_;      // null: fp32 on Eigen
  std::unique_ptr<nn::PrecisionChoice> choice_;  // "bf16": bf16 or fp32 per shape, the faster
};

// Batch dims broadcast NumPy-style; each output matrix is one independent
// product, so batches are split over the pool (one big batch splits its rows).
template <typename T>
class BatchMatMulKernel : public OpKernel {
 public:
  BatchMatMulKernel(const KernelInit& init, Status* s) : f_(ParseFlags(init, s)) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    if (a.rank() < 2 || b.rank() < 2) {
      ctx->SetStatus(InvalidArgument("BatchMatMul needs inputs of rank >= 2, got " +
                                     Describe(a, f_.ta, b, f_.tb)));
      return;
    }
    const int ra = a.rank(), rb = b.rank();
    const int64_t m = a.dim(f_.ta ? ra - 1 : ra - 2), k = a.dim(f_.ta ? ra - 2 : ra - 1);
    const int64_t kb = b.dim(f_.tb ? rb - 1 : rb - 2), n = b.dim(f_.tb ? rb - 2 : rb - 1);
    if (k != kb) {
      ctx->SetStatus(InvalidArgument("BatchMatMul inner dimensions differ: " +
                                     Describe(a, f_.ta, b, f_.tb)));
      return;
    }
    // Broadcast the batch dims (right-aligned).
    const int rank = std::max(ra, rb) - 2;
    Shape out(rank), sa(rank, 1), sb(rank, 1);
    for (int i = 0; i < ra - 2; ++i) sa[rank - (ra - 2) + i] = a.dim(i);
    for (int i = 0; i < rb - 2; ++i) sb[rank - (rb - 2) + i] = b.dim(i);
    for (int i = 0; i < rank; ++i) {
      if (sa[i] != sb[i] && sa[i] != 1 && sb[i] != 1) {
        ctx->SetStatus(InvalidArgument("BatchMatMul batch dimensions do not broadcast: " +
                                       Describe(a, f_.ta, b, f_.tb)));
        return;
      }
      out[i] = sa[i] == 1 ? sb[i] : sa[i];
    }
    const int64_t batches = NumElements(out);
    // Offsets (in matrices) of each batch's operands.
    std::vector<int64_t> oa(batches), ob(batches);
    for (int64_t bi = 0; bi < batches; ++bi) {
      int64_t rem = bi, ia = 0, ib = 0, stride_a = 1, stride_b = 1;
      for (int i = rank - 1; i >= 0; --i) {
        const int64_t idx = rem % out[i];
        rem /= out[i];
        if (sa[i] != 1) ia += idx * stride_a;
        if (sb[i] != 1) ib += idx * stride_b;
        stride_a *= sa[i];
        stride_b *= sb[i];
      }
      oa[bi] = ia;
      ob[bi] = ib;
    }
    Shape out_shape = out;
    out_shape.push_back(m);
    out_shape.push_back(n);
    Tensor& c = ctx->allocate_output(0, a.dtype(), out_shape);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = c.data<T>();
    const int64_t sza = m * k, szb = k * n, szc = m * n;
    if (batches == 1) {
      nn::Gemm<T>(ctx->pool(), pa, pb, pc, m, n, k, f_.ta, f_.tb);
      return;
    }
    auto run = [&](int64_t b0, int64_t b1) {
      for (int64_t bi = b0; bi < b1; ++bi)
        nn::Gemm<T>(nullptr, pa + oa[bi] * sza, pb + ob[bi] * szb, pc + bi * szc, m, n, k, f_.ta,
                    f_.tb);
    };
    const int64_t per = std::max<int64_t>(1, m * n * std::max<int64_t>(k, 1));
    if (!ctx->pool() || batches * per < nn::kGemmParallelMin) run(0, batches);
    else ctx->pool()->ParallelFor(batches, std::max<int64_t>(1, nn::kGemmParallelMin / per), run);
  }

 private:
  MatMulFlags f_;
};

}  // namespace

void RegisterMatMulKernels(KernelRegistry& reg) {
  RegisterCPU<MatMulKernel<float>>(reg, "MatMul", {DType::kFloat32});
  RegisterCPU<MatMulKernel<double>>(reg, "MatMul", {DType::kFloat64});
  RegisterCPU<FusedMatMulKernel<float>>(reg, "FusedMatMul", {DType::kFloat32});
  RegisterCPU<FusedMatMulKernel<double>>(reg, "FusedMatMul", {DType::kFloat64});
  RegisterCPU<BatchMatMulKernel<float>>(reg, "BatchMatMul", {DType::kFloat32});
  RegisterCPU<BatchMatMulKernel<double>>(reg, "BatchMatMul", {DType::kFloat64});
}

}  // namespace sf
