// Pad's modes and their limits, shared by the Pad / MirrorPadGrad shape
// functions and kernels so a bad padding is refused the same way at graph
// construction (dims known) and at run time (dims known only then).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

// TensorFlow's modes: CONSTANT pads zeros; REFLECT mirrors x without its
// edge value ([1,2,3] padded (2,2) is [3,2,1,2,3,2,1]); SYMMETRIC mirrors it
// with the edge ([2,1,1,2,3,3,2]).
enum class PadMode { kConstant, kReflect, kSymmetric };

inline Result<PadMode> ParsePadMode(const std::string& mode) {
  if (mode == "CONSTANT") return PadMode::kConstant;
  if (mode == "REFLECT") return PadMode::kReflect;
  if (mode == "SYMMETRIC") return PadMode::kSymmetric;
  return InvalidArgument("Pad: attr mode must be CONSTANT, REFLECT or SYMMETRIC, got '" + mode + "'");
}

inline const char* PadModeName(PadMode m) {
  return m == PadMode::kConstant ? "CONSTANT" : m == PadMode::kReflect ? "REFLECT" : "SYMMETRIC";
}

// Checks axis i's (before, after) in `paddings` against the input dim d: a
// mirror reads its values from x, so REFLECT needs each < d and SYMMETRIC
// each <= d. A padding of 0 reads nothing and is allowed on any dim (as in
// NumPy; an empty dim can then be "padded" by 0 in any mode).
inline Status CheckPadding(PadMode mode, const std::vector<int64_t>& paddings, size_t i, int64_t d) {
  if (mode == PadMode::kConstant) return Status::OK();
  const int64_t limit = mode == PadMode::kReflect ? d - 1 : d;
  for (int64_t p : {paddings[2 * i], paddings[2 * i + 1]}) {
    if (p > 0 && p > limit)
      return InvalidArgument(std::string("Pad: ") + PadModeName(mode) + " padding " +
                             std::to_string(p) + " of dim " + std::to_string(i) + " (size " +
                             std::to_string(d) + ") must be " +
                             (mode == PadMode::kReflect ? "< " : "<= ") + "the dim's size");
  }
  return Status::OK();
}

// The padded size of a dim of size d: before + d + after, or
// InvalidArgument when a padding is negative or the sum overflows int64.
inline Result<int64_t> PaddedDim(size_t i, int64_t d, int64_t before, int64_t after) {
  if (before < 0 || after < 0)
    return InvalidArgument("Pad: padding (" + std::to_string(before) + ", " + std::to_string(after) + ") of dim " +
                           std::to_string(i) + " must be >= 0");
  int64_t out;
  if (__builtin_add_overflow(d, before, &out) || __builtin_add_overflow(out, after, &out))
    return InvalidArgument("Pad: padding (" + std::to_string(before) + ", " + std::to_string(after) + ") of dim " +
                           std::to_string(i) + " (size " + std::to_string(d) + ") overflows int64");
  return out;
}

// The index of x that output index o (0 <= o < before + d + after) of a
// mirrored pad of a dim of size d reads. REQUIRES: CheckPadding passed, d > 0.
inline int64_t MirrorIndex(PadMode mode, int64_t o, int64_t before, int64_t d) {
  int64_t i = o - before;
  if (mode == PadMode::kReflect) {
    if (i < 0) i = -i;
    else if (i >= d) i = 2 * (d - 1) - i;
  } else {
    if (i < 0) i = -i - 1;
    else if (i >= d) i = 2 * d - 1 - i;
  }
  return i;
}

}  // namespace sf
