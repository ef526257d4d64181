// StridedSlice index arithmetic (Python slice semantics), shared by the
// StridedSlice / StridedSliceGrad shape functions and kernels so the graph and
// the kernels agree on every output shape.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

// One input axis of a strided slice: the first index read, the step, and how
// many elements are read (-1 when the input dim is unknown). A shrunk axis
// reads one element and is dropped from the output.
struct SliceAxis {
  int64_t begin = 0;
  int64_t stride = 1;
  int64_t size = 0;
  bool shrink = false;
};

struct StridedSliceSpec {
  std::vector<int64_t> begin, end, strides;
  int64_t begin_mask = 0, end_mask = 0, shrink_axis_mask = 0;
};

// Resolves spec against dims (entries may be -1 = unknown). The spec may be
// shorter than the rank: trailing axes are taken whole. InvalidArgument naming
// the problem on a zero stride, mismatched spec lengths, a spec longer than
// the rank, or a shrunk index out of range.
inline Status ResolveStridedSlice(const Shape& dims, const StridedSliceSpec& s,
                                  std::vector<SliceAxis>* axes) {
  const size_t n = s.begin.size();
  if (s.end.size() != n || s.strides.size() != n)
    return InvalidArgument("StridedSlice: begin, end and strides must have the same length, got " +
                           std::to_string(n) + ", " + std::to_string(s.end.size()) + " and " +
                           std::to_string(s.strides.size()));
  if (n > dims.size())
    return InvalidArgument("StridedSlice: slice spec of length " + std::to_string(n) +
                           " for an input of rank " + std::to_string(dims.size()) + " " +
                           ShapeString(dims));
  axes->assign(dims.size(), SliceAxis());
  for (size_t i = 0; i < dims.size(); ++i) {
    SliceAxis& a = (*axes)[i];
    const int64_t d = dims[i];
    if (i >= n) {  // not in the spec: the whole axis
      a.begin = 0;
      a.stride = 1;
      a.size = d;
      continue;
    }
    const int64_t st = s.strides[i];
    if (st == 0) return InvalidArgument("StridedSlice: stride of axis " + std::to_string(i) + " is 0");
    a.stride = st;
    if ((s.shrink_axis_mask >> i) & 1) {
      a.shrink = true;
      a.stride = 1;
      a.size = 1;
      int64_t b = s.begin[i];
      if (d < 0) {
        a.begin = b;  // unknown dim: resolved when the kernel sees the real shape
        if (b < 0) a.size = -1;
        continue;
      }
      if (b < 0) b += d;
      if (b < 0 || b >= d)
        return InvalidArgument("StridedSlice: index " + std::to_string(s.begin[i]) +
                               " of shrunk axis " + std::to_string(i) + " is out of range for dim " +
                               std::to_string(d) + " of input " + ShapeString(dims));
      a.begin = b;
      continue;
    }
    if (d < 0) {
      a.begin = s.begin[i];
      a.size = -1;
      continue;
    }
    // Python semantics: negative indices count from the end, then clamp to
    // the valid range for the direction of the stride.
    auto norm = [&](int64_t v, bool masked, bool is_begin) {
      if (masked) return st > 0 ? (is_begin ? int64_t{0} : d) : (is_begin ? d - 1 : int64_t{-1});
      if (v < 0) v += d;
      const int64_t lo = st > 0 ? 0 : -1, hi = st > 0 ? d : d - 1;
      return v < lo ? lo : (v > hi ? hi : v);
    };
    const int64_t b = norm(s.begin[i], (s.begin_mask >> i) & 1, true);
    const int64_t e = norm(s.end[i], (s.end_mask >> i) & 1, false);
    // ceil(span / |stride|) without overflow: |stride| may be near 2^63 (and
    // -stride overflows for INT64_MIN), while span is within [-1 - d, d + 1].
    const int64_t span = st > 0 ? e - b : b - e;
    const uint64_t step = st > 0 ? static_cast<uint64_t>(st) : uint64_t{0} - static_cast<uint64_t>(st);
    a.begin = b;
    a.size = span <= 0 ? 0 : static_cast<int64_t>(1 + static_cast<uint64_t>(span - 1) / step);
  }
  return Status::OK();
}

// The output shape of a resolved slice (shrunk axes dropped).
inline Shape StridedSliceOutputShape(const std::vector<SliceAxis>& axes) {
  Shape out;
  for (const SliceAxis& a : axes)
    if (!a.shrink) out.push_back(a.size);
  return out;
}

}  // namespace sf
