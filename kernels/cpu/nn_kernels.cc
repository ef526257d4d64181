// PLACEHOLDER: replaced by the NN kernels implementation.
#include "kernels/cpu/cpu_kernels.h"
namespace sf {
void RegisterNNKernels(KernelRegistry&) {}
}  // namespace sf
