// Kernels of the element-wise NN ops (activations and their gradients),
// softmax, the losses, BiasAdd and Dropout; registers every NN kernel file.
#define EIGEN_USE_THREADS
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>

#include <unsupported/Eigen/CXX11/Tensor>

#include "kernels/compute_pool.h"
#include "kernels/run_counters.h"
#include "kernels/cpu/cwise_common.h"
#include "kernels/cpu/nn_kernels.h"

namespace sf {
namespace {

// Below this many elements a kernel runs inline: handing work to the pool
// costs more than it saves.
constexpr int64_t kParallelMin = 32768;

template <typename T>
using RowArray = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ColVec = Eigen::Array<T, Eigen::Dynamic, 1>;

// dst = expr, on the pool's Eigen device when big.
template <typename Dst, typename Expr>
void Assign(OpKernelContext* ctx, Dst dst, const Expr& expr, int64_t n) {
  if (n > kParallelMin && ctx->pool()) dst.device(ctx->eigen_device()) = expr;
  else dst = expr;
}

// Runs fn(begin, end) over n rows of `cols` elements, split over the pool when big.
void SplitRows(OpKernelContext* ctx, int64_t n, int64_t cols,
               const std::function<void(int64_t, int64_t)>& fn) {
  // Eigen asserts on the row views of an empty block.
  if (n == 0 || cols == 0) return;
  const int64_t min_block = std::max<int64_t>(1, kParallelMin / std::max<int64_t>(cols, 1));
  if (!ctx->pool() || n <= min_block) fn(0, n);
  else ctx->pool()->ParallelFor(n, min_block, fn);
}

// ---- element-wise ----------------------------------------------------------

struct ReluOp {
  template <typename T, typename X> static auto Apply(const X& x) { return x.cwiseMax(T(0)); }
};
// Where a result is subnormal (x below about -87 in float, -708 in double)
// Eigen's packet sigmoid and exp give 0 or clamp: redone with the C library
// (cwise::FixUp). exp(x) / (1 + exp(x)), as exp(-x) overflows there.
template <typename T>
constexpr T kSubnormalResultBelow = std::is_same_v<T, double> ? T(-708) : T(-87);
struct SigmoidOp {
  template <typename T, typename X> static auto Apply(const X& x) { return x.sigmoid(); }
  template <typename T> static bool Exact(T x) { return !(x < kSubnormalResultBelow<T>); }
  template <typename T> static T Scalar(T x) {
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
};
struct TanhOp {
  template <typename T, typename X> static auto Apply(const X& x) { return x.tanh(); }
};
// log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|.
struct SoftplusOp {
  template <typename T, typename X> static auto Apply(const X& x) {
    return x.cwiseMax(T(0)) + (-x.abs()).exp().log1p();
  }
  template <typename T> static bool Exact(T x) { return !(x < kSubnormalResultBelow<T>); }
  template <typename T> static T Scalar(T x) { return std::log1p(std::exp(x)); }
};
struct EluOp {
  template <typename T, typename X> static auto Apply(const X& x) {
    // expm1, not exp - 1: keeps the precision of small negative x.
    return (x > x.constant(T(0))).select(x, x.expm1());
  }
};

template <typename T, typename Op>
class UnaryKernel : public OpKernel {
 public:
  UnaryKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    Tensor& out = ctx->allocate_output(0, in.dtype(), in.shape());
    const int64_t n = in.num_elements();
    // One answer per value wherever it falls in the tensor (cwise_common.h).
    cwise::AssignUnary(ctx, in.data<T>(), out.data<T>(), n, [](const auto& m) { return Op::template Apply<T>(m); });
    cwise::FixUp<T, Op>(in.data<T>(), out.data<T>(), n);
  }
};

// LeakyRelu: x where x > 0, else alpha * x (NaN stays NaN), as TensorFlow.
template <typename T>
class LeakyReluKernel : public OpKernel {
 public:
  LeakyReluKernel(const KernelInit& init, Status* s) {
    auto a = init.AttrOr<double>("alpha", 0.2);
    if (!a.ok()) *s = a.status();
    else alpha_ = static_cast<T>(*a);
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    Tensor& out = ctx->allocate_output(0, in.dtype(), in.shape());
    auto x = in.flat<T>();
    Assign(ctx, out.flat<T>(), (x > x.constant(T(0))).select(x, x * x.constant(alpha_)), in.num_elements());
  }

 private:
  T alpha_ = T(0.2);
};

// SoftplusGrad(dy, x): a = dy.
struct SoftplusGradOp {
  template <typename T, typename A, typename B> static auto Apply(const A& dy, const B& x) {
    return dy * x.sigmoid();
  }
};
// SigmoidGrad(y, dy), TanhGrad(y, dy): a = y.
struct SigmoidGradOp {
  template <typename T, typename A, typename B> static auto Apply(const A& y, const B& dy) {
    return dy * y * (y.constant(T(1)) - y);
  }
};
struct TanhGradOp {
  template <typename T, typename A, typename B> static auto Apply(const A& y, const B& dy) {
    return dy * (y.constant(T(1)) - y * y);
  }
};

template <typename T, typename Op>
class BinaryGradKernel : public OpKernel {
 public:
  BinaryGradKernel(const KernelInit& init, Status*) : op_(init.op) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    if (a.shape() != b.shape()) {
      ctx->SetStatus(InvalidArgument(op_ + " inputs must have the same shape, got " +
                                     ShapeString(a.shape()) + " and " + ShapeString(b.shape())));
      return;
    }
    Tensor& out = ctx->allocate_output(0, a.dtype(), a.shape());
    auto fa = a.flat<T>();
    auto fb = b.flat<T>();
    Assign(ctx, out.flat<T>(), Op::template Apply<T>(fa, fb), a.num_elements());
  }

 private:
  std::string op_;
};

// ReluGrad(dy, y) and EluGrad(dy, y) select per element. Eigen's select is
// not vectorised and costs several times a plain loop, which the compiler
// turns into branch-free blends.
struct ReluGradFn {
  template <typename T> static T Apply(T dy, T y) { return y > T(0) ? dy : T(0); }
};
struct EluGradFn {
  template <typename T> static T Apply(T dy, T y) { return y > T(0) ? dy : dy * (y + T(1)); }
};

template <typename T, typename Fn>
class SelectGradKernel : public OpKernel {
 public:
  SelectGradKernel(const KernelInit& init, Status*) : op_(init.op) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dyt = ctx->input(0);
    const Tensor& yt = ctx->input(1);
    if (dyt.shape() != yt.shape()) {
      ctx->SetStatus(InvalidArgument(op_ + " inputs must have the same shape, got " +
                                     ShapeString(dyt.shape()) + " and " + ShapeString(yt.shape())));
      return;
    }
    Tensor& out = ctx->allocate_output(0, dyt.dtype(), dyt.shape());
    const T* dy = dyt.data<T>();
    const T* y = yt.data<T>();
    T* dx = out.data<T>();
    SplitRows(ctx, dyt.num_elements(), 1, [dy, y, dx](int64_t b, int64_t e) {
      // Blocks of a fixed 16 through a local array: g++ -O2 vectorizes a
      // loop of known trip count that stores nowhere dx might alias, and left
      // the plain loop's select scalar (ReluGrad ran one float at a time;
      // Eigen's select is scalar and branchy too).
      constexpr int kBlock = 16;
      int64_t i = b;
      for (; i + kBlock <= e; i += kBlock) {
        T t[kBlock];
        for (int l = 0; l < kBlock; ++l) t[l] = Fn::Apply(dy[i + l], y[i + l]);
        std::memcpy(dx + i, t, sizeof t);
      }
      for (; i < e; ++i) dx[i] = Fn::Apply(dy[i], y[i]);
    });
  }

 private:
  std::string op_;
};

// ---- softmax ---------------------------------------------------------------

// Views a tensor of rank >= 1 as [rows, last dim].
struct Rows {
  int64_t rows = 0, cols = 0;
};
bool AsRows(OpKernelContext* ctx, const Tensor& t, const std::string& op, Rows* r) {
  if (t.rank() < 1) {
    ctx->SetStatus(InvalidArgument(op + " needs rank >= 1, got " + ShapeString(t.shape())));
    return false;
  }
  r->cols = t.dim(t.rank() - 1);
  r->rows = r->cols == 0 ? 0 : t.num_elements() / r->cols;
  return true;
}

template <typename T>
Eigen::Map<const RowArray<T>> RowsOf(const Tensor& t, const Rows& r, int64_t b, int64_t e) {
  return Eigen::Map<const RowArray<T>>(t.data<T>() + b * r.cols, e - b, r.cols);
}
template <typename T>
Eigen::Map<RowArray<T>> MutableRowsOf(Tensor& t, const Rows& r, int64_t b, int64_t e) {
  return Eigen::Map<RowArray<T>>(t.data<T>() + b * r.cols, e - b, r.cols);
}

// Softmax and LogSoftmax; the row max is subtracted first so exp never overflows.
template <typename T, bool kLog>
class SoftmaxKernel : public OpKernel {
 public:
  SoftmaxKernel(const KernelInit& init, Status*) : op_(init.op) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    Rows r;
    if (!AsRows(ctx, in, op_, &r)) return;
    Tensor& out = ctx->allocate_output(0, in.dtype(), in.shape());
    if (r.cols == 0) return;  // rows of no elements: nothing to normalise (and no max to take)
    SplitRows(ctx, r.rows, r.cols, [&](int64_t b, int64_t e) {
      auto x = RowsOf<T>(in, r, b, e);
      auto y = MutableRowsOf<T>(out, r, b, e);
      ColVec<T> mx = x.rowwise().maxCoeff();
      y = x.colwise() - mx;
      if (kLog) {
        ColVec<T> lse = y.exp().rowwise().sum().log();
        y.colwise() -= lse;
      } else {
        y = y.exp();
        ColVec<T> s = y.rowwise().sum();
        y.colwise() /= s;
      }
    });
  }

 private:
  std::string op_;
};

// SoftmaxGrad(y, dy) = (dy - sum(dy*y)) * y; LogSoftmaxGrad(y, dy) = dy - exp(y) * sum(dy).
template <typename T, bool kLog>
class SoftmaxGradKernel : public OpKernel {
 public:
  SoftmaxGradKernel(const KernelInit& init, Status*) : op_(init.op) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& yt = ctx->input(0);
    const Tensor& dyt = ctx->input(1);
    Rows r;
    if (!AsRows(ctx, yt, op_, &r)) return;
    if (yt.shape() != dyt.shape()) {
      ctx->SetStatus(InvalidArgument(op_ + " inputs must have the same shape, got " +
                                     ShapeString(yt.shape()) + " and " + ShapeString(dyt.shape())));
      return;
    }
    Tensor& out = ctx->allocate_output(0, yt.dtype(), yt.shape());
    SplitRows(ctx, r.rows, r.cols, [&](int64_t b, int64_t e) {
      auto y = RowsOf<T>(yt, r, b, e);
      auto dy = RowsOf<T>(dyt, r, b, e);
      auto dx = MutableRowsOf<T>(out, r, b, e);
      if (kLog) {
        ColVec<T> s = dy.rowwise().sum();
        dx = dy - y.exp().colwise() * s;
      } else {
        ColVec<T> s = (dy * y).rowwise().sum();
        dx = (dy.colwise() - s) * y;
      }
    });
  }

 private:
  std::string op_;
};

// ---- losses ----------------------------------------------------------------

// Checks logits [batch, classes]; InvalidArgument otherwise.
bool CheckLogits(OpKernelContext* ctx, const Tensor& logits, const std::string& op) {
  if (logits.rank() != 2) {
    ctx->SetStatus(InvalidArgument(op + ": logits must be [batch, classes], got " +
                                   ShapeString(logits.shape())));
    return false;
  }
  return true;
}

template <typename T>
class SoftmaxXentKernel : public OpKernel {
 public:
  SoftmaxXentKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& lt = ctx->input(0);
    const Tensor& yt = ctx->input(1);
    if (!CheckLogits(ctx, lt, "SoftmaxCrossEntropyWithLogits")) return;
    if (lt.shape() != yt.shape()) {
      ctx->SetStatus(InvalidArgument(
          "SoftmaxCrossEntropyWithLogits: logits and labels must have the same shape, got " +
          ShapeString(lt.shape()) + " and " + ShapeString(yt.shape())));
      return;
    }
    const Rows r{lt.dim(0), lt.dim(1)};
    Tensor& loss = ctx->allocate_output(0, lt.dtype(), {r.rows});
    Tensor& back = ctx->allocate_output(1, lt.dtype(), lt.shape());
    // No classes: each loss is a sum over nothing.
    if (r.cols == 0) loss.flat<T>().setZero();
    SplitRows(ctx, r.rows, r.cols, [&](int64_t b, int64_t e) {
      auto x = RowsOf<T>(lt, r, b, e);
      auto p = RowsOf<T>(yt, r, b, e);
      auto bp = MutableRowsOf<T>(back, r, b, e);
      Eigen::Map<ColVec<T>> l(loss.data<T>() + b, e - b);
      ColVec<T> mx = x.rowwise().maxCoeff();
      // sum(p * (log(s) - z)) with z = x - max per row: adding the max back
      // (lse = log(s) + max) loses log(s) to rounding once the logits are
      // large (relative error 8.5e-3 at 1e6 in float32; 3e-8 this way).
      bp = x.colwise() - mx;
      ColVec<T> pz = (p * bp).rowwise().sum();
      bp = bp.exp();
      ColVec<T> s = bp.rowwise().sum();
      l = p.rowwise().sum() * s.log() - pz;
      bp.colwise() /= s;
      bp -= p;
    });
  }
};

template <typename T, typename L>
class SparseSoftmaxXentKernel : public OpKernel {
 public:
  SparseSoftmaxXentKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& lt = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    const char* op = "SparseSoftmaxCrossEntropyWithLogits";
    if (!CheckLogits(ctx, lt, op)) return;
    if (labels.rank() != 1 || labels.dim(0) != lt.dim(0)) {
      ctx->SetStatus(InvalidArgument(std::string(op) + ": labels must be [batch] for logits " +
                                     ShapeString(lt.shape()) + ", got " +
                                     ShapeString(labels.shape())));
      return;
    }
    const Rows r{lt.dim(0), lt.dim(1)};
    const L* lab = labels.data<L>();
    for (int64_t i = 0; i < r.rows; ++i) {
      if (lab[i] < 0 || lab[i] >= r.cols) {
        ctx->SetStatus(InvalidArgument(std::string(op) + ": label " + std::to_string(lab[i]) +
                                       " at position " + std::to_string(i) +
                                       " is outside the valid range [0, " +
                                       std::to_string(r.cols) + ")"));
        return;
      }
    }
    Tensor& loss = ctx->allocate_output(0, lt.dtype(), {r.rows});
    Tensor& back = ctx->allocate_output(1, lt.dtype(), lt.shape());
    SplitRows(ctx, r.rows, r.cols, [&](int64_t b, int64_t e) {
      auto x = RowsOf<T>(lt, r, b, e);
      auto bp = MutableRowsOf<T>(back, r, b, e);
      ColVec<T> mx = x.rowwise().maxCoeff();
      bp = (x.colwise() - mx).exp();
      ColVec<T> s = bp.rowwise().sum();
      bp.colwise() /= s;
      T* l = loss.data<T>();
      for (int64_t i = b; i < e; ++i) {
        const int64_t k = static_cast<int64_t>(lab[i]);
        // log(s) - (x_k - max): the max never added back (see the dense op).
        l[i] = std::log(s(i - b)) - (x(i - b, k) - mx(i - b));
        bp(i - b, k) -= T(1);
      }
    });
  }
};

template <typename T>
class L2LossKernel : public OpKernel {
 public:
  L2LossKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    Tensor& out = ctx->allocate_output(0, in.dtype(), {});
    const T* x = in.data<T>();
    auto squares = [&](int64_t k, int64_t count) { return Eigen::Map<const ColVec<T>>(x + k, count).square().sum(); };
    // float32: blocked, the blocks added in double, as Sum (20x less error over 1e6 values).
    if constexpr (std::is_same_v<T, float>) out.data<T>()[0] = static_cast<T>(cwise::BlockedSum(in.num_elements(), squares) / 2);
    else out.data<T>()[0] = squares(0, in.num_elements()) / T(2);
  }
};

// ---- bias ------------------------------------------------------------------

template <typename T>
class BiasAddKernel : public OpKernel {
 public:
  BiasAddKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& xt = ctx->input(0);
    const Tensor& bt = ctx->input(1);
    if (xt.rank() < 1 || bt.rank() != 1 || bt.dim(0) != xt.dim(xt.rank() - 1)) {
      ctx->SetStatus(InvalidArgument(
          "BiasAdd bias must be a vector matching the last dimension of the input: input " +
          ShapeString(xt.shape()) + ", bias " + ShapeString(bt.shape())));
      return;
    }
    Rows r;
    AsRows(ctx, xt, "BiasAdd", &r);
    Tensor& out = ctx->allocate_output(0, xt.dtype(), xt.shape());
    Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>> bias(bt.data<T>(), r.cols);
    using Row = Eigen::Array<T, 1, Eigen::Dynamic>;
    const T* x = xt.data<T>();
    T* y = out.data<T>();
    // Row by row: each is one contiguous vectorised add.
    SplitRows(ctx, r.rows, r.cols, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        Eigen::Map<Row>(y + i * r.cols, r.cols) = Eigen::Map<const Row>(x + i * r.cols, r.cols) + bias;
    });
  }
};

template <typename T>
class BiasAddGradKernel : public OpKernel {
 public:
  BiasAddGradKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    Rows r;
    if (!AsRows(ctx, dy, "BiasAddGrad", &r)) return;
    Tensor& out = ctx->allocate_output(0, dy.dtype(), {r.cols});
    Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>> db(out.data<T>(), r.cols);
    db.setZero();
    std::mutex mu;
    SplitRows(ctx, r.rows, r.cols, [&](int64_t b, int64_t e) {
      Eigen::Array<T, 1, Eigen::Dynamic> part = RowsOf<T>(dy, r, b, e).colwise().sum();
      std::lock_guard<std::mutex> l(mu);
      db += part;
    });
  }
};

// ---- dropout ---------------------------------------------------------------

uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A well-mixed 32-bit hash of i under a key (murmur3's finaliser).
inline int64_t Hash32(uint64_t key, uint32_t i) {
  uint32_t h = i * 0x9E3779B9u + static_cast<uint32_t>(key ^ (key >> 32));
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

// Each Compute draws the next mask of a sequence fixed by the seed: element i
// of call k keeps when hash(seed, k, i) >= rate, so the result does not
// depend on how the work is split. Calls are counted per node for the
// session (kernels/run_counters.h), across its sets of fetches.
template <typename T>
class DropoutKernel : public OpKernel {
 public:
  DropoutKernel(const KernelInit& init, Status* s) {
    // With a rate input (a scalar tensor, read per step) the attr is absent.
    auto rate = init.AttrOr<double>("rate", -1.0);
    auto seed = init.AttrOr<int64_t>("seed", 0);
    if (!rate.ok()) *s = rate.status();
    else if (!seed.ok()) *s = seed.status();
    else if (init.attrs->Has("rate") && !(*rate >= 0.0 && *rate < 1.0))
      *s = InvalidArgument("Dropout rate must be in [0, 1), got " + std::to_string(*rate));
    else {
      rate_ = *rate;
      seed_ = SplitMix64(*seed != 0 ? static_cast<uint64_t>(*seed) : static_cast<uint64_t>(NodeNameSeed(init.node_name)));
      calls_ = init.run_counters ? init.run_counters->For(init.node_name) : std::make_shared<std::atomic<uint64_t>>(0);
    }
  }
  bool IsStateful() const override { return true; }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    double rate = rate_;
    if (ctx->num_inputs() == 2) {
      const Tensor& r = ctx->input(1);
      if (r.num_elements() != 1 || (r.dtype() != DType::kFloat32 && r.dtype() != DType::kFloat64))
        return ctx->SetStatus(InvalidArgument("Dropout rate input must be a float scalar, got " +
                                              std::string(DTypeName(r.dtype())) + ShapeString(r.shape())));
      rate = r.dtype() == DType::kFloat32 ? double(r.data<float>()[0]) : r.data<double>()[0];
      if (!(rate >= 0.0 && rate < 1.0))
        return ctx->SetStatus(InvalidArgument("Dropout rate must be in [0, 1) (keep_prob in (0, 1]), got rate " +
                                              std::to_string(rate)));
    }
    Tensor& y = ctx->allocate_output(0, in.dtype(), in.shape());
    Tensor& mask = ctx->allocate_output(1, in.dtype(), in.shape());
    // The call is salted so that (seed, call) and (call, seed) differ: the
    // plain SplitMix64(seed) ^ SplitMix64(call) was symmetric, so seed 7's
    // call 9 repeated seed 9's call 7, and any seed's call s seed 0's call 0.
    const uint64_t key = SplitMix64(seed_ ^ SplitMix64(calls_->fetch_add(1) + 0x5851f42d4c957f2dULL));
    // Keep when a 32-bit hash of (key, i), as a fraction of 2^32, is >= rate.
    const int64_t threshold = static_cast<int64_t>(rate * 4294967296.0);
    const T scale = static_cast<T>(1.0 / (1.0 - rate));
    const T* x = in.data<T>();
    T* py = y.data<T>();
    T* pm = mask.data<T>();
    SplitRows(ctx, in.num_elements(), 1, [=](int64_t b, int64_t e) {
      // Branch-free: a random keep/drop branch mispredicts half the time.
      for (int64_t i = b; i < e; ++i) {
        const int64_t h = Hash32(key + (static_cast<uint64_t>(i) >> 32), static_cast<uint32_t>(i));
        pm[i] = scale * static_cast<T>(((h - threshold) >> 63) + 1);
      }
      for (int64_t i = b; i < e; ++i) py[i] = x[i] * pm[i];
    });
  }

 private:
  double rate_ = 0.0;
  uint64_t seed_ = 0;
  std::shared_ptr<std::atomic<uint64_t>> calls_;  // calls so far (shared by the node's kernels)
};

template <template <typename> class K>
void RegisterFloat(KernelRegistry& reg, const std::string& op) {
  RegisterCPU<K<float>>(reg, op, {DType::kFloat32});
  RegisterCPU<K<double>>(reg, op, {DType::kFloat64});
}

template <typename Op>
void RegisterUnary(KernelRegistry& reg, const std::string& op) {
  RegisterCPU<UnaryKernel<float, Op>>(reg, op, {DType::kFloat32});
  RegisterCPU<UnaryKernel<double, Op>>(reg, op, {DType::kFloat64});
}

template <typename Op>
void RegisterBinaryGrad(KernelRegistry& reg, const std::string& op) {
  RegisterCPU<BinaryGradKernel<float, Op>>(reg, op, {DType::kFloat32});
  RegisterCPU<BinaryGradKernel<double, Op>>(reg, op, {DType::kFloat64});
}

template <typename Fn>
void RegisterSelectGrad(KernelRegistry& reg, const std::string& op) {
  RegisterCPU<SelectGradKernel<float, Fn>>(reg, op, {DType::kFloat32});
  RegisterCPU<SelectGradKernel<double, Fn>>(reg, op, {DType::kFloat64});
}

// Sparse xent kernels are keyed by the logits dtype; the labels dtype is
// dispatched inside.
template <typename T>
class SparseXentDispatch : public OpKernel {
 public:
  SparseXentDispatch(const KernelInit& init, Status* s) {
    const DType lt = init.input_dtypes.size() > 1 ? init.input_dtypes[1] : DType::kInvalid;
    if (lt == DType::kInt32) impl_ = std::make_unique<SparseSoftmaxXentKernel<T, int32_t>>(init, s);
    else if (lt == DType::kInt64) impl_ = std::make_unique<SparseSoftmaxXentKernel<T, int64_t>>(init, s);
    else *s = InvalidArgument(std::string("SparseSoftmaxCrossEntropyWithLogits labels must be int32 "
                                          "or int64, not ") + DTypeName(lt));
  }
  void Compute(OpKernelContext* ctx) override { impl_->Compute(ctx); }

 private:
  std::unique_ptr<OpKernel> impl_;
};

template <typename T> using SoftmaxK = SoftmaxKernel<T, false>;
template <typename T> using LogSoftmaxK = SoftmaxKernel<T, true>;
template <typename T> using SoftmaxGradK = SoftmaxGradKernel<T, false>;
template <typename T> using LogSoftmaxGradK = SoftmaxGradKernel<T, true>;

}  // namespace

void RegisterNNKernels(KernelRegistry& reg) {
  RegisterUnary<ReluOp>(reg, "Relu");
  RegisterUnary<SigmoidOp>(reg, "Sigmoid");
  RegisterUnary<TanhOp>(reg, "Tanh");
  RegisterUnary<SoftplusOp>(reg, "Softplus");
  RegisterUnary<EluOp>(reg, "Elu");
  RegisterFloat<LeakyReluKernel>(reg, "LeakyRelu");
  RegisterSelectGrad<ReluGradFn>(reg, "ReluGrad");
  RegisterBinaryGrad<SigmoidGradOp>(reg, "SigmoidGrad");
  RegisterBinaryGrad<TanhGradOp>(reg, "TanhGrad");
  RegisterBinaryGrad<SoftplusGradOp>(reg, "SoftplusGrad");
  RegisterSelectGrad<EluGradFn>(reg, "EluGrad");
  RegisterFloat<SoftmaxK>(reg, "Softmax");
  RegisterFloat<LogSoftmaxK>(reg, "LogSoftmax");
  RegisterFloat<SoftmaxGradK>(reg, "SoftmaxGrad");
  RegisterFloat<LogSoftmaxGradK>(reg, "LogSoftmaxGrad");
  RegisterFloat<SoftmaxXentKernel>(reg, "SoftmaxCrossEntropyWithLogits");
  RegisterFloat<SparseXentDispatch>(reg, "SparseSoftmaxCrossEntropyWithLogits");
  RegisterFloat<L2LossKernel>(reg, "L2Loss");
  RegisterFloat<BiasAddKernel>(reg, "BiasAdd");
  RegisterFloat<BiasAddGradKernel>(reg, "BiasAddGrad");
  RegisterFloat<DropoutKernel>(reg, "Dropout");
  RegisterMatMulKernels(reg);
  RegisterConvKernels(reg);
  RegisterPoolKernels(reg);
}

}  // namespace sf
