// What this CPU and this build can do, asked once at run time: the bf16
// kernels need both an AVX512_BF16 CPU (cpuid) and oneDNN in the build.
// Thread-safety: every function may be called from any thread.
#pragma once

#include "shardflow/status.h"

namespace sf {

// True when the CPU reports AVX512_BF16 (cpuid leaf 7, subleaf 1, EAX bit 5).
bool CpuHasAvx512Bf16();

// True when shardflow was built with oneDNN (libdnnl-dev found by CMake).
bool BuiltWithDnnl();

// OK when bf16 matmuls and convolutions can run here; FailedPrecondition
// saying what is missing (the CPU feature or oneDNN) otherwise.
Status Bf16Supported();

}  // namespace sf
