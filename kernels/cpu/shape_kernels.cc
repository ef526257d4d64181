// PLACEHOLDER: replaced by the shape kernels implementation.
#include "kernels/cpu/cpu_kernels.h"
namespace sf {
void RegisterShapeKernels(KernelRegistry&) {}
}  // namespace sf
