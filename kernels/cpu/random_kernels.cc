// PLACEHOLDER: replaced by the Random kernels implementation.
#include "kernels/cpu/cpu_kernels.h"
namespace sf {
void RegisterRandomKernels(KernelRegistry&) {}
}  // namespace sf
