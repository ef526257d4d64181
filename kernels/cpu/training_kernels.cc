// PLACEHOLDER: replaced by the Training kernels implementation.
#include "kernels/cpu/cpu_kernels.h"
namespace sf {
void RegisterTrainingKernels(KernelRegistry&) {}
}  // namespace sf
