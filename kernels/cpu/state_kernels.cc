// PLACEHOLDER: replaced by the State kernels implementation.
#include "kernels/cpu/cpu_kernels.h"
namespace sf {
void RegisterStateKernels(KernelRegistry&) {}
}  // namespace sf
