// Kernels of the replication ops (graph/ops/replication_ops.cc). Each sends
// one request to the ReplicationService (the asynchronous apply to the
// VariableService, all-reduce to the CollectiveService) and finishes in its
// callback: a worker
// waiting for its synchronous step (or at the stale-synchronous barrier) is a
// pending callback in the variable's shard actor, never a blocked thread.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/optimizer_spec.h"
#include "kernels/collective_service.h"
#include "kernels/replication_service.h"
#include "kernels/update_origin.h"
#include "kernels/variable_service.h"

namespace sf {
namespace {

// The variable id of resource input i, or an error.
Result<int64_t> HandleInput(OpKernelContext* ctx, int i) {
  const Tensor& h = ctx->input(i);
  if (h.dtype() != DType::kResource || h.num_elements() != 1)
    return InvalidArgument("input " + std::to_string(i) + " is not a variable handle: " +
                           h.DebugString(0));
  return h.data<int64_t>()[0];
}

// An int64 scalar input, or an error naming `what`.
Result<int64_t> Int64Input(OpKernelContext* ctx, int i, const char* what) {
  const Tensor& t = ctx->input(i);
  if (t.dtype() != DType::kInt64 || t.num_elements() != 1)
    return InvalidArgument(std::string(what) + " must be an int64 scalar, got " + t.DebugString(0));
  return t.data<int64_t>()[0];
}

// The service a replication kernel sends its request to.
enum class Needs { kReplication, kVariables, kCollectives };

class AsyncKernelBase : public OpKernel {
 public:
  AsyncKernelBase(const KernelInit& init, Needs needs) : op_(init.op), needs_(needs) {}
  void Compute(OpKernelContext* ctx) override { ctx->SetStatus(Internal("replication ops are asynchronous")); }
  bool IsAsync() const override { return true; }
  bool IsStateful() const override { return true; }
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    const bool have = needs_ == Needs::kReplication ? ctx->replication() != nullptr
                      : needs_ == Needs::kVariables ? ctx->variables() != nullptr
                                                    : ctx->collectives() != nullptr;
    if (!have) {
      ctx->SetStatus(MissingService(op_, needs_ == Needs::kReplication ? "a replication service"
                                         : needs_ == Needs::kVariables ? "a variable service"
                                                                       : "a collective service"));
      done();
      return;
    }
    Status s = Start(ctx, done);
    if (!s.ok()) {
      ctx->SetStatus(std::move(s));
      done();
    }
  }

 protected:
  // Sends the request; on an error returned here done has not been called.
  virtual Status Start(OpKernelContext* ctx, std::function<void()>& done) = 0;

 private:
  std::string op_;
  Needs needs_;
};

// ApplyGradientSync (sync = true) and ApplyGradientAsync.
class TaggedApplyKernel : public AsyncKernelBase {
 public:
  TaggedApplyKernel(const KernelInit& init, Status* s, bool sync)
      : AsyncKernelBase(init, sync ? Needs::kReplication : Needs::kVariables), sync_(sync),
        origin_op_(OriginOpKey(init.node_name)) {
    auto opt = init.Attr<std::string>("optimizer");
    if (!opt.ok()) { *s = opt.status(); return; }
    auto kind = ParseOptimizer(*opt);
    if (!kind.ok()) { *s = kind.status(); return; }
    optimizer_ = *kind;
    handles_ = SpecOf(optimizer_).handles;
    scalars_ = SpecOf(optimizer_).scalars;
    auto n = init.AttrOr<bool>("use_nesterov", false);
    if (!n.ok()) { *s = n.status(); return; }
    nesterov_ = *n;
    if (sync_) {
      auto r = init.Attr<int64_t>("num_required");
      auto t = init.AttrOr<int64_t>("timeout_ms", 0);
      if (!r.ok()) { *s = r.status(); return; }
      if (!t.ok()) { *s = t.status(); return; }
      num_required_ = *r;
      timeout_ms_ = *t;
    }
  }

 protected:
  Status Start(OpKernelContext* ctx, std::function<void()>& done) override {
    if (ctx->num_inputs() != handles_ + scalars_ + 2)
      return InvalidArgument(std::string(OptimizerName(optimizer_)) + " takes " + std::to_string(handles_ + scalars_ + 2) +
                             " inputs, got " + std::to_string(ctx->num_inputs()));
    ApplyRequest req;
    req.optimizer = optimizer_;
    req.use_nesterov = nesterov_;
    for (int i = 0; i < handles_; ++i) {
      SF_ASSIGN_OR_RETURN(int64_t id, HandleInput(ctx, i));
      req.var_ids.push_back(id);
    }
    for (int i = 0; i < scalars_; ++i) req.scalars.push_back(ctx->input(handles_ + i));
    req.grad = ctx->input(handles_ + scalars_);
    req.origin = OriginOf(*ctx, origin_op_);  // a step run again applies (or counts) it once
    SF_ASSIGN_OR_RETURN(int64_t tag, Int64Input(ctx, handles_ + scalars_ + 1,
                                                sync_ ? "the step tag" : "the read version"));
    if (!sync_) {
      req.read_version = tag;
      ctx->variables()->Apply(std::move(req), [ctx, done = std::move(done)](Status s) {
        ctx->SetStatus(std::move(s));
        done();
      });
      return Status::OK();
    }
    SyncApplyRequest sreq;
    sreq.req = std::move(req);
    sreq.step_tag = tag;
    sreq.num_required = num_required_;
    sreq.timeout_ms = timeout_ms_;
    sreq.run_step = ctx->step_id();
    ctx->replication()->ApplySync(std::move(sreq), AnswerSyncStep(ctx, std::move(done)));
    return Status::OK();
  }

 private:
  bool sync_;
  uint64_t origin_op_;
  OptimizerKind optimizer_ = OptimizerKind::kGradientDescent;
  int handles_ = 0, scalars_ = 0;
  bool nesterov_ = false;
  int64_t num_required_ = 1, timeout_ms_ = 0;
};

class ApplyGradientSyncKernel : public TaggedApplyKernel {
 public:
  ApplyGradientSyncKernel(const KernelInit& init, Status* s) : TaggedApplyKernel(init, s, true) {}
};
class ApplyGradientAsyncKernel : public TaggedApplyKernel {
 public:
  ApplyGradientAsyncKernel(const KernelInit& init, Status* s) : TaggedApplyKernel(init, s, false) {}
};

class ReadVariableWithVersionKernel : public AsyncKernelBase {
 public:
  ReadVariableWithVersionKernel(const KernelInit& init, Status* s)
      : AsyncKernelBase(init, Needs::kReplication) {
    auto d = init.Attr<DType>("dtype");
    if (!d.ok()) *s = d.status();
    else dtype_ = *d;
  }

 protected:
  Status Start(OpKernelContext* ctx, std::function<void()>& done) override {
    SF_ASSIGN_OR_RETURN(int64_t id, HandleInput(ctx, 0));
    VariableService* vars = ctx->variables();  // for the name in an error; may be null
    const DType want = dtype_;
    ctx->replication()->ReadWithVersion(id, [ctx, done = std::move(done), want, vars, id](
                                                Result<std::pair<Tensor, int64_t>> r) {
      if (!r.ok()) {
        ctx->SetStatus(r.status());
      } else if (r->first.dtype() != want) {
        const std::string name = vars ? vars->NameOf(id) : "id " + std::to_string(id);
        ctx->SetStatus(InvalidArgument("variable '" + name + "' holds " +
                                       DTypeName(r->first.dtype()) + ", read as " + DTypeName(want)));
      } else {
        Tensor v(DType::kInt64, {});
        v.data<int64_t>()[0] = r->second;
        ctx->set_output(0, std::move(r->first));
        ctx->set_output(1, std::move(v));
      }
      done();
    });
    return Status::OK();
  }

 private:
  DType dtype_ = DType::kInvalid;
};

template <ReplicaQuery kWhat>
class ReplicaQueryKernel : public AsyncKernelBase {
 public:
  ReplicaQueryKernel(const KernelInit& init, Status*) : AsyncKernelBase(init, Needs::kReplication) {}

 protected:
  Status Start(OpKernelContext* ctx, std::function<void()>& done) override {
    SF_ASSIGN_OR_RETURN(int64_t id, HandleInput(ctx, 0));
    ctx->replication()->QueryReplica(id, kWhat, [ctx, done = std::move(done)](Result<Tensor> r) {
      if (!r.ok()) ctx->SetStatus(r.status());
      else ctx->set_output(0, std::move(r).value());
      done();
    });
    return Status::OK();
  }
};

class AbortSyncStepKernel : public AsyncKernelBase {
 public:
  AbortSyncStepKernel(const KernelInit& init, Status*) : AsyncKernelBase(init, Needs::kReplication) {}

 protected:
  Status Start(OpKernelContext* ctx, std::function<void()>& done) override {
    SF_ASSIGN_OR_RETURN(int64_t id, HandleInput(ctx, 0));
    ctx->replication()->AbortSync(id, [ctx, done = std::move(done)](Status s) {
      ctx->SetStatus(std::move(s));
      done();
    });
    return Status::OK();
  }
};

class StaleSyncWaitKernel : public AsyncKernelBase {
 public:
  StaleSyncWaitKernel(const KernelInit& init, Status* s) : AsyncKernelBase(init, Needs::kReplication) {
    auto w = init.Attr<int64_t>("worker");
    auto n = init.Attr<int64_t>("num_workers");
    auto st = init.Attr<int64_t>("staleness");
    if (!w.ok()) { *s = w.status(); return; }
    if (!n.ok()) { *s = n.status(); return; }
    if (!st.ok()) { *s = st.status(); return; }
    worker_ = *w;
    num_workers_ = *n;
    staleness_ = *st;
  }

 protected:
  Status Start(OpKernelContext* ctx, std::function<void()>& done) override {
    SF_ASSIGN_OR_RETURN(int64_t id, HandleInput(ctx, 0));
    SF_ASSIGN_OR_RETURN(int64_t clock, Int64Input(ctx, 1, "the clock"));
    ctx->replication()->StaleSyncWait(id, worker_, clock, num_workers_, staleness_, ctx->step_id(),
                                      [ctx, done = std::move(done)](Status s) {
                                        ctx->SetStatus(std::move(s));
                                        done();
                                      });
    return Status::OK();
  }

 private:
  int64_t worker_ = 0, num_workers_ = 1, staleness_ = 0;
};

class AllReduceKernel : public AsyncKernelBase {
 public:
  AllReduceKernel(const KernelInit& init, Status* s) : AsyncKernelBase(init, Needs::kCollectives) {
    auto k = init.Attr<std::string>("group_key");
    auto n = init.Attr<int64_t>("group_size");
    auto r = init.Attr<int64_t>("rank");
    if (!k.ok()) { *s = k.status(); return; }
    if (!n.ok()) { *s = n.status(); return; }
    if (!r.ok()) { *s = r.status(); return; }
    key_ = *k;
    size_ = *n;
    rank_ = *r;
  }

 protected:
  Status Start(OpKernelContext* ctx, std::function<void()>& done) override {
    ctx->collectives()->AllReduce(key_, size_, rank_, ctx->input(0),
                                  [ctx, done = std::move(done)](Result<Tensor> r) {
                                    if (!r.ok()) ctx->SetStatus(r.status());
                                    else ctx->set_output(0, std::move(r).value());
                                    done();
                                  });
    return Status::OK();
  }

 private:
  std::string key_;
  int64_t size_ = 1, rank_ = 0;
};

}  // namespace

std::function<void(Result<int64_t>)> AnswerSyncStep(OpKernelContext* ctx, std::function<void()> done) {
  return [ctx, done = std::move(done)](Result<int64_t> r) {
    if (!r.ok()) {
      ctx->SetStatus(r.status());
    } else {
      Tensor out(DType::kInt64, {});
      out.data<int64_t>()[0] = *r;
      ctx->set_output(0, std::move(out));
    }
    done();
  };
}

void RegisterReplicationKernels(KernelRegistry& reg) {
  RegisterCPU<ApplyGradientSyncKernel>(reg, "ApplyGradientSync", {DType::kInvalid});
  RegisterCPU<ApplyGradientAsyncKernel>(reg, "ApplyGradientAsync", {DType::kInvalid});
  RegisterCPU<ReadVariableWithVersionKernel>(reg, "ReadVariableWithVersion", {DType::kInvalid});
  RegisterCPU<ReplicaQueryKernel<ReplicaQuery::kSyncStats>>(reg, "SyncReplicaStats", {DType::kInvalid});
  RegisterCPU<ReplicaQueryKernel<ReplicaQuery::kStaleness>>(reg, "StalenessStats", {DType::kInvalid});
  RegisterCPU<AbortSyncStepKernel>(reg, "AbortSyncStep", {DType::kInvalid});
  RegisterCPU<StaleSyncWaitKernel>(reg, "StaleSyncWait", {DType::kInvalid});
  RegisterCPU<AllReduceKernel>(reg, "AllReduce", {DType::kInvalid});
}

}  // namespace sf
