#include "kernels/cpu/precision_choice.h"

#include <chrono>

namespace sf {
namespace nn {

int64_t PrecisionChoice::SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

PrecisionChoice::PrecisionChoice(Clock clock, int trials) : clock_(std::move(clock)), trials_(trials < 1 ? 1 : trials) {}

Status PrecisionChoice::Run(const std::vector<int64_t>& key, const std::function<Status(Precision)>& run) {
  Precision p;
  bool measure = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = shapes_.find(key);
    // A kernel fed ever new shapes measures only the first kMaxShapes
    // (bounded memory); the rest run as asked.
    if (it == shapes_.end() && shapes_.size() < kMaxShapes) it = shapes_.emplace(key, Entry{}).first;
    if (it == shapes_.end()) {
      p = Precision::kBf16;
    } else if (it->second.decided) {
      p = it->second.choice;  // the steady state: one lookup, no timing
    } else {
      // The one with fewer runs so far; bf16 on a tie, so the first call is what was asked for.
      const Entry& e = it->second;
      p = e.runs[static_cast<int>(Precision::kFp32)] < e.runs[static_cast<int>(Precision::kBf16)]
              ? Precision::kFp32
              : Precision::kBf16;
      measure = true;
    }
  }
  if (!measure) return run(p);  // unlocked: kernels run concurrently
  const int64_t t0 = clock_();
  Status s = run(p);
  const int64_t took = clock_() - t0;
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> l(mu_);
  Entry& e = shapes_[key];
  if (e.decided) return s;
  const int i = static_cast<int>(p);
  ++e.runs[i];
  if (e.best[i] < 0 || took < e.best[i]) e.best[i] = took;
  const int b = static_cast<int>(Precision::kBf16), f = static_cast<int>(Precision::kFp32);
  if (e.runs[b] >= trials_ && e.runs[f] >= trials_) {
    e.decided = true;
    // The fastest of each (the first calls pay for building plans and
    // warming caches): bf16 only where it is strictly faster.
    e.choice = e.best[b] < e.best[f] ? Precision::kBf16 : Precision::kFp32;
  }
  return s;
}

const Precision* PrecisionChoice::Decided(const std::vector<int64_t>& key) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = shapes_.find(key);
  return it != shapes_.end() && it->second.decided ? &it->second.choice : nullptr;
}

}  // namespace nn
}  // namespace sf
