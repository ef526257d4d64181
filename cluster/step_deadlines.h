// StepDeadlines: a session's no-progress deadlines for the partitions it
// runs on nodes. A step's partitions share one deadline: it restarts when
// any of them reports progress (net::StepProgress: ops finished on a node)
// or starts, and a run whose step went timeout_ms without either is
// expired (its callback fails it with DeadlineExceeded). A step that
// computes for an hour keeps running; one whose ops all wait (an empty
// queue, a tensor that never comes, a wedged node) fails after timeout_ms.
// Thread-safety: every method may be called from any thread; expiries run
// on the watcher's own thread, outside its lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace sf {
namespace runtime {

class StepDeadlines {
 public:
  // Deadlines of timeout_ms (> 0); the watcher thread starts with the first run.
  explicit StepDeadlines(int timeout_ms);
  // Stops the watcher; runs still watched never expire.
  ~StepDeadlines();
  StepDeadlines(const StepDeadlines&) = delete;
  StepDeadlines& operator=(const StepDeadlines&) = delete;

  int timeout_ms() const { return timeout_ms_; }
  // How often a node should report progress for the deadline to hold.
  int report_ms() const;

  // Watches one run of step and restarts the step's deadline; expire (once,
  // with the idle time in ms) when it passes. The token is for Finish.
  uint64_t Watch(int64_t step, std::function<void(int64_t idle_ms)> expire);
  // Restarts step's deadline (no-op for a step not watched).
  void Progress(int64_t step);
  // Stops watching the run of token (no-op when it expired already).
  void Finish(uint64_t token);

 private:
  void Loop();
  static int64_t NowMs();

  struct Run {
    int64_t step = 0;
    std::function<void(int64_t)> expire;
  };
  struct Step {
    int64_t last_ms = 0;
    int runs = 0;
  };
  const int timeout_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                // GUARDED_BY(mu_)
  uint64_t next_token_ = 1;              // GUARDED_BY(mu_)
  std::map<uint64_t, Run> runs_;         // GUARDED_BY(mu_)
  std::map<int64_t, Step> steps_;        // GUARDED_BY(mu_)
  std::thread thread_;                   // GUARDED_BY(mu_) until started
};

}  // namespace runtime
}  // namespace sf
