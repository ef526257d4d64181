#include "kernels/cpu/cpu_kernels.h"

namespace sf {

void RegisterStandardKernels(KernelRegistry& reg) {
  RegisterCoreKernels(reg);
  RegisterArrayKernels(reg);
  RegisterShapeKernels(reg);
  RegisterMathKernels(reg);
  RegisterNNKernels(reg);
  RegisterStateKernels(reg);
  RegisterRandomKernels(reg);
  RegisterTrainingKernels(reg);
  RegisterReplicationKernels(reg);
  RegisterControlFlowKernels(reg);
  RegisterQueueKernels(reg);
  RegisterSendRecvKernels(reg);
  RegisterEmbeddingKernels(reg);
  RegisterCheckpointKernels(reg);
  RegisterReaderKernels(reg);
  RegisterChunkQueueKernels(reg);
  RegisterInteractionKernels(reg);
}

const KernelRegistry& StandardKernelRegistry() {
  // Built on first use by an explicit call, so no static-initialisation order.
  static const KernelRegistry* reg = [] {
    auto* r = new KernelRegistry();
    RegisterStandardKernels(*r);
    return r;
  }();
  return *reg;
}

}  // namespace sf
