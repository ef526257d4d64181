// Kernels of _Send and _Recv (graph/ops/sendrecv_ops.cc): they hand tensors
// between the partitions of one step through the RendezvousService, keyed by
// (step, tensor_name, frame key, iteration). A dead value crosses as is_dead:
// the executor's frame propagator runs _Send on a dead (invalid) input, and a
// _Recv that receives is_dead leaves its output unset, which it reads as
// dead.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/rendezvous_service.h"

namespace sf {
namespace {

RendezvousKey KeyOf(const OpKernelContext* ctx, const std::string& edge) {
  RendezvousKey k;
  k.step_id = ctx->step_id();
  k.edge = edge;
  k.frame = ctx->frame_key();
  k.iteration = ctx->iteration();
  return k;
}

Status TransferInit(const KernelInit& init, std::string* key) {
  auto k = init.Attr<std::string>("tensor_name");
  if (!k.ok()) return k.status();
  *key = *k;
  if (!init.rendezvous)
    return FailedPrecondition("'" + init.node_name + "' needs a session running several partitions");
  return Status::OK();
}

class SendKernel : public OpKernel {
 public:
  SendKernel(const KernelInit& init, Status* s) : rendezvous_(init.rendezvous) {
    *s = TransferInit(init, &key_);
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Status s = rendezvous_->Send(KeyOf(ctx, key_), x, !x.valid());
    if (!s.ok()) ctx->SetStatus(s);
  }
  bool IsStateful() const override { return true; }

 private:
  RendezvousService* rendezvous_;
  std::string key_;
};

class RecvKernel : public OpKernel {
 public:
  RecvKernel(const KernelInit& init, Status* s) : rendezvous_(init.rendezvous) {
    *s = TransferInit(init, &key_);
  }
  void Compute(OpKernelContext* ctx) override {
    ctx->SetStatus(Internal("_Recv runs only asynchronously"));
  }
  bool IsAsync() const override { return true; }
  void ComputeAsync(OpKernelContext* ctx, std::function<void()> done) override {
    rendezvous_->RecvAsync(KeyOf(ctx, key_), [ctx, done = std::move(done)](Status s, Tensor v, bool dead) {
      if (!s.ok()) ctx->SetStatus(s);
      else if (!dead) ctx->set_output(0, std::move(v));
      done();
    });
  }
  bool IsStateful() const override { return true; }

 private:
  RendezvousService* rendezvous_;
  std::string key_;
};

}  // namespace

void RegisterSendRecvKernels(KernelRegistry& reg) {
  RegisterCPU<SendKernel>(reg, "_Send", {DType::kInvalid});
  RegisterCPU<RecvKernel>(reg, "_Recv", {DType::kInvalid});
}

}  // namespace sf
