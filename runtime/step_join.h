// StepJoin: joins the partitions of one step, for the local and the cluster
// coordinator alike. Each partition reports once (its status and fetches).
// The first failure aborts the step's other partitions (once); when every
// partition has reported and that abort has been sent, the step finishes:
// cleanup, then done with the fetches in the step's order, or the error.
// Among errors the first real cause beats the Aborted it caused elsewhere.
// Thread-safety: Report may be called from many threads at once.
#pragma once

#include <functional>
#include <mutex>
#include <vector>

#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {
namespace runtime {

class StepJoin {
 public:
  using DoneFn = std::function<void(Result<std::vector<Tensor>>)>;
  // partitions >= 1 will report; abort (may be null) gets the first error;
  // cleanup (may be null) runs once before done.
  StepJoin(int partitions, size_t num_fetches, DoneFn done, std::function<void(const Status&)> abort,
           std::function<void()> cleanup);
  // One partition's result; its i-th output is the step's fetch fetch_index[i].
  void Report(Status s, std::vector<Tensor> out, const std::vector<int>& fetch_index);

 private:
  std::mutex mu_;
  int remaining_;                // GUARDED_BY(mu_)
  Status status_;                // GUARDED_BY(mu_)
  bool aborted_ = false;         // GUARDED_BY(mu_): the abort was started
  bool aborting_ = false;        // GUARDED_BY(mu_): ... and is being sent
  std::vector<Tensor> fetches_;  // GUARDED_BY(mu_)
  DoneFn done_;
  std::function<void(const Status&)> abort_;
  std::function<void()> cleanup_;
};

}  // namespace runtime
}  // namespace sf
