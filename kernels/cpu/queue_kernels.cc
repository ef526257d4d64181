// Kernels of the queue ops: a queue op resolves its queue once, when the
// kernel is built; every other queue op is async and goes through the
// QueueService, so a step waiting on a queue holds no thread.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/queue_service.h"

namespace sf {
namespace {

class QueueHandleKernel : public ResourceHandleKernel {
 public:
  QueueHandleKernel(const KernelInit& init, Status* s) {
    auto name = init.Attr<std::string>("shared_name");
    if (!name.ok()) { *s = name.status(); return; }
    auto spec = QueueSpecFromAttrs(init.op, *init.attrs);
    if (!spec.ok()) { *s = spec.status(); return; }
    if (!init.queues) {
      *s = FailedPrecondition("queue '" + *name + "' needs a session (no queue service)");
      return;
    }
    SetHandle(init.queues->Resolve(*name, *spec), s);
  }
};

// A kernel that reaches the queue named by its input 0: always asynchronous,
// always stateful.
class QueueAccessKernel : public AsyncResourceKernel {
 public:
  explicit QueueAccessKernel(const KernelInit& init, Status* s) {
    auto t = init.AttrOr<int64_t>("timeout_ms", 0);
    if (!t.ok()) *s = t.status();
    else if (*t < 0) *s = InvalidArgument("timeout_ms must be >= 0, got " + std::to_string(*t));
    else timeout_ms_ = *t;
  }
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    auto id = ResourceId(ctx->input(0), "a queue handle");
    if (!id.ok() || !ctx->queues()) {
      ctx->SetStatus(!id.ok() ? id.status() : FailedPrecondition("queue ops need a session (no queue service)"));
      return done();
    }
    Access(ctx, *id, std::move(done));
  }

 protected:
  // Starts the access of queue `id`; calls done once it has finished.
  virtual void Access(OpKernelContext* ctx, int64_t id, std::function<void()> done) = 0;
  int64_t timeout_ms_ = 0;
};

template <bool kMany>
class EnqueueKernel : public QueueAccessKernel {
 public:
  using QueueAccessKernel::QueueAccessKernel;

 protected:
  void Access(OpKernelContext* ctx, int64_t id, std::function<void()> done) override {
    QueueTuple t;
    t.reserve(ctx->num_inputs() - 1);
    for (int i = 1; i < ctx->num_inputs(); ++i) t.push_back(ctx->input(i).Owned());
    auto cb = [ctx, done = std::move(done)](Status s) {
      ctx->SetStatus(std::move(s));
      done();
    };
    if (kMany) ctx->queues()->EnqueueMany(id, std::move(t), timeout_ms_, std::move(cb), ctx->step_id());
    else ctx->queues()->Enqueue(id, std::move(t), timeout_ms_, std::move(cb), ctx->step_id());
  }
};

enum class DequeueKind { kOne, kMany, kUpTo };

template <DequeueKind kKind>
class DequeueKernel : public QueueAccessKernel {
 public:
  DequeueKernel(const KernelInit& init, Status* s) : QueueAccessKernel(init, s) {
    auto t = init.Attr<std::vector<DType>>("component_types");
    if (!t.ok()) *s = t.status();
    else types_ = *t;
    auto w = init.AttrOr<bool>("wait_for_n", true);
    if (!w.ok()) *s = w.status();
    else wait_for_n_ = *w;
  }

 protected:
  void Access(OpKernelContext* ctx, int64_t id, std::function<void()> done) override {
    QueueService* q = ctx->queues();
    // Checked before dequeuing: a mismatch must not cost the queue an element.
    auto spec = q->SpecOf(id);
    if (!spec.ok()) {
      ctx->SetStatus(spec.status());
      return done();
    }
    if (spec->component_types.size() != types_.size() ||
        spec->component_types != types_) {
      ctx->SetStatus(InvalidArgument("queue '" + q->NameOf(id) +
                                     "' holds other component types than this dequeue expects"));
      return done();
    }
    auto cb = [ctx, done = std::move(done)](Result<QueueTuple> r) {
      if (!r.ok()) {
        ctx->SetStatus(r.status());
      } else {
        for (size_t i = 0; i < r->size(); ++i) ctx->set_output(static_cast<int>(i), std::move((*r)[i]));
      }
      done();
    };
    if (kKind == DequeueKind::kOne) return q->Dequeue(id, timeout_ms_, std::move(cb), ctx->step_id());
    const Tensor& n = ctx->input(1);
    if ((n.dtype() != DType::kInt32 && n.dtype() != DType::kInt64) || n.num_elements() != 1) {
      ctx->SetStatus(InvalidArgument("n must be an int32 or int64 scalar, got " + n.DebugString(0)));
      return done();
    }
    if (kKind == DequeueKind::kUpTo && !wait_for_n_)
      q->DequeueAvailable(id, n.scalar_as<int64_t>(), timeout_ms_, std::move(cb), ctx->step_id());
    else if (kKind == DequeueKind::kUpTo) q->DequeueUpTo(id, n.scalar_as<int64_t>(), timeout_ms_, std::move(cb), ctx->step_id());
    else q->DequeueMany(id, n.scalar_as<int64_t>(), timeout_ms_, std::move(cb), ctx->step_id());
  }

 private:
  std::vector<DType> types_;
  bool wait_for_n_ = true;  // QueueDequeueUpTo's attr
};

class CloseKernel : public QueueAccessKernel {
 public:
  CloseKernel(const KernelInit& init, Status* s) : QueueAccessKernel(init, s) {
    auto c = init.AttrOr<bool>("cancel_pending_enqueues", false);
    if (!c.ok()) *s = c.status();
    else cancel_ = *c;
  }

 protected:
  void Access(OpKernelContext* ctx, int64_t id, std::function<void()> done) override {
    ctx->queues()->Close(id, cancel_, [ctx, done = std::move(done)](Status s) {
      ctx->SetStatus(std::move(s));
      done();
    });
  }

 private:
  bool cancel_ = false;
};

class SizeKernel : public QueueAccessKernel {
 public:
  using QueueAccessKernel::QueueAccessKernel;

 protected:
  void Access(OpKernelContext* ctx, int64_t id, std::function<void()> done) override {
    ctx->queues()->Size(id, [ctx, done = std::move(done)](Result<int64_t> r) {
      if (!r.ok()) ctx->SetStatus(r.status());
      else ctx->set_output(0, Tensor::Scalar<int32_t>(static_cast<int32_t>(*r)));
      done();
    });
  }
};

class IncarnationKernel : public QueueAccessKernel {
 public:
  using QueueAccessKernel::QueueAccessKernel;

 protected:
  void Access(OpKernelContext* ctx, int64_t id, std::function<void()> done) override {
    auto r = ctx->queues()->IncarnationOf(id);
    if (!r.ok()) ctx->SetStatus(r.status());
    else ctx->set_output(0, Tensor::Scalar<int64_t>(*r));
    done();
  }
};

}  // namespace

void RegisterQueueKernels(KernelRegistry& reg) {
  for (const char* op : {"FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue"})
    RegisterCPU<QueueHandleKernel>(reg, op, {DType::kInvalid});
  RegisterCPU<EnqueueKernel<false>>(reg, "QueueEnqueue", {DType::kInvalid});
  RegisterCPU<EnqueueKernel<true>>(reg, "QueueEnqueueMany", {DType::kInvalid});
  RegisterCPU<DequeueKernel<DequeueKind::kOne>>(reg, "QueueDequeue", {DType::kInvalid});
  RegisterCPU<DequeueKernel<DequeueKind::kMany>>(reg, "QueueDequeueMany", {DType::kInvalid});
  RegisterCPU<DequeueKernel<DequeueKind::kUpTo>>(reg, "QueueDequeueUpTo", {DType::kInvalid});
  RegisterCPU<CloseKernel>(reg, "QueueClose", {DType::kInvalid});
  RegisterCPU<SizeKernel>(reg, "QueueSize", {DType::kInvalid});
  RegisterCPU<IncarnationKernel>(reg, "QueueIncarnation", {DType::kInvalid});
}

}  // namespace sf
