// PrecisionChoice: what precision "bf16" does on a CPU where bf16 does not
// pay. Without AMX, oneDNN's bf16 products gain little and can lose (an MLP
// step at 0.59x of fp32 on an Intel Xeon with AVX512_BF16 only), and which
// products lose depends on the CPU and the shape. So a bf16 product is timed
// both ways on its first calls of each shape and keeps the faster: bf16
// where it pays, fp32 (exact, and never slower) where it does not. A user
// asking for bf16 never gets a slower model; precision "bf16_always" skips
// the choice (tests, and runs that want bf16 rounding whatever it costs).
//
// Thread-safety: every method may be called from several threads at once
// (two steps may run one kernel together).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "kernels/cpu/dnnl_engines.h"

namespace sf {
namespace nn {

class PrecisionChoice {
 public:
  // Monotonic nanoseconds; the steady clock unless a test passes its own.
  using Clock = std::function<int64_t()>;
  static int64_t SteadyNanos();

  // Shapes measured per object; a later new shape runs bf16 unmeasured.
  static constexpr size_t kMaxShapes = 256;

  // trials: timed calls of each precision per shape before it decides.
  explicit PrecisionChoice(Clock clock = SteadyNanos, int trials = 3);

  // Runs run(precision) for the product of shape `key`: while the shape is
  // being measured, bf16 and fp32 in turn (bf16 first), timed by the clock;
  // then the faster one, for good (past kMaxShapes shapes, bf16 unmeasured).
  // Returns what run returned; a failed run is not counted.
  Status Run(const std::vector<int64_t>& key, const std::function<Status(Precision)>& run);

  // The decision for `key`: kBf16 or kFp32, or null while still measuring.
  const Precision* Decided(const std::vector<int64_t>& key) const;

 private:
  struct Entry {
    int runs[2] = {0, 0};           // by Precision
    int64_t best[2] = {-1, -1};     // fastest run in ns, by Precision (-1: none yet)
    bool decided = false;
    Precision choice = Precision::kBf16;
  };
  Clock clock_;
  int trials_;
  mutable std::mutex mu_;
  std::map<std::vector<int64_t>, Entry> shapes_;  // guarded by mu_
};

}  // namespace nn
}  // namespace sf
