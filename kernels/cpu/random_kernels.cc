// Kernels of the random ops and the candidate samplers.
//
// The output of a node's k-th run is a pure function of (seed, k, shape,
// distribution): the kernel keeps only a run counter, the session's for the
// node (kernels/run_counters.h) when it has one, so a new set of fetches
// continues the node's sequence instead of restarting it. The
// output is cut into fixed blocks of kBlock elements, each drawn from its own
// std::mt19937_64 seeded with a hash of (seed, k, block index), so blocks can
// be filled in parallel and the values never depend on the thread count.
// mt19937_64 and the transforms below (53-bit uniforms, Box-Muller) are
// written out rather than taken from <random> distributions, whose results
// differ between standard libraries.
#include <cmath>
#include <atomic>
#include <memory>
#include <random>
#include <unordered_set>

#include "kernels/compute_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/run_counters.h"

namespace sf {
namespace {

constexpr int64_t kBlock = 16384;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from the top 53 bits.
inline double Uniform01(std::mt19937_64& e) { return static_cast<double>(e() >> 11) * 0x1.0p-53; }
// A uniform double in (0, 1]: safe for log().
inline double UniformOpen0(std::mt19937_64& e) {
  return static_cast<double>((e() >> 11) + 1) * 0x1.0p-53;
}

enum class Dist { kUniform, kNormal, kTruncatedNormal };

template <typename T>
class RandomKernel : public OpKernel {
 public:
  RandomKernel(const KernelInit& init, Status* s) {
    dist_ = init.op == "RandomUniform" ? Dist::kUniform
            : init.op == "RandomNormal" ? Dist::kNormal
                                        : Dist::kTruncatedNormal;
    auto shape = init.Attr<Shape>("shape");
    auto seed = init.AttrOr<int64_t>("seed", 0);
    const bool uniform = dist_ == Dist::kUniform;
    auto a = init.Attr<double>(uniform ? "minval" : "mean");
    auto b = init.Attr<double>(uniform ? "maxval" : "stddev");
    for (const Status* st : {&shape.status(), &seed.status(), &a.status(), &b.status()}) {
      if (!st->ok()) {
        *s = *st;
        return;
      }
    }
    shape_ = *shape;
    seed_ = *seed != 0 ? static_cast<uint64_t>(*seed) : static_cast<uint64_t>(NodeNameSeed(init.node_name));
    runs_ = init.run_counters ? init.run_counters->For(init.node_name) : std::make_shared<std::atomic<uint64_t>>(0);
    a_ = *a;
    b_ = *b;
  }

  bool IsStateful() const override { return true; }

  void Compute(OpKernelContext* ctx) override {
    const uint64_t run = runs_->fetch_add(1);
    Tensor& out = ctx->allocate_output(0, DTypeOf<T>::value, shape_);
    const int64_t n = out.num_elements();
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    const uint64_t run_key = SplitMix64(SplitMix64(seed_) ^ SplitMix64(run + 0x5851f42d4c957f2dULL));
    auto fill = [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        std::mt19937_64 e(SplitMix64(run_key ^ static_cast<uint64_t>(b)));
        FillBlock(e, out.data<T>() + b * kBlock, std::min(kBlock, n - b * kBlock));
      }
    };
    if (blocks > 1 && ctx->pool()) ctx->pool()->ParallelFor(blocks, 1, fill);
    else fill(0, blocks);
  }

 private:
  void FillBlock(std::mt19937_64& e, T* out, int64_t len) const {
    if (dist_ == Dist::kUniform) {
      const T lo = static_cast<T>(a_), hi = static_cast<T>(b_);
      for (int64_t i = 0; i < len; ++i) {
        T v = static_cast<T>(a_ + (b_ - a_) * Uniform01(e));
        // Rounding to T may land on maxval; keep the interval half-open.
        if (v >= hi && hi > lo) v = std::nextafter(hi, lo);
        out[i] = v;
      }
      return;
    }
    const bool truncated = dist_ == Dist::kTruncatedNormal;
    int64_t i = 0;
    while (i < len) {
      // Box-Muller: two independent standard normals per pair of uniforms.
      const double r = std::sqrt(-2.0 * std::log(UniformOpen0(e)));
      const double t = 2.0 * M_PI * Uniform01(e);
      for (double z : {r * std::cos(t), r * std::sin(t)}) {
        if (i == len) break;
        if (truncated && std::abs(z) > 2.0) continue;
        out[i++] = static_cast<T>(a_ + b_ * z);
      }
    }
  }

  Dist dist_ = Dist::kUniform;
  Shape shape_;
  uint64_t seed_ = 0;
  double a_ = 0, b_ = 1;  // minval/maxval or mean/stddev
  std::shared_ptr<std::atomic<uint64_t>> runs_;  // runs so far (shared by the node's kernels)
};

// TensorFlow's candidate samplers (range_sampler.cc): num_sampled classes in
// [0, range_max) drawn uniformly or log-uniformly (P(c) = log((c + 2) / (c +
// 1)) / log(range_max + 1), from floor(exp(u * log(range_max + 1))) - 1), all
// distinct when unique (drawing until they are), and each class's expected
// count in the sample: num_sampled * P(c) when no draw was repeated, else the
// chance that num_tries draws hit it, -expm1(num_tries * log1p(-P(c))). A
// node's k-th run is a function of (seed, k), as the other random ops.
class CandidateSamplerKernel : public OpKernel {
 public:
  CandidateSamplerKernel(const KernelInit& init, Status* s) : log_uniform_(init.op == "LogUniformCandidateSampler") {
    auto num_true = init.Attr<int64_t>("num_true");
    auto num_sampled = init.Attr<int64_t>("num_sampled");
    auto unique = init.Attr<bool>("unique");
    auto range_max = init.Attr<int64_t>("range_max");
    auto seed = init.AttrOr<int64_t>("seed", 0);
    for (const Status* st : {&num_true.status(), &num_sampled.status(), &unique.status(), &range_max.status(),
                             &seed.status()}) {
      if (!st->ok()) {
        *s = *st;
        return;
      }
    }
    num_true_ = *num_true;
    num_sampled_ = *num_sampled;
    unique_ = *unique;
    range_max_ = *range_max;
    log_range_ = std::log1p(static_cast<double>(range_max_));
    seed_ = *seed != 0 ? static_cast<uint64_t>(*seed) : static_cast<uint64_t>(NodeNameSeed(init.node_name));
    runs_ = init.run_counters ? init.run_counters->For(init.node_name) : std::make_shared<std::atomic<uint64_t>>(0);
  }

  bool IsStateful() const override { return true; }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& true_classes = ctx->input(0);
    if (true_classes.dtype() != DType::kInt64 || true_classes.shape().size() != 2 ||
        true_classes.dim(1) != num_true_)
      return ctx->SetStatus(InvalidArgument("true_classes must be int64 [batch_size, num_true = " +
                                            std::to_string(num_true_) + "], got " +
                                            DTypeName(true_classes.dtype()) + ShapeString(true_classes.shape())));
    const int64_t* tc = true_classes.data<int64_t>();
    for (int64_t i = 0; i < true_classes.num_elements(); ++i)
      if (tc[i] < 0 || tc[i] >= range_max_)
        return ctx->SetStatus(InvalidArgument("true class " + std::to_string(tc[i]) + " is outside [0, range_max = " +
                                              std::to_string(range_max_) + ")"));
    const uint64_t run = runs_->fetch_add(1);
    std::mt19937_64 e(SplitMix64(SplitMix64(seed_) ^ SplitMix64(run + 0x5851f42d4c957f2dULL)));
    Tensor& sampled = ctx->allocate_output(0, DType::kInt64, {num_sampled_});
    int64_t* out = sampled.data<int64_t>();
    int64_t tries = 0;
    if (unique_) {
      std::unordered_set<int64_t> seen;
      for (int64_t picked = 0; picked < num_sampled_;) {
        ++tries;
        const int64_t v = Sample(e);
        if (seen.insert(v).second) out[picked++] = v;
      }
    } else {
      for (int64_t i = 0; i < num_sampled_; ++i) out[i] = Sample(e);
      tries = num_sampled_;
    }
    Tensor& true_count = ctx->allocate_output(1, DType::kFloat32, true_classes.shape());
    for (int64_t i = 0; i < true_classes.num_elements(); ++i)
      true_count.data<float>()[i] = ExpectedCount(tc[i], tries);
    Tensor& sampled_count = ctx->allocate_output(2, DType::kFloat32, {num_sampled_});
    for (int64_t i = 0; i < num_sampled_; ++i) sampled_count.data<float>()[i] = ExpectedCount(out[i], tries);
  }

 private:
  int64_t Sample(std::mt19937_64& e) const {
    if (!log_uniform_) return std::min(range_max_ - 1, static_cast<int64_t>(Uniform01(e) * range_max_));
    const int64_t v = static_cast<int64_t>(std::exp(Uniform01(e) * log_range_)) - 1;
    return std::clamp<int64_t>(v, 0, range_max_ - 1);
  }
  double Probability(int64_t c) const {
    if (!log_uniform_) return 1.0 / static_cast<double>(range_max_);
    return std::log((c + 2.0) / (c + 1.0)) / log_range_;
  }
  float ExpectedCount(int64_t c, int64_t tries) const {
    const double p = Probability(c);
    if (tries == num_sampled_) return static_cast<float>(p * num_sampled_);
    return static_cast<float>(-std::expm1(tries * std::log1p(-p)));
  }

  bool log_uniform_;
  int64_t num_true_ = 1, num_sampled_ = 1, range_max_ = 1;
  bool unique_ = true;
  double log_range_ = 0;
  uint64_t seed_ = 0;
  std::shared_ptr<std::atomic<uint64_t>> runs_;
};

}  // namespace

void RegisterRandomKernels(KernelRegistry& reg) {
  for (const char* op : {"RandomUniform", "RandomNormal", "TruncatedNormal"}) {
    RegisterCPU<RandomKernel<float>>(reg, op, {DType::kFloat32});
    RegisterCPU<RandomKernel<double>>(reg, op, {DType::kFloat64});
  }
  RegisterCPU<CandidateSamplerKernel>(reg, "LogUniformCandidateSampler", {DType::kInt64});
  RegisterCPU<CandidateSamplerKernel>(reg, "UniformCandidateSampler", {DType::kInt64});
}

}  // namespace sf
