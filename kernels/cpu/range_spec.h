// Range's length and its checks, shared by the Range shape function (when
// start, limit and delta are constants) and its kernel, so a bad range is
// refused the same way at graph construction and at run time.
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

// The number of values start, start + delta, ... before limit (excluded), as
// TensorFlow's Range: InvalidArgument for a zero delta, a delta pointing away
// from limit, a non-finite float, or a length past int64.
template <typename T>
Result<int64_t> RangeLength(T start, T limit, T delta) {
  auto str = [](T v) { return std::to_string(v); };
  if (delta == T(0)) return InvalidArgument("Range: delta must not be 0");
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
      return InvalidArgument("Range: start, limit and delta must be finite, got " + str(start) + ", " +
                             str(limit) + " and " + str(delta));
  }
  if (delta > T(0) && start > limit)
    return InvalidArgument("Range: start " + str(start) + " is above limit " + str(limit) + " with delta " +
                           str(delta) + " > 0");
  if (delta < T(0) && start < limit)
    return InvalidArgument("Range: start " + str(start) + " is below limit " + str(limit) + " with delta " +
                           str(delta) + " < 0");
  if constexpr (std::is_floating_point_v<T>) {
    const double n = std::ceil(std::fabs((static_cast<double>(limit) - static_cast<double>(start)) /
                                         static_cast<double>(delta)));
    if (!(n < 9.2e18)) return InvalidArgument("Range: " + str(start) + " to " + str(limit) + " by " + str(delta) +
                                              " has more than 2^63 values");
    return static_cast<int64_t>(n);
  } else {
    // In unsigned arithmetic: limit - start overflows T for the widest ranges.
    using U = std::make_unsigned_t<T>;
    const U span = delta > T(0) ? U(limit) - U(start) : U(start) - U(limit);
    const U step = delta > T(0) ? U(delta) : U(0) - U(delta);
    const U n = span / step + (span % step != 0 ? 1 : 0);
    if (n > static_cast<U>(std::numeric_limits<int64_t>::max()))
      return InvalidArgument("Range: " + str(start) + " to " + str(limit) + " has more than 2^63 values");
    return static_cast<int64_t>(n);
  }
}

// RangeLength of three scalar tensors of one dtype (int32, int64, float32
// or float64); InvalidArgument naming the input that is not such a scalar.
inline Result<int64_t> RangeLengthOf(const Tensor& start, const Tensor& limit, const Tensor& delta) {
  const Tensor* in[3] = {&start, &limit, &delta};
  const char* names[3] = {"start", "limit", "delta"};
  for (int i = 0; i < 3; ++i) {
    if (in[i]->num_elements() != 1 || in[i]->rank() > 1)
      return InvalidArgument(std::string("Range: ") + names[i] + " must be a scalar, got shape " +
                             ShapeString(in[i]->shape()));
    if (in[i]->dtype() != start.dtype())
      return InvalidArgument(std::string("Range: ") + names[i] + " is " + DTypeName(in[i]->dtype()) +
                             " but start is " + DTypeName(start.dtype()));
  }
  switch (start.dtype()) {
    case DType::kInt32: return RangeLength(start.data<int32_t>()[0], limit.data<int32_t>()[0], delta.data<int32_t>()[0]);
    case DType::kInt64: return RangeLength(start.data<int64_t>()[0], limit.data<int64_t>()[0], delta.data<int64_t>()[0]);
    case DType::kFloat32: return RangeLength(start.data<float>()[0], limit.data<float>()[0], delta.data<float>()[0]);
    case DType::kFloat64: return RangeLength(start.data<double>()[0], limit.data<double>()[0], delta.data<double>()[0]);
    default:
      return InvalidArgument(std::string("Range takes int32, int64, float32 or float64, got ") +
                             DTypeName(start.dtype()));
  }
}

}  // namespace sf
