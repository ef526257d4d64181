// The CPU kernel groups, one per file in kernels/cpu/; each registers the
// kernels of the ops of the matching graph/ops/ file.
#pragma once

#include "shardflow/kernel.h"

namespace sf {

void RegisterCoreKernels(KernelRegistry& reg);
void RegisterArrayKernels(KernelRegistry& reg);
void RegisterShapeKernels(KernelRegistry& reg);
void RegisterMathKernels(KernelRegistry& reg);
void RegisterNNKernels(KernelRegistry& reg);
void RegisterStateKernels(KernelRegistry& reg);
void RegisterRandomKernels(KernelRegistry& reg);
void RegisterTrainingKernels(KernelRegistry& reg);
void RegisterReplicationKernels(KernelRegistry& reg);

// The callback of a synchronous contribution: the step it counted in (-1:
// stale) as the kernel's int64 scalar output 0, or the error; then done.
std::function<void(Result<int64_t>)> AnswerSyncStep(OpKernelContext* ctx, std::function<void()> done);
void RegisterControlFlowKernels(KernelRegistry& reg);
void RegisterQueueKernels(KernelRegistry& reg);
void RegisterSendRecvKernels(KernelRegistry& reg);
void RegisterEmbeddingKernels(KernelRegistry& reg);  // embedding_kernels.cc
void RegisterCheckpointKernels(KernelRegistry& reg);  // checkpoint_kernels.cc
void RegisterReaderKernels(KernelRegistry& reg);      // reader_kernels.cc
void RegisterChunkQueueKernels(KernelRegistry& reg);  // chunk_queue_kernels.cc
void RegisterInteractionKernels(KernelRegistry& reg);  // interaction_kernels.cc

// OK when every dim of `s` (a shape read from a run-time tensor) is >= 0 and
// its element count times 8 bytes fits in int64; else InvalidArgument naming
// `what` and the shape, so a bad fed shape never reaches an allocation.
inline Status CheckRuntimeShape(const Shape& s, const std::string& what) {
  int64_t n = 8;
  for (int64_t d : s) {
    if (d < 0) return InvalidArgument(what + " " + ShapeString(s) + " has a negative dimension");
    if (__builtin_mul_overflow(n, d, &n))
      return InvalidArgument(what + " " + ShapeString(s) + " has too many elements");
  }
  return Status::OK();
}

// What a kernel reports when the runtime gives it no `service` (a null
// pointer in KernelInit / OpKernelContext): FailedPrecondition naming the op.
inline Status MissingService(const std::string& op, const char* service) {
  return FailedPrecondition("op " + op + " needs " + service +
                            ", which this runtime does not provide (run it in a session)");
}

// A kernel whose output is a resource handle resolved once, when the kernel
// is built (a variable, a queue, a chunk queue): each run hands it out.
class ResourceHandleKernel : public OpKernel {
 public:
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, handle_); }
  bool IsStateful() const override { return true; }

 protected:
  // Holds id as the handle; with an error instead, sets *s to it. Never fails otherwise.
  void SetHandle(const Result<int64_t>& id, Status* s) {
    if (!id.ok()) {
      *s = id.status();
      return;
    }
    handle_ = Tensor(DType::kResource, {});
    handle_.data<int64_t>()[0] = *id;
  }

 private:
  Tensor handle_;
};

// The id a resource handle carries (a scalar of dtype resource);
// InvalidArgument naming what was expected ("a queue handle") otherwise.
inline Result<int64_t> ResourceId(const Tensor& h, const char* what) {
  if (h.dtype() != DType::kResource || h.num_elements() != 1)
    return InvalidArgument(std::string("expected ") + what + ", got " + h.DebugString(0));
  return h.data<int64_t>()[0];
}

// A kernel that reaches a resource through a service and answers later:
// always asynchronous (ComputeAsync), always stateful.
class AsyncResourceKernel : public OpKernel {
 public:
  void Compute(OpKernelContext* ctx) override { ctx->SetStatus(Internal("resource access is asynchronous")); }
  bool IsAsync() const override { return true; }
  bool IsStateful() const override { return true; }
};

// Registers K for `op` on the CPU for each listed dtype (kInvalid = any);
// a duplicate is our bug and aborts.
template <typename K>
void RegisterCPU(KernelRegistry& reg, const std::string& op, std::initializer_list<DType> dtypes) {
  for (DType t : dtypes) {
    Status s = reg.Register(op, DeviceType::kCPU, t, MakeFactory<K>());
    if (!s.ok()) std::abort();
  }
}

}  // namespace sf
