// ProgressReports: the steps whose client asked for progress reports
// (RunPartition.progress_ms). The executor counts the ops a watched run
// finishes; Report, run by the node's timer loop with the time now, tells
// the client of each run that finished an op since its last report, at most
// every interval, so the client's no-progress deadline restarts. A part of
// ClusterNode (cluster/node_impl.h) with one job and its own lock; time is
// passed in.
//
// Thread-safety: every method may be called from any thread; `tell` is
// called outside the lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace sf {
namespace cluster {

class ProgressReports {
 public:
  // One watched run.
  class Watch {
   public:
    // Ops finished since the last report: the executor adds to it.
    std::atomic<uint64_t> finished{0};

   private:
    friend class ProgressReports;
    int interval_ms = 0;
    int64_t reported_ms = 0;
    uint64_t reports = 0;
    std::function<void(uint64_t reports)> tell;
  };

  // min_interval_ms (> 0): the shortest interval a run gets, whatever its client asked.
  explicit ProgressReports(int min_interval_ms);

  // Watches a run from now_ms: tell(the reports so far) at most every
  // interval_ms (raised to the minimum) while its ops finish; the handle
  // for Remove and for the executor's count.
  std::shared_ptr<Watch> Add(int interval_ms, int64_t now_ms, std::function<void(uint64_t reports)> tell);
  // Stops watching w (its run ended); no-op when it is not watched.
  void Remove(const std::shared_ptr<Watch>& w);
  // Tells each run whose interval passed by now_ms and that finished an op
  // since its last report; when Report should run next: half the shortest
  // interval watched from now (a report is at most that late), INT64_MAX
  // when nothing is watched.
  int64_t Report(int64_t now_ms);
  // How many runs are watched (tests, logs).
  size_t size() const;

 private:
  const int min_interval_ms_;
  mutable std::mutex mu_;
  std::map<const Watch*, std::shared_ptr<Watch>> watched_;  // GUARDED_BY(mu_)
};

}  // namespace cluster
}  // namespace sf
