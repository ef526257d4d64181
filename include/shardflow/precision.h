// Mixed precision: which products of a graph run in bf16.
//
// Precision is an attribute of the ops that multiply (MatMul, Conv2D,
// Conv2DBackpropInput, Conv2DBackpropFilter): "fp32" (the default), "bf16"
// or "bf16_always". bf16 converts both inputs to bf16, accumulates in fp32
// and writes an fp32 result. "bf16" does so where it pays: each product shape
// runs in bf16 and in fp32 on its first three calls each and keeps the
// faster, so on a CPU where bf16 products lose (AVX512_BF16 without AMX) the
// model is never slower than in fp32; "bf16_always" runs bf16 whatever it
// costs (bf16 rounding on every run, for tests and reproducible runs). Tensors, variables (the master weights) and every other op stay fp32,
// so no Cast nodes are added and a checkpoint does not depend on precision.
// The attribute travels with the graph (graph files, cluster partitions), and
// gradients built from a bf16 node are bf16 too. bf16 runs only where the CPU
// has AVX512_BF16 and the build has oneDNN; elsewhere it is refused (graph
// rewrite or kernel creation), never emulated.
//
//   sf::Graph g;  ... build the model, then the optimizer ...
//   SF_RETURN_IF_ERROR(sf::SetComputePrecision(g, "bf16"));
//   sf::Session s(g);
#pragma once

#include <string>

#include "shardflow/graph.h"
#include "shardflow/status.h"

namespace sf {

// OK when `precision` ("fp32", "bf16" or "bf16_always") can run on this machine; InvalidArgument
// for another name, FailedPrecondition saying what bf16 lacks here (the CPU's
// AVX512_BF16 or oneDNN in the build).
Status CheckComputePrecision(const std::string& precision);

// Sets attr precision on every float32 MatMul, Conv2D, Conv2DBackpropInput and
// Conv2DBackpropFilter node of g, and returns how many it set. Call it after
// the gradients and the optimizer are built (they add products too) and before
// a session is made from g. Errors as CheckComputePrecision, leaving g unchanged.
Result<int> SetComputePrecision(Graph& g, const std::string& precision);

// Flushes float results below 2^-126 to zero and reads such inputs as zero
// (x86 MXCSR FTZ and DAZ) on the calling thread and every thread it starts
// later (threads inherit the floating-point environment), as TensorFlow's
// compute threads do. Denormals cost about 100 cycles an operation: Adam's
// squared gradients reach them, and DLRM's Adam took twice its time. Call it
// at the top of main, before any session (and its threads) is made.
// Process-wide opt-in like KeepTensorMemoryWarm: the library never changes
// its host's floating-point mode by itself. A no-op off x86.
void FlushDenormalsToZero();

}  // namespace sf
