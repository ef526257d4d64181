// Kernels of the embedding ops: the lookup turns its inputs into one
// gather (ids with their example numbers) and asks the shard to combine its
// rows; the sparse applies turn the lookup's gradient into unique local rows
// with summed gradients here, beside the shard, and send one SparseApply.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/embedding_math.h"
#include "kernels/optimizer_spec.h"
#include "kernels/embedding_shard_service.h"

namespace sf {
namespace {

Result<int64_t> ShardHandle(const Tensor& t, const std::string& table) {
  if (t.dtype() != DType::kResource || t.num_elements() != 1)
    return InvalidArgument("embedding table '" + table + "': expected a shard handle, got " +
                           t.DebugString(0));
  return t.data<int64_t>()[0];
}

class EmbeddingKernelBase : public OpKernel {
 public:
  EmbeddingKernelBase(const KernelInit& init, Status* s) : op_(init.op) {
    auto a = ParseEmbeddingOpAttrs(*init.attrs);
    if (!a.ok()) *s = a.status();
    else attrs_ = *a;
  }
  void Compute(OpKernelContext* ctx) override {
    ctx->SetStatus(Internal("embedding kernels are asynchronous"));
  }
  bool IsAsync() const override { return true; }
  bool IsStateful() const override { return true; }

 protected:
  std::string op_;
  EmbeddingOpAttrs attrs_;
};

class EmbeddingShardLookupKernel : public EmbeddingKernelBase {
 public:
  using EmbeddingKernelBase::EmbeddingKernelBase;
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    auto fail = [&](Status s) {
      ctx->SetStatus(std::move(s));
      done();
    };
    if (!ctx->embeddings()) return fail(MissingService(op_, "an embedding shard service"));
    auto id = ShardHandle(ctx->input(0), attrs_.spec.table);
    if (!id.ok()) return fail(id.status());
    EmbeddingGather q;
    Shape prefix;
    Status s = BuildEmbeddingGather(attrs_, ctx->input(1),
                                    ctx->num_inputs() > 2 ? &ctx->input(2) : nullptr, &q, &prefix);
    if (!s.ok()) return fail(s);
    ctx->embeddings()->GatherCombine(
        *id, attrs_.spec, std::move(q),
        [ctx, prefix = std::move(prefix), done = std::move(done)](Result<Tensor> r) mutable {
          if (!r.ok()) {
            ctx->SetStatus(r.status());
          } else {
            prefix.push_back(r->dim(1));
            auto out = r->Reshaped(prefix);
            if (out.ok()) ctx->set_output(0, std::move(*out));
            else ctx->SetStatus(out.status());
          }
          done();
        });
  }
};

class EmbeddingSparseApplyKernel : public EmbeddingKernelBase {
 public:
  EmbeddingSparseApplyKernel(const KernelInit& init, Status* s, OptimizerKind optimizer)
      : EmbeddingKernelBase(init, s), optimizer_(optimizer), handles_(SpecOf(optimizer).handles),
        scalars_(SpecOf(optimizer).scalars) {}
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    auto fail = [&](Status s) {
      ctx->SetStatus(std::move(s));
      done();
    };
    if (!ctx->embeddings()) return fail(MissingService(op_, "an embedding shard service"));
    SparseApplyRequest req;
    req.optimizer = optimizer_;
    for (int i = 0; i < handles_; ++i) {
      auto id = ShardHandle(ctx->input(i), attrs_.spec.table);
      if (!id.ok()) return fail(id.status());
      req.var_ids.push_back(*id);
    }
    for (int i = 0; i < scalars_; ++i) req.scalars.push_back(ctx->input(handles_ + i));
    const int first = handles_ + scalars_;
    const bool has_segments = ctx->num_inputs() == first + 3;
    EmbeddingGather q;
    Shape prefix;
    Status s = BuildEmbeddingGather(attrs_, ctx->input(first),
                                    has_segments ? &ctx->input(first + 1) : nullptr, &q, &prefix);
    if (!s.ok()) return fail(s);
    // dy has the lookup's shape; as rows per segment it is [num_segments, dim].
    const Tensor& dy = ctx->input(ctx->num_inputs() - 1);
    const int64_t dim = dy.rank() > 0 ? dy.dim(dy.rank() - 1) : 0;
    auto dy2 = dy.Reshaped({q.num_segments, dim});
    if (!dy2.ok())
      return fail(InvalidArgument("embedding table '" + attrs_.spec.table + "': gradient " +
                                  ShapeString(dy.shape()) + " does not match the lookup's " +
                                  std::to_string(q.num_segments) + " rows"));
    s = EmbeddingSparseGrad(attrs_.spec, q, *dy2, &req.indices, &req.values, ctx->pool());
    if (!s.ok()) return fail(s);
    req.indices_unique = true;  // EmbeddingSparseGrad merged duplicates
    ctx->embeddings()->SparseApply(std::move(req), [ctx, done = std::move(done)](Status st) {
      ctx->SetStatus(std::move(st));
      done();
    });
  }

 private:
  OptimizerKind optimizer_;
  int handles_, scalars_;
};

KernelFactory SparseApplyFactory(OptimizerKind optimizer) {
  return [=](const KernelInit& init) -> Result<std::unique_ptr<OpKernel>> {
    Status s;
    auto k = std::make_unique<EmbeddingSparseApplyKernel>(init, &s, optimizer);
    if (!s.ok()) return s;
    return std::unique_ptr<OpKernel>(std::move(k));
  };
}

void Reg(KernelRegistry& reg, const std::string& op, KernelFactory f) {
  if (!reg.Register(op, DeviceType::kCPU, DType::kInvalid, std::move(f)).ok()) std::abort();
}

}  // namespace

void RegisterEmbeddingKernels(KernelRegistry& reg) {
  Reg(reg, "EmbeddingShardLookup", MakeFactory<EmbeddingShardLookupKernel>());
  for (const OptimizerSpec& spec : kOptimizers)
    if (spec.sparse_op) Reg(reg, spec.sparse_op, SparseApplyFactory(spec.kind));
}

}  // namespace sf
