// The float32 convolution and matmul implementations behind the Conv2D and
// MatMul kernels, as one interface with two implementations: Eigen (im2col +
// GEMM, always built; the reference the other is tested against) and oneDNN
// (built when libdnnl-dev is found). A kernel object owns one engine, so what
// the oneDNN engine builds per shape (primitive descriptors, primitives,
// reorders) is built on the first step of that shape and reused after.
//
// Threads: the oneDNN engine never starts a thread team of its own (Debian's
// oneDNN runs on OpenMP, which would fight the compute pool for the cores).
// It pins OpenMP to one thread on every thread that calls it, and splits a
// batch (or a product's rows or columns) into one block per compute-pool
// thread, each block one single-threaded primitive.
// Thread-safety: every method may be called from several threads at once
// (two steps may run one kernel together).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/compute_pool.h"
#include "kernels/cpu/nn_kernels.h"

namespace sf {
namespace nn {

// How a MatMul or convolution multiplies: fp32 throughout, or bf16 inputs with
// fp32 accumulation and an fp32 result (the graph keeps fp32 tensors).
enum class Precision { kFp32, kBf16 };

// Reads attr "precision" ("fp32", the default, "bf16" or "bf16_always"; the
// last sets *always, which may be null). InvalidArgument for another value;
// FailedPrecondition when bf16 cannot run here (no AVX512_BF16 or no oneDNN).
Status ParsePrecision(const KernelInit& init, Precision* out, bool* always = nullptr);

// What a forward convolution applies to each output while it is in cache
// (FusedConv2D): a bias per output channel (null: none), then ReLU. On this
// machine a pass over a conv layer's output is memory-bound, so each pass
// saved is worth more than its arithmetic.
struct ConvEpilogue {
  const float* bias = nullptr;  // [oc]
  bool relu = false;
};

// Conv2D and its two gradients on float32 NHWC input, HWIO filter. Every
// method's error: Internal naming the op and shapes when the library fails,
// ResourceExhausted when a buffer cannot be allocated.
class ConvEngine {
 public:
  virtual ~ConvEngine() = default;
  // out[n,oh,ow,oc] = epilogue(conv(in, f)).
  virtual Status Forward(ComputePool* pool, const Window& w, int64_t oc, const float* in,
                         const float* f, const ConvEpilogue& ep, float* out) = 0;
  // dx[n,h,w,c] = the gradient of Forward's input for dy.
  virtual Status BackwardInput(ComputePool* pool, const Window& w, int64_t oc, const float* f,
                               const float* dy, float* dx) = 0;
  // df[kh,kw,c,oc] = the gradient of Forward's filter for dy.
  virtual Status BackwardFilter(ComputePool* pool, const Window& w, int64_t oc, const float* in,
                                const float* dy, float* df) = 0;
};

// The Eigen engine (fp32 only); never null.
std::unique_ptr<ConvEngine> NewEigenConvEngine();

// The oneDNN engine at `precision`; null when built without oneDNN.
std::unique_ptr<ConvEngine> NewDnnlConvEngine(Precision precision);

// MaxPoolGrad on float32 NHWC: dy routed to each window's first maximum.
class MaxPoolGradEngine {
 public:
  virtual ~MaxPoolGradEngine() = default;
  // dx[n,h,w,c] from the input x and dy[n,oh,ow,c] for window w (kh, kw
  // being the pool's ksize). Errors as ConvEngine's.
  virtual Status Run(ComputePool* pool, const Window& w, const float* x, const float* dy, float* dx) = 0;
};

// The oneDNN MaxPoolGrad (max pooling forward for its workspace, then
// backward); null when built without oneDNN.
std::unique_ptr<MaxPoolGradEngine> NewDnnlMaxPoolGradEngine();

// C[m,n] = op(A) op(B) in bf16 with fp32 accumulation (A [m,k] or [k,m] when
// ta, B [k,n] or [n,k] when tb, row-major float32).
class MatMulEngine {
 public:
  virtual ~MatMulEngine() = default;
  // Errors as ConvEngine's (naming the sizes).
  virtual Status Run(ComputePool* pool, const float* a, const float* b, float* c, int64_t m,
                     int64_t n, int64_t k, bool ta, bool tb) = 0;
};

// The oneDNN bf16 matmul; null when built without oneDNN.
std::unique_ptr<MatMulEngine> NewDnnlBf16MatMulEngine();


}  // namespace nn
}  // namespace sf
