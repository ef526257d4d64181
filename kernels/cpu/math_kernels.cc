// PLACEHOLDER: replaced by the Math kernels implementation.
#include "kernels/cpu/cpu_kernels.h"
namespace sf {
void RegisterMathKernels(KernelRegistry&) {}
}  // namespace sf
