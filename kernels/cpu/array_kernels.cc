// PLACEHOLDER: replaced by the Array kernels implementation.
#include "kernels/cpu/cpu_kernels.h"
namespace sf {
void RegisterArrayKernels(KernelRegistry&) {}
}  // namespace sf
