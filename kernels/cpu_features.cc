#include "kernels/cpu_features.h"

#include <cpuid.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "shardflow/precision.h"

namespace sf {

bool CpuHasAvx512Bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  return (eax >> 5) & 1u;
}

bool BuiltWithDnnl() {
#ifdef SF_HAVE_DNNL
  return true;
#else
  return false;
#endif
}

Status Bf16Supported() {
  if (!BuiltWithDnnl())
    return FailedPrecondition(
        "precision bf16 needs oneDNN, and this shardflow was built without it "
        "(install libdnnl-dev and configure again)");
  if (!CpuHasAvx512Bf16())
    return FailedPrecondition(
        "precision bf16 needs a CPU with AVX512_BF16, and this CPU does not have it (use fp32)");
  return Status::OK();
}

// include/shardflow/precision.h. MXCSR bit 15 is flush-to-zero, bit 6
// denormals-are-zero.
void FlushDenormalsToZero() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(_mm_getcsr() | 0x8040u);
#endif
}

}  // namespace sf
