// The oneDNN engines of dnnl_engines.h (the whole file needs oneDNN; without
// it only ParsePrecision and the null factories are built).
#include "kernels/cpu/dnnl_engines.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <new>
#include <vector>

#include "kernels/cpu/nn_gemm.h"
#include "kernels/cpu_features.h"

#ifdef SF_HAVE_DNNL
#include <omp.h>

#include <Eigen/Core>
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace sf {
namespace nn {

Status ParsePrecision(const KernelInit& init, Precision* out, bool* always) {
  SF_ASSIGN_OR_RETURN(std::string p, init.AttrOr<std::string>("precision", "fp32"));
  if (always) *always = p == "bf16_always";
  if (p == "fp32") {
    *out = Precision::kFp32;
    return Status::OK();
  }
  if (p != "bf16" && p != "bf16_always")
    return InvalidArgument("attr precision must be \"fp32\", \"bf16\" or \"bf16_always\", got \"" + p + "\"");
  SF_RETURN_IF_ERROR(Bf16Supported());
  *out = Precision::kBf16;
  return Status::OK();
}

#ifndef SF_HAVE_DNNL

std::unique_ptr<ConvEngine> NewDnnlConvEngine(Precision) { return nullptr; }
std::unique_ptr<MatMulEngine> NewDnnlBf16MatMulEngine() { return nullptr; }
std::unique_ptr<MaxPoolGradEngine> NewDnnlMaxPoolGradEngine() { return nullptr; }
bool DnnlSgemmBlock(const float*, const float*, float*, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t,
                    int64_t, int64_t, bool) {
  return false;
}

#else

namespace {

using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// Every thread that touches oneDNN runs its primitives on itself alone: the
// compute pool provides the parallelism (see the header).
void PinOpenMpToThisThread() {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
}

// What a failed primitive (dnnl::error) or allocation (std::bad_alloc)
// becomes: ResourceExhausted for memory, else Internal, prefixed with `what`.
Status LibraryError(const std::string& what, const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e)) return ResourceExhausted(what + ": out of memory");
  return Internal(what + ": " + e.what());
}

// An uninitialised buffer of `bytes`, 64-byte aligned (what oneDNN likes).
struct Scratch {
  explicit Scratch(size_t bytes) : p(bytes ? static_cast<char*>(::operator new[](bytes, std::align_val_t(64))) : nullptr) {}
  ~Scratch() {
    if (p) ::operator delete[](p, std::align_val_t(64));
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  char* p;
};

// The plan under `key`, made by make() on first use; guarded by its own mutex
// (kernels run concurrently), built outside it.
template <typename Plan>
class PlanCache {
 public:
  template <typename Make>
  const Plan& Get(const std::vector<int64_t>& key, Make make) {
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& e : cache_)
        if (e.first == key) return *e.second;
    }
    auto p = std::make_unique<Plan>(make());
    std::lock_guard<std::mutex> l(mu_);
    for (auto& e : cache_)
      if (e.first == key) return *e.second;  // another thread made it first
    cache_.emplace_back(key, std::move(p));
    return *cache_.back().second;
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<std::vector<int64_t>, std::unique_ptr<Plan>>> cache_;  // guarded by mu_
};

dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// fp32 -> bf16 (round to nearest even) through oneDNN's reorders (vectorised;
// Eigen's cast to bfloat16 is scalar and cost a third of a bf16 MLP step).
class Bf16Converter {
 public:
  explicit Bf16Converter(const dnnl::engine& eng) : eng_(eng) {}
  // dst (rows x cols, row-major bf16) = op(src) for an fp32 src stored
  // [rows, cols], or [cols, rows] when transposed; big ones split their rows
  // over the pool (may be null). Throws dnnl::error or std::bad_alloc.
  void Run(ComputePool* pool, const float* src, void* dst, int64_t rows, int64_t cols, bool transposed) {
    const int64_t threads = pool ? pool->num_threads() : 1;
    if (threads <= 1 || rows < 2 || rows * cols < (int64_t{1} << 18)) {
      Block(src, dst, rows, cols, transposed, rows);
      return;
    }
    // A block's exception is rethrown on the caller's thread (never out of a pool thread).
    std::mutex mu;
    std::exception_ptr error;
    pool->ParallelFor(rows, (rows + threads - 1) / threads, [&](int64_t r0, int64_t r1) {
      try {
        PinOpenMpToThisThread();
        // Row r of op(src) starts at r * cols, or at column r when transposed.
        Block(src + (transposed ? r0 : r0 * cols), static_cast<char*>(dst) + r0 * cols * 2, r1 - r0, cols,
              transposed, rows);
      } catch (...) {
        std::lock_guard<std::mutex> l(mu);
        if (!error) error = std::current_exception();
      }
    });
    if (error) std::rethrow_exception(error);
  }

 private:
  // One block of rows; ld is the row count of the whole transposed operand.
  void Block(const float* src, void* dst, int64_t rows, int64_t cols, bool transposed, int64_t ld) {
    const Reorder& r = cache_.Get({rows, cols, transposed, transposed ? ld : 0}, [&] {
      memory::desc from({rows, cols}, dt::f32, transposed ? memory::dims{1, ld} : memory::dims{cols, 1});
      memory::desc to({rows, cols}, dt::bf16, tag::ab);
      dnnl::reorder::primitive_desc pd(eng_, from, eng_, to, UserScratchpad());
      return Reorder{dnnl::reorder(pd), from, to, pd.scratchpad_desc()};
    });
    Scratch scratch(r.scratch.get_size());
    dnnl::stream strm(eng_);
    r.prim.execute(strm, {{DNNL_ARG_FROM, memory(r.from, eng_, const_cast<float*>(src))},
                          {DNNL_ARG_TO, memory(r.to, eng_, dst)},
                          {DNNL_ARG_SCRATCHPAD, memory(r.scratch, eng_, scratch.p)}});
    strm.wait();
  }

  struct Reorder {
    dnnl::reorder prim;
    memory::desc from, to, scratch;
  };
  dnnl::engine eng_;
  PlanCache<Reorder> cache_;
};

// Runs fn(b0, b1) over [0, n) in one block per pool thread (at most n).
template <typename F>
void SplitBlocks(ComputePool* pool, int64_t n, F fn) {
  const int64_t threads = pool ? pool->num_threads() : 1;
  if (threads <= 1 || n <= 1) {
    fn(0, n);
    return;
  }
  const int64_t per = (n + threads - 1) / threads;
  pool->ParallelFor(n, per, [&](int64_t b0, int64_t b1) { fn(b0, b1); });
}

std::string WindowString(const Window& w, int64_t oc) {
  return "input [" + std::to_string(w.n) + "," + std::to_string(w.h) + "," + std::to_string(w.w) + "," +
         std::to_string(w.c) + "], filter [" + std::to_string(w.kh) + "," + std::to_string(w.kw) + "," +
         std::to_string(w.c) + "," + std::to_string(oc) + "], strides " + std::to_string(w.sh) + "," +
         std::to_string(w.sw);
}

enum class Pass { kForward, kBackwardInput, kBackwardFilter };

// One cached convolution of a given sub-batch: its primitive, and the
// reorders between the graph's HWIO fp32 filter and the layout it chose.
struct ConvPlan {
  int64_t n = 0;  // images per block
  dnnl::primitive prim;
  memory::desc src, wei, dst, scratch;  // src/dst: the NHWC activations (diff_* for the gradients)
  memory::desc bias;                    // a fused forward's [oc] fp32 bias (empty: none)
  memory::desc user_wei;                // HWIO fp32
  bool reorder_wei = false;
  dnnl::reorder wei_reorder;  // user -> prim (forward, backward input) or prim -> user (filter)
};

class DnnlConv : public ConvEngine {
 public:
  explicit DnnlConv(Precision p) : eng_(dnnl::engine::kind::cpu, 0), prec_(p), to_bf16_(eng_) {}

  Status Forward(ComputePool* pool, const Window& w, int64_t oc, const float* in, const float* f,
                 const ConvEpilogue& ep, float* out) override {
    return Run(Pass::kForward, pool, w, oc, in, f, out, ep);
  }
  Status BackwardInput(ComputePool* pool, const Window& w, int64_t oc, const float* f, const float* dy,
                       float* dx) override {
    return Run(Pass::kBackwardInput, pool, w, oc, dy, f, dx, {});
  }
  Status BackwardFilter(ComputePool* pool, const Window& w, int64_t oc, const float* in,
                        const float* dy, float* df) override {
    return Run(Pass::kBackwardFilter, pool, w, oc, in, dy, df, {});
  }

 private:
  // For kForward: a = input, b = filter, out = output; kBackwardInput: a = dy,
  // b = filter, out = dx; kBackwardFilter: a = input, b = dy, out = df.
  Status Run(Pass pass, ComputePool* pool, const Window& w, int64_t oc, const float* a, const float* b,
             float* out, const ConvEpilogue& ep) {
    try {
      PinOpenMpToThisThread();
      const int64_t img_in = w.h * w.w * w.c, img_out = w.oh * w.ow * oc, fsize = w.kh * w.kw * w.c * oc;
      // Partial filter gradients of the blocks after the first (which writes df itself).
      std::vector<std::unique_ptr<Scratch>> partial;
      std::mutex mu;  // guards partial and err
      Status err;
      SplitBlocks(pool, w.n, [&](int64_t b0, int64_t b1) {
        try {
          PinOpenMpToThisThread();
          const ConvPlan& plan = PlanFor(pass, w, oc, b1 - b0, ep);
          float* target = out;
          if (pass == Pass::kBackwardFilter && b0 != 0) {
            auto buf = std::make_unique<Scratch>(fsize * sizeof(float));
            target = reinterpret_cast<float*>(buf->p);
            std::lock_guard<std::mutex> l(mu);
            partial.push_back(std::move(buf));
          }
          RunBlock(pass, plan, w, oc, b0, b1, img_in, img_out, a, b, ep.bias, target);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> l(mu);
          if (err.ok()) err = Failed(pass, w, oc, e);
        }
      });
      if (!err.ok()) return err;
      using Vec = Eigen::Array<float, Eigen::Dynamic, 1>;
      for (auto& p : partial)
        if (p) Eigen::Map<Vec>(out, fsize) += Eigen::Map<const Vec>(reinterpret_cast<float*>(p->p), fsize);
      return Status::OK();
    } catch (const std::exception& e) {
      return Failed(pass, w, oc, e);
    }
  }

  static Status Failed(Pass pass, const Window& w, int64_t oc, const std::exception& e) {
    static const char* names[] = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"};
    return LibraryError(std::string("oneDNN ") + names[static_cast<int>(pass)] + " failed for " +
                        WindowString(w, oc), e);
  }

  void RunBlock(Pass pass, const ConvPlan& plan, const Window& w, int64_t oc, int64_t b0, int64_t b1,
                int64_t img_in, int64_t img_out, const float* a, const float* b, const float* bias, float* out) {
    dnnl::stream strm(eng_);
    const bool bf16 = prec_ == Precision::kBf16;
    const int64_t nb = b1 - b0;
    Scratch scratch(plan.scratch.get_size());
    memory scratch_m(plan.scratch, eng_, scratch.p);
    // The activation operand(s) of this block, converted to bf16 when asked.
    auto activation = [&](const float* base, int64_t per_image, const memory::desc& md,
                          std::unique_ptr<Scratch>* keep) {
      const float* p = base + b0 * per_image;
      if (!bf16) return memory(md, eng_, const_cast<float*>(p));
      *keep = std::make_unique<Scratch>(nb * per_image * 2);
      to_bf16_.Run(nullptr, p, (*keep)->p, 1, nb * per_image, false);
      return memory(md, eng_, (*keep)->p);
    };
    std::unique_ptr<Scratch> keep_a, keep_b, keep_w;
    if (pass == Pass::kBackwardFilter) {
      memory src = activation(a, img_in, plan.src, &keep_a);
      memory ddst = activation(b, img_out, plan.dst, &keep_b);
      memory user(plan.user_wei, eng_, out);
      memory dwei = user;
      if (plan.reorder_wei) {
        keep_w = std::make_unique<Scratch>(plan.wei.get_size());
        dwei = memory(plan.wei, eng_, keep_w->p);
      }
      plan.prim.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dwei},
                               {DNNL_ARG_SCRATCHPAD, scratch_m}});
      if (plan.reorder_wei) plan.wei_reorder.execute(strm, dwei, user);
      strm.wait();
      return;
    }
    // The filter in the primitive's layout (and precision).
    memory user(plan.user_wei, eng_, const_cast<float*>(b));
    memory wei = user;
    if (plan.reorder_wei) {
      keep_w = std::make_unique<Scratch>(plan.wei.get_size());
      wei = memory(plan.wei, eng_, keep_w->p);
      plan.wei_reorder.execute(strm, user, wei);
    }
    if (pass == Pass::kForward) {
      memory src = activation(a, img_in, plan.src, &keep_a);
      memory dst(plan.dst, eng_, out + b0 * img_out);
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratch_m}};
      if (bias) args.emplace(DNNL_ARG_BIAS, memory(plan.bias, eng_, const_cast<float*>(bias)));
      plan.prim.execute(strm, args);
    } else {
      memory ddst = activation(a, img_out, plan.dst, &keep_a);
      memory dsrc(plan.src, eng_, out + b0 * img_in);
      plan.prim.execute(strm, {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, dsrc},
                               {DNNL_ARG_SCRATCHPAD, scratch_m}});
    }
    strm.wait();
  }

  // The plan of (pass, geometry, images per block), built on first use.
  const ConvPlan& PlanFor(Pass pass, const Window& w, int64_t oc, int64_t nb, const ConvEpilogue& ep) {
    const std::vector<int64_t> key = {static_cast<int64_t>(pass), nb, w.h, w.w, w.c, w.kh, w.kw, oc,
                                      w.sh, w.sw, w.pad_top, w.pad_left, ep.bias != nullptr, ep.relu};
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& e : cache_)
        if (e.first == key) return *e.second;
    }
    auto plan = Build(pass, w, oc, nb, ep);
    std::lock_guard<std::mutex> l(mu_);
    for (auto& e : cache_)
      if (e.first == key) return *e.second;  // another thread built it first
    cache_.emplace_back(key, std::move(plan));
    return *cache_.back().second;
  }

  // oneDNN 2.6's 1x1 kernels for AVX2 book too small a scratchpad for a
  // strided 1x1 convolution of nhwc data (the source copied to unit
  // stride): on an AVX2 EPYC the backward-weights one wrote past it and
  // corrupted the heap ("free(): invalid next size" in
  // tests/kernels/dnnl_engines_test.cc; a 4x larger scratchpad hid it).
  // Such a convolution takes oneDNN's next implementation.
  template <class PD>
  static void AvoidStridedAvx2OneByOne(PD& pd, const Window& w) {
    if (w.kh != 1 || w.kw != 1 || (w.sh == 1 && w.sw == 1)) return;
    while (std::string(pd.impl_info_str()).rfind("jit_1x1:avx2", 0) == 0 && pd.next_impl()) {
    }
  }

  std::unique_ptr<ConvPlan> Build(Pass pass, const Window& w, int64_t oc, int64_t nb, const ConvEpilogue& ep) {
    auto plan = std::make_unique<ConvPlan>();
    plan->n = nb;
    const dt act = prec_ == Precision::kBf16 ? dt::bf16 : dt::f32;
    const memory::dims src_d = {nb, w.c, w.h, w.w}, wei_d = {oc, w.c, w.kh, w.kw},
                       dst_d = {nb, oc, w.oh, w.ow}, strides = {w.sh, w.sw},
                       pad_l = {w.pad_top, w.pad_left},
                       pad_r = {std::max<int64_t>(0, (w.oh - 1) * w.sh + w.kh - w.h - w.pad_top),
                                std::max<int64_t>(0, (w.ow - 1) * w.sw + w.kw - w.w - w.pad_left)};
    // Inputs in bf16 when asked; what is written (dst, diff_src, diff_weights) stays fp32.
    const memory::desc src_in(src_d, act, tag::nhwc), dst_in(dst_d, act, tag::nhwc);
    const memory::desc src_out(src_d, dt::f32, tag::nhwc), dst_out(dst_d, dt::f32, tag::nhwc);
    const memory::desc wei_any(wei_d, act, tag::any), dwei_any(wei_d, dt::f32, tag::any);
    plan->user_wei = memory::desc(wei_d, dt::f32, tag::hwio);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto alg = dnnl::algorithm::convolution_direct;
    // The forward descriptor also hints the backward ones.
    dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, alg, src_in, wei_any, dst_out,
                                       strides, pad_l, pad_r);
    dnnl::convolution_forward::primitive_desc fpd(fd, attr, eng_);
    if (pass == Pass::kForward && (ep.bias || ep.relu)) {
      // The fused forward: bias in the primitive, ReLU as its post-op.
      dnnl::primitive_attr fused = attr;
      if (ep.relu) {
        dnnl::post_ops po;
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        fused.set_post_ops(po);
      }
      if (ep.bias) {
        plan->bias = memory::desc({oc}, dt::f32, tag::a);
        fd = dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src_in, wei_any, plan->bias,
                                             dst_out, strides, pad_l, pad_r);
      }
      fpd = dnnl::convolution_forward::primitive_desc(fd, fused, eng_);
    }
    AvoidStridedAvx2OneByOne(fpd, w);
    if (pass == Pass::kForward) {
      plan->prim = dnnl::convolution_forward(fpd);
      plan->src = fpd.src_desc();
      plan->wei = fpd.weights_desc();
      plan->dst = fpd.dst_desc();
      plan->scratch = fpd.scratchpad_desc();
    } else if (pass == Pass::kBackwardInput) {
      dnnl::convolution_backward_data::desc bd(alg, src_out, wei_any, dst_in, strides, pad_l, pad_r);
      dnnl::convolution_backward_data::primitive_desc bpd(bd, attr, eng_, fpd);
      AvoidStridedAvx2OneByOne(bpd, w);
      plan->prim = dnnl::convolution_backward_data(bpd);
      plan->src = bpd.diff_src_desc();
      plan->wei = bpd.weights_desc();
      plan->dst = bpd.diff_dst_desc();
      plan->scratch = bpd.scratchpad_desc();
    } else {
      dnnl::convolution_backward_weights::desc bd(alg, src_in, dwei_any, dst_in, strides, pad_l, pad_r);
      dnnl::convolution_backward_weights::primitive_desc bpd(bd, attr, eng_, fpd);
      AvoidStridedAvx2OneByOne(bpd, w);
      plan->prim = dnnl::convolution_backward_weights(bpd);
      plan->src = bpd.src_desc();
      plan->wei = bpd.diff_weights_desc();
      plan->dst = bpd.diff_dst_desc();
      plan->scratch = bpd.scratchpad_desc();
    }
    plan->reorder_wei = plan->wei != plan->user_wei;
    if (plan->reorder_wei) {
      if (pass == Pass::kBackwardFilter)
        plan->wei_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(eng_, plan->wei, eng_, plan->user_wei));
      else
        plan->wei_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(eng_, plan->user_wei, eng_, plan->wei));
    }
    return plan;
  }

  dnnl::engine eng_;
  Precision prec_;
  Bf16Converter to_bf16_;
  std::mutex mu_;
  std::vector<std::pair<std::vector<int64_t>, std::unique_ptr<ConvPlan>>> cache_;  // guarded by mu_
};

// A cached block product.
struct MatMulPlan {
  dnnl::matmul prim;
  memory::desc src, dst, scratch;
};

// op(A) and op(B) are converted to row-major bf16 first (a transposed operand
// is transposed by the conversion): oneDNN's fast bf16 matmul (brgemm) takes
// only dense row-major blocks; strided or transposed ones fall to a slower
// gemm. C's rows are then split over the pool, each block dense too.
class DnnlBf16MatMul : public MatMulEngine {
 public:
  DnnlBf16MatMul() : eng_(dnnl::engine::kind::cpu, 0), to_bf16_(eng_) {}

  Status Run(ComputePool* pool, const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
             bool ta, bool tb) override {
    try {
      if (m == 0 || n == 0) return Status::OK();
      if (k == 0) {
        std::fill(c, c + m * n, 0.0f);
        return Status::OK();
      }
      PinOpenMpToThisThread();
      Scratch a16(m * k * 2), b16(k * n * 2);
      std::mutex mu;
      Status err;
      auto guarded = [&](auto fn) {
        try {
          PinOpenMpToThisThread();
          fn();
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> l(mu);
          if (err.ok()) err = Failed(m, n, k, ta, tb, e);
        }
      };
      // B is converted as it lies (a transposed one is read as 'ba').
      guarded([&] {
        to_bf16_.Run(pool, a, a16.p, m, k, ta);
        to_bf16_.Run(pool, b, b16.p, tb ? n : k, tb ? k : n, false);
      });
      if (!err.ok()) return err;
      // At least 16 rows per block keep the blocks efficient.
      const int64_t threads = pool ? std::max(1, pool->num_threads()) : 1;
      const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, m / 16));
      auto block = [&](int64_t r0, int64_t r1) {
        guarded([&] {
          const MatMulPlan& p = plans_.Get({r1 - r0, n, k, tb}, [&] {
            memory::desc sa({r1 - r0, k}, dt::bf16, tag::ab), sb({k, n}, dt::bf16, tb ? tag::ba : tag::ab),
                sc({r1 - r0, n}, dt::f32, tag::ab);
            dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(sa, sb, sc), UserScratchpad(), eng_);
            return MatMulPlan{dnnl::matmul(pd), sa, sc, pd.scratchpad_desc()};
          });
          Scratch scratch(p.scratch.get_size());
          dnnl::stream strm(eng_);
          const memory::desc sb({k, n}, dt::bf16, tb ? tag::ba : tag::ab);
          p.prim.execute(strm, {{DNNL_ARG_SRC, memory(p.src, eng_, a16.p + r0 * k * 2)},
                                {DNNL_ARG_WEIGHTS, memory(sb, eng_, b16.p)},
                                {DNNL_ARG_DST, memory(p.dst, eng_, c + r0 * n)},
                                {DNNL_ARG_SCRATCHPAD, memory(p.scratch, eng_, scratch.p)}});
          strm.wait();
        });
      };
      if (blocks <= 1) block(0, m);
      else pool->ParallelFor(m, (m + blocks - 1) / blocks, block);
      return err;
    } catch (const std::exception& e) {
      return Failed(m, n, k, ta, tb, e);
    }
  }

 private:
  static Status Failed(int64_t m, int64_t n, int64_t k, bool ta, bool tb, const std::exception& e) {
    return LibraryError("oneDNN bf16 MatMul failed for m=" + std::to_string(m) + " n=" + std::to_string(n) +
                            " k=" + std::to_string(k) + (ta ? " (a transposed)" : "") + (tb ? " (b transposed)" : ""),
                        e);
  }

  dnnl::engine eng_;
  Bf16Converter to_bf16_;
  PlanCache<MatMulPlan> plans_;
};

// One cached max pooling of a given sub-batch: the forward (for the
// workspace of argmax positions) and the backward that reads it.
struct PoolPlan {
  dnnl::pooling_forward fwd;
  dnnl::pooling_backward bwd;
  memory::desc src, dst, ws, fwd_scratch, bwd_scratch;
};

class DnnlMaxPoolGrad : public MaxPoolGradEngine {
 public:
  DnnlMaxPoolGrad() : eng_(dnnl::engine::kind::cpu, 0) {}

  Status Run(ComputePool* pool, const Window& w, const float* x, const float* dy, float* dx) override {
    try {
      PinOpenMpToThisThread();
      const int64_t img_in = w.h * w.w * w.c, img_out = w.oh * w.ow * w.c;
      std::mutex mu;
      Status err;
      SplitBlocks(pool, w.n, [&](int64_t b0, int64_t b1) {
        try {
          PinOpenMpToThisThread();
          const PoolPlan& p = PlanFor(w, b1 - b0);
          Scratch y(p.dst.get_size()), ws(p.ws.get_size());
          Scratch s1(p.fwd_scratch.get_size()), s2(p.bwd_scratch.get_size());
          dnnl::stream strm(eng_);
          memory ws_m(p.ws, eng_, ws.p);
          p.fwd.execute(strm, {{DNNL_ARG_SRC, memory(p.src, eng_, const_cast<float*>(x + b0 * img_in))},
                               {DNNL_ARG_DST, memory(p.dst, eng_, y.p)},
                               {DNNL_ARG_WORKSPACE, ws_m},
                               {DNNL_ARG_SCRATCHPAD, memory(p.fwd_scratch, eng_, s1.p)}});
          p.bwd.execute(strm, {{DNNL_ARG_DIFF_DST, memory(p.dst, eng_, const_cast<float*>(dy + b0 * img_out))},
                               {DNNL_ARG_DIFF_SRC, memory(p.src, eng_, dx + b0 * img_in)},
                               {DNNL_ARG_WORKSPACE, ws_m},
                               {DNNL_ARG_SCRATCHPAD, memory(p.bwd_scratch, eng_, s2.p)}});
          strm.wait();
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> l(mu);
          if (err.ok()) err = Failed(w, e);
        }
      });
      return err;
    } catch (const std::exception& e) {
      return Failed(w, e);
    }
  }

 private:
  static Status Failed(const Window& w, const std::exception& e) {
    return LibraryError("oneDNN MaxPoolGrad failed for input [" + std::to_string(w.n) + "," + std::to_string(w.h) +
                            "," + std::to_string(w.w) + "," + std::to_string(w.c) + "], window " +
                            std::to_string(w.kh) + "x" + std::to_string(w.kw),
                        e);
  }

  const PoolPlan& PlanFor(const Window& w, int64_t nb) {
    const std::vector<int64_t> key = {nb, w.h, w.w, w.c, w.kh, w.kw, w.sh, w.sw, w.pad_top, w.pad_left};
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& e : cache_)
        if (e.first == key) return *e.second;
    }
    auto p = std::make_unique<PoolPlan>();
    const memory::dims strides = {w.sh, w.sw}, kernel = {w.kh, w.kw}, pad_l = {w.pad_top, w.pad_left},
                       pad_r = {std::max<int64_t>(0, (w.oh - 1) * w.sh + w.kh - w.h - w.pad_top),
                                std::max<int64_t>(0, (w.ow - 1) * w.sw + w.kw - w.w - w.pad_left)};
    p->src = memory::desc({nb, w.c, w.h, w.w}, dt::f32, tag::nhwc);
    p->dst = memory::desc({nb, w.c, w.oh, w.ow}, dt::f32, tag::nhwc);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::pooling_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max, p->src,
                                   p->dst, strides, kernel, pad_l, pad_r);
    dnnl::pooling_forward::primitive_desc fpd(fd, attr, eng_);
    dnnl::pooling_backward::desc bd(dnnl::algorithm::pooling_max, p->src, p->dst, strides, kernel, pad_l, pad_r);
    dnnl::pooling_backward::primitive_desc bpd(bd, attr, eng_, fpd);
    p->fwd = dnnl::pooling_forward(fpd);
    p->bwd = dnnl::pooling_backward(bpd);
    p->ws = fpd.workspace_desc();
    p->fwd_scratch = fpd.scratchpad_desc();
    p->bwd_scratch = bpd.scratchpad_desc();
    std::lock_guard<std::mutex> l(mu_);
    for (auto& e : cache_)
      if (e.first == key) return *e.second;
    cache_.emplace_back(key, std::move(p));
    return *cache_.back().second;
  }

  dnnl::engine eng_;
  std::mutex mu_;
  std::vector<std::pair<std::vector<int64_t>, std::unique_ptr<PoolPlan>>> cache_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<MaxPoolGradEngine> NewDnnlMaxPoolGradEngine() { return std::make_unique<DnnlMaxPoolGrad>(); }

std::unique_ptr<ConvEngine> NewDnnlConvEngine(Precision precision) {
  return std::make_unique<DnnlConv>(precision);
}

std::unique_ptr<MatMulEngine> NewDnnlBf16MatMulEngine() { return std::make_unique<DnnlBf16MatMul>(); }

bool DnnlSgemmBlock(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                    int64_t r0, int64_t r1, int64_t c0, int64_t c1, bool accumulate) {
  PinOpenMpToThisThread();
  // Row-major blocks by pointer and leading dimension: rows r0.. of op(A)
  // are rows of A, or columns of A stored [k, m]; columns c0.. of op(B)
  // likewise.
  const float* ab = ta ? a + r0 : a + r0 * k;
  const float* bb = tb ? b + c0 * k : b + c0;
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', r1 - r0, c1 - c0, k, 1.0f, ab, ta ? m : k, bb,
                                      tb ? k : n, accumulate ? 1.0f : 0.0f, c + r0 * n + c0, n);
  return st == dnnl_success;
}

#endif  // SF_HAVE_DNNL

}  // namespace nn
}  // namespace sf
