#include "runtime/step_join.h"

namespace sf {
namespace runtime {

StepJoin::StepJoin(int partitions, size_t num_fetches, DoneFn done, std::function<void(const Status&)> abort,
                   std::function<void()> cleanup)
    : remaining_(partitions), fetches_(num_fetches), done_(std::move(done)), abort_(std::move(abort)),
      cleanup_(std::move(cleanup)) {}

void StepJoin::Report(Status s, std::vector<Tensor> out, const std::vector<int>& fetch_index) {
  if (s.ok() && out.size() != fetch_index.size())
    s = Internal("a partition returned " + std::to_string(out.size()) + " fetches, expected " +
                 std::to_string(fetch_index.size()));
  bool abort = false, last;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!s.ok() && (status_.ok() || (status_.code() == Code::kAborted && s.code() != Code::kAborted)))
      status_ = s;
    if (!s.ok() && !aborted_) abort = aborted_ = aborting_ = true;
    if (s.ok())
      for (size_t i = 0; i < out.size(); ++i) fetches_[fetch_index[i]] = std::move(out[i]);
    // While the abort is being sent its sender finishes the step, so a
    // cleanup never overtakes the abort it follows.
    last = --remaining_ == 0 && !aborting_;
  }
  if (abort) {
    if (abort_) abort_(s);
    std::lock_guard<std::mutex> l(mu_);
    aborting_ = false;
    last = remaining_ == 0;
  }
  if (!last) return;
  if (cleanup_) cleanup_();
  // Reads without the lock: every partition has reported and no abort is in flight.
  if (!status_.ok()) done_(status_);
  else done_(std::move(fetches_));
}

}  // namespace runtime
}  // namespace sf
