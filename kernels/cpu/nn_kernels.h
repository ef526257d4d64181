// Internal to the NN kernel files: window geometry shared by convolution and
// pooling, and the registration functions of each NN kernel file.
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace sf {
namespace nn {

// Geometry of one NHWC windowed op (convolution or pooling).
struct Window {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input
  int64_t kh = 1, kw = 1;              // window
  int64_t sh = 1, sw = 1;              // strides
  int64_t oh = 0, ow = 0;              // output
  int64_t pad_top = 0, pad_left = 0;   // SAME padding before the data
};

// Attrs of a windowed op parsed once per kernel.
struct WindowAttrs {
  std::vector<int64_t> ksize = {1, 1, 1, 1};
  std::vector<int64_t> strides = {1, 1, 1, 1};
  bool same = false;
};

// Parses strides, padding and (when with_ksize) ksize; InvalidArgument naming the attr.
Status ParseWindowAttrs(const KernelInit& init, bool with_ksize, WindowAttrs* out);

// Fills the output size and padding of `w` (input and window already set),
// first clamping each stride to its axis's extent (the same output);
// InvalidArgument naming the shapes when a VALID window does not fit a
// non-empty input.
Status ComputeWindow(bool same, Window* w);

// The 4 dims held by an int32/int64 shape tensor; InvalidArgument otherwise.
Status ShapeFromTensor(const Tensor& t, const char* what, Shape* out);

}  // namespace nn

void RegisterMatMulKernels(KernelRegistry& reg);
void RegisterConvKernels(KernelRegistry& reg);
void RegisterPoolKernels(KernelRegistry& reg);

}  // namespace sf
