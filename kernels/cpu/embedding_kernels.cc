// Kernels of the embedding ops: the lookup turns its inputs into one
// gather (ids with their example numbers) and asks the shard to combine its
// rows; the sparse applies turn the lookup's gradient into unique local rows
// with summed gradients here, beside the shard, and send one SparseApply.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/embedding_math.h"
#include "kernels/optimizer_spec.h"
#include "kernels/embedding_shard_service.h"
#include "kernels/replication_service.h"

namespace sf {
namespace {

Result<int64_t> ShardHandle(const Tensor& t, const std::string& table) {
  if (t.dtype() != DType::kResource || t.num_elements() != 1)
    return InvalidArgument("embedding table '" + table + "': expected a shard handle, got " +
                           t.DebugString(0));
  return t.data<int64_t>()[0];
}

// The shard input 0 names, once the embedding service is there: what every
// shard kernel checks first.
Result<int64_t> ShardOf(OpKernelContext* ctx, const std::string& op, const std::string& table) {
  if (!ctx->embeddings()) return MissingService(op, "an embedding shard service");
  return ShardHandle(ctx->input(0), table);
}

// An asynchronous kernel of a stateful shard op.
class AsyncShardKernel : public OpKernel {
 public:
  void Compute(OpKernelContext* ctx) override { ctx->SetStatus(Internal("embedding kernels are asynchronous")); }
  bool IsAsync() const override { return true; }
  bool IsStateful() const override { return true; }
};

class EmbeddingKernelBase : public AsyncShardKernel {
 public:
  EmbeddingKernelBase(const KernelInit& init, Status* s) : op_(init.op) {
    auto a = ParseEmbeddingOpAttrs(*init.attrs);
    if (!a.ok()) *s = a.status();
    else attrs_ = *a;
  }

 protected:
  std::string op_;
  EmbeddingOpAttrs attrs_;
};

class EmbeddingShardLookupKernel : public EmbeddingKernelBase {
 public:
  EmbeddingShardLookupKernel(const KernelInit& init, Status* s)
      : EmbeddingKernelBase(init, s), origin_op_(OriginOpKey(init.node_name)) {}
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    auto fail = [&](Status s) {
      ctx->SetStatus(std::move(s));
      done();
    };
    auto id = ShardOf(ctx, op_, attrs_.spec.table);
    if (!id.ok()) return fail(id.status());
    EmbeddingGather q;
    Shape prefix;
    Status s;
    if (attrs_.segments == EmbeddingSegments::kSplit) {
      // This shard's part of the batch, split once for all shards.
      s = ctx->num_inputs() == 4 ? BuildSplitShardGather(attrs_, ctx->input(1), ctx->input(2), ctx->input(3), &q)
                                 : InvalidArgument("embedding table '" + attrs_.spec.table +
                                                   "': a split lookup takes rows, segment ids and weights");
      prefix = {q.num_segments};
    } else {
      s = BuildEmbeddingGather(attrs_, ctx->input(1), ctx->num_inputs() > 2 ? &ctx->input(2) : nullptr, &q,
                               &prefix);
    }
    if (!s.ok()) return fail(s);
    if (attrs_.spec.partition == EmbeddingPartition::kHash) {
      // Only this shard's ids, each once, travel to the shard.
      q.step_id = ctx->step_id();
      q.read_only = attrs_.read_only;
      if (!q.read_only) q.origin = OriginOf(*ctx, origin_op_);
      EmbeddingGather mine;
      s = BuildHashShardGather(attrs_.spec, q, &mine);
      if (!s.ok()) return fail(s);
      q = std::move(mine);
    }
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

 private:
  uint64_t origin_op_;
};

// The rows and summed row gradients of one lookup of a shard from the
// lookup's inputs ctx->input(first .. num_inputs - 2) and its output's
// gradient dy (the last): what its sparse update applies. Errors name the table.
Status LookupRowGradients(const EmbeddingOpAttrs& a, OpKernelContext* ctx, int first, int num_inputs,
                          Tensor* rows, Tensor* values) {
  const std::string who = "embedding table '" + a.spec.table + "'";
  EmbeddingGather q;
  Shape prefix;
  if (a.segments == EmbeddingSegments::kSplit) {
    if (num_inputs != first + 4)
      return InvalidArgument(who + ": a split sparse gradient takes rows, segment ids, weights and the gradient");
    SF_RETURN_IF_ERROR(BuildSplitShardGather(a, ctx->input(first), ctx->input(first + 1), ctx->input(first + 2), &q));
  } else {
    if (num_inputs != first + 2 && num_inputs != first + 3)
      return InvalidArgument(who + ": a sparse gradient takes ids, [segments,] and the gradient");
    const bool has_segments = num_inputs == first + 3;
    SF_RETURN_IF_ERROR(BuildEmbeddingGather(a, ctx->input(first), has_segments ? &ctx->input(first + 1) : nullptr, &q,
                                            &prefix));
  }
  // dy has the lookup's shape; as rows per segment it is [num_segments, dim].
  const Tensor& dy = ctx->input(num_inputs - 1);
  const int64_t dim = dy.rank() > 0 ? dy.dim(dy.rank() - 1) : 0;
  auto dy2 = dy.Reshaped({q.num_segments, dim});
  if (!dy2.ok())
    return InvalidArgument(who + ": gradient " + ShapeString(dy.shape()) + " does not match the lookup's " +
                           std::to_string(q.num_segments) + " rows");
  return EmbeddingSparseGrad(a.spec, q, *dy2, rows, values, ctx->pool());
}

// EmbeddingSparseGrad: one lookup's rows and row gradients (outputs 0, 1), for
// a sparse update in segments "rows" that merges several lookups of a shard.
class EmbeddingSparseGradKernel : public OpKernel {
 public:
  EmbeddingSparseGradKernel(const KernelInit& init, Status* s) {
    auto a = ParseEmbeddingOpAttrs(*init.attrs);
    if (!a.ok()) *s = a.status();
    else if (a->segments == EmbeddingSegments::kRows)
      *s = InvalidArgument("embedding table '" + a->spec.table + "': a sparse gradient needs a lookup's segments");
    else attrs_ = *a;
  }
  void Compute(OpKernelContext* ctx) override {
    Tensor rows, values;
    // Input 0 is the shard's handle: it places this op beside the shard's update.
    Status s = LookupRowGradients(attrs_, ctx, 1, ctx->num_inputs(), &rows, &values);
    if (!s.ok()) return ctx->SetStatus(std::move(s));
    ctx->set_output(0, std::move(rows));
    ctx->set_output(1, std::move(values));
  }

 private:
  EmbeddingOpAttrs attrs_;
};

class EmbeddingSparseApplyKernel : public EmbeddingKernelBase {
 public:
  EmbeddingSparseApplyKernel(const KernelInit& init, Status* s, OptimizerKind optimizer)
      : EmbeddingKernelBase(init, s), optimizer_(optimizer), handles_(SpecOf(optimizer).handles),
        scalars_(SpecOf(optimizer).scalars),
        slot_init_(init.attrs->GetOr<std::vector<double>>("slot_init", {})), origin_op_(OriginOpKey(init.node_name)) {
    if (s->ok() && !slot_init_.ok()) *s = slot_init_.status();
  }
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    if (!ctx->embeddings()) {
      ctx->SetStatus(MissingService(op_, "an embedding shard service"));
      return done();
    }
    SparseApplyRequest req;
    Status s = BuildRequest(ctx, ctx->num_inputs(), &req);
    if (!s.ok()) {
      ctx->SetStatus(std::move(s));
      return done();
    }
    req.origin = OriginOf(*ctx, origin_op_);
    ctx->embeddings()->SparseApply(std::move(req), [ctx, done = std::move(done)](Status st) {
      ctx->SetStatus(std::move(st));
      done();
    });
  }

 protected:
  // The update of the sparse op's inputs 0..num_inputs: the shard's unique
  // rows and their summed gradients. Errors name the table.
  Status BuildRequest(OpKernelContext* ctx, int num_inputs, SparseApplyRequest* req) const {
    req->optimizer = optimizer_;
    for (int i = 0; i < handles_; ++i) {
      SF_ASSIGN_OR_RETURN(int64_t id, ShardHandle(ctx->input(i), attrs_.spec.table));
      req->var_ids.push_back(id);
    }
    for (int i = 0; i < scalars_; ++i) req->scalars.push_back(ctx->input(handles_ + i));
    const int first = handles_ + scalars_;
    if (attrs_.segments == EmbeddingSegments::kRows) {
      // Several lookups' rows and gradients, concatenated: duplicates are summed by the shard.
      if (num_inputs != first + 2)
        return InvalidArgument("embedding table '" + attrs_.spec.table + "': a sparse update of rows takes the "
                               "rows and their gradients");
      const Tensor& rows = ctx->input(first);
      if (rows.dtype() != DType::kInt64 || rows.rank() != 1)
        return InvalidArgument("embedding table '" + attrs_.spec.table + "': the rows must be an int64 vector, got " +
                               rows.DebugString(0));
      req->indices = rows;
      req->values = ctx->input(first + 1);
      req->indices_unique = false;
    } else {
      SF_RETURN_IF_ERROR(LookupRowGradients(attrs_, ctx, first, num_inputs, &req->indices, &req->values));
      req->indices_unique = true;  // EmbeddingSparseGrad merged duplicates
    }
    req->step_id = ctx->step_id();
    if (slot_init_.ok()) req->slot_init = *slot_init_;
    return Status::OK();
  }

  OptimizerKind optimizer_;
  int handles_, scalars_;
  Result<std::vector<double>> slot_init_;
  uint64_t origin_op_;
};

// EmbeddingSparseApplySync: the sparse update's request, contributed to the
// shard's synchronous step (the last input is the step tag).
class EmbeddingSparseApplySyncKernel : public EmbeddingSparseApplyKernel {
 public:
  EmbeddingSparseApplySyncKernel(const KernelInit& init, Status* s, OptimizerKind optimizer)
      : EmbeddingSparseApplyKernel(init, s, optimizer) {
    auto n = init.attrs->Get<int64_t>("num_required");
    auto t = init.attrs->GetOr<int64_t>("timeout_ms", 0);
    if (s->ok() && !n.ok()) *s = n.status();
    if (s->ok() && !t.ok()) *s = t.status();
    if (n.ok()) num_required_ = *n;
    if (t.ok()) timeout_ms_ = *t;
  }
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    auto fail = [&](Status s) {
      ctx->SetStatus(std::move(s));
      done();
    };
    if (!ctx->replication()) return fail(MissingService(op_, "a replication service"));
    const Tensor& tag = ctx->input(ctx->num_inputs() - 1);
    if (tag.dtype() != DType::kInt64 || tag.num_elements() != 1)
      return fail(InvalidArgument("embedding table '" + attrs_.spec.table + "': the step tag must be one int64, got " +
                                  DTypeName(tag.dtype()) + ShapeString(tag.shape())));
    SparseSyncApplyRequest sreq;
    Status s = BuildRequest(ctx, ctx->num_inputs() - 1, &sreq.req);
    if (!s.ok()) return fail(s);
    sreq.step_tag = tag.data<int64_t>()[0];
    sreq.num_required = num_required_;
    sreq.timeout_ms = timeout_ms_;
    sreq.run_step = ctx->step_id();
    ctx->replication()->SparseApplySync(std::move(sreq), AnswerSyncStep(ctx, std::move(done)));
  }

 private:
  int64_t num_required_ = 1, timeout_ms_ = 0;
};

// Splits a lookup's ids over the table's shards once (outputs: each shard's
// local rows and segment ids, then the segment weights), so that each
// shard's lookup and sparse update read only their own ids.
class EmbeddingSplitIdsKernel : public OpKernel {
 public:
  EmbeddingSplitIdsKernel(const KernelInit& init, Status* s) {
    auto a = ParseEmbeddingOpAttrs(*init.attrs);
    if (!a.ok()) *s = a.status();
    else attrs_ = *a;
  }
  void Compute(OpKernelContext* ctx) override {
    EmbeddingIdSplit split;
    Status s = SplitEmbeddingIds(attrs_, ctx->input(0), ctx->num_inputs() > 1 ? &ctx->input(1) : nullptr, &split,
                                 ctx->pool());
    if (!s.ok()) return ctx->SetStatus(std::move(s));
    const int64_t K = attrs_.spec.num_shards;
    for (int64_t k = 0; k < K; ++k) {
      ctx->set_output(static_cast<int>(2 * k), std::move(split.rows[k]));
      ctx->set_output(static_cast<int>(2 * k + 1), std::move(split.segments[k]));
    }
    ctx->set_output(static_cast<int>(2 * K), std::move(split.weights));
  }

 private:
  EmbeddingOpAttrs attrs_;
};

// Makes its input's shard an empty hash table shard (an initializer).
class HashEmbeddingShardInitKernel : public AsyncShardKernel {
 public:
  HashEmbeddingShardInitKernel(const KernelInit& init, Status* s) : op_(init.op) {
    *s = Parse(*init.attrs);
  }
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    auto id = ShardOf(ctx, op_, c_.table);
    if (!id.ok()) {
      ctx->SetStatus(id.status());
      return done();
    }
    ctx->embeddings()->InitHashShard(*id, c_, [ctx, done = std::move(done)](Status st) {
      ctx->SetStatus(std::move(st));
      done();
    });
  }

 private:
  Status Parse(const AttrMap& a) {
    SF_ASSIGN_OR_RETURN(c_.table, a.Get<std::string>("table"));
    SF_ASSIGN_OR_RETURN(c_.num_shards, a.Get<int64_t>("num_shards"));
    SF_ASSIGN_OR_RETURN(c_.shard, a.Get<int64_t>("shard"));
    SF_ASSIGN_OR_RETURN(c_.dim, a.Get<int64_t>("dim"));
    SF_ASSIGN_OR_RETURN(std::string init, a.GetOr<std::string>("initializer", "uniform"));
    SF_ASSIGN_OR_RETURN(c_.initializer, ParseHashInitializer(init));
    SF_ASSIGN_OR_RETURN(c_.scale, a.GetOr<double>("scale", 0.0));
    SF_ASSIGN_OR_RETURN(c_.seed, a.GetOr<int64_t>("seed", 0));
    SF_ASSIGN_OR_RETURN(c_.min_count, a.GetOr<int64_t>("min_count", 0));
    SF_ASSIGN_OR_RETURN(c_.admit_probability, a.GetOr<double>("admit_probability", 1.0));
    SF_ASSIGN_OR_RETURN(c_.filter_width, a.GetOr<int64_t>("filter_width", 1 << 16));
    SF_ASSIGN_OR_RETURN(c_.filter_depth, a.GetOr<int64_t>("filter_depth", 4));
    SF_ASSIGN_OR_RETURN(c_.ttl_steps, a.GetOr<int64_t>("ttl_steps", 0));
    SF_ASSIGN_OR_RETURN(c_.max_rows, a.GetOr<int64_t>("max_rows", 0));
    SF_ASSIGN_OR_RETURN(std::string ev, a.GetOr<std::string>("eviction", "lru"));
    SF_ASSIGN_OR_RETURN(c_.eviction, ParseHashEviction(ev));
    SF_ASSIGN_OR_RETURN(c_.ram_budget_bytes, a.GetOr<int64_t>("ram_budget_bytes", 0));
    SF_ASSIGN_OR_RETURN(c_.cold_dir, a.GetOr<std::string>("cold_dir", ""));
    return CheckHashShardConfig(c_);
  }
  std::string op_;
  HashShardConfig c_;
};

// One hash table shard's metrics.
class HashEmbeddingShardStatsKernel : public AsyncShardKernel {
 public:
  HashEmbeddingShardStatsKernel(const KernelInit& init, Status* s) : op_(init.op) {
    auto t = init.attrs->GetOr<std::string>("table", "?");
    if (!t.ok()) *s = t.status();
    else table_ = *t;
  }
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    auto id = ShardOf(ctx, op_, table_);
    if (!id.ok()) {
      ctx->SetStatus(id.status());
      return done();
    }
    ctx->embeddings()->HashShardStats(*id, [ctx, done = std::move(done)](Result<Tensor> r) {
      if (r.ok()) ctx->set_output(0, std::move(*r));
      else ctx->SetStatus(r.status());
      done();
    });
  }

 private:
  std::string op_, table_;
};

KernelFactory SparseApplySyncFactory() {
  return [](const KernelInit& init) -> Result<std::unique_ptr<OpKernel>> {
    SF_ASSIGN_OR_RETURN(std::string opt, init.attrs->Get<std::string>("optimizer"));
    SF_ASSIGN_OR_RETURN(OptimizerKind kind, ParseOptimizer(opt));
    if (!SpecOf(kind).sparse_op) return InvalidArgument(opt + " has no sparse update");
    Status s;
    auto k = std::make_unique<EmbeddingSparseApplySyncKernel>(init, &s, kind);
    if (!s.ok()) return s;
    return std::unique_ptr<OpKernel>(std::move(k));
  };
}

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
  Reg(reg, "EmbeddingSplitIds", MakeFactory<EmbeddingSplitIdsKernel>());
  Reg(reg, "EmbeddingSparseGrad", MakeFactory<EmbeddingSparseGradKernel>());
  Reg(reg, "EmbeddingSparseApplySync", SparseApplySyncFactory());
  Reg(reg, "HashEmbeddingShardInit", MakeFactory<HashEmbeddingShardInitKernel>());
  Reg(reg, "HashEmbeddingShardStats", MakeFactory<HashEmbeddingShardStatsKernel>());
  for (const OptimizerSpec& spec : kOptimizers)
    if (spec.sparse_op) Reg(reg, spec.sparse_op, SparseApplyFactory(spec.kind));
}

}  // namespace sf
