// QueueRunner: keeps a queue fed by running enqueue steps concurrently (like
// TensorFlow's QueueRunner), so a training loop dequeues ready batches.
//
//   QueueRunnerOptions o;  o.parallel = 4;  o.close_target = "close";
//   QueueRunner r(session, {"enqueue"}, feeds, o);
//   r.Start();
//   for (auto b = session.Run({}, {"batch"}); b.ok(); b = session.Run({}, {"batch"})) { ... }
//   // the loop ends with OutOfRange once the queue is closed and drained
//   Status s = r.Join();
//
// Each of `parallel` loops runs one step (Session::RunAsync) and starts the
// next from that step's callback: no thread of its own, none blocked while a
// full queue makes an enqueue wait. A loop ends when its feed function says
// OutOfRange (input exhausted) or its step fails because the queue was closed
// (OutOfRange, Aborted); when every loop has ended normally the runner runs
// close_target, so consumers see OutOfRange after the last element.
// Thread-safety: Start, Stop and Join may be called from any thread; the feed
// function is called from runtime threads, concurrently for several loops.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "shardflow/session.h"

namespace sf {

struct QueueRunnerOptions {
  int parallel = 1;           // concurrent enqueue loops
  std::string close_target;   // run once every loop has ended normally ("" = none)
  std::string cancel_target;  // run by Stop() to wake enqueues waiting on a full queue ("" = none)
  // On a cluster: run when an enqueue step failed because the cluster moved
  // or lost a part of it (IsStaleShardMap, or Unavailable: a node died), so
  // the queue it filled may be gone with what it held; the loop then goes
  // on. For a shared input this is its release, handing the worker's chunks
  // back so their untrained rows are read again ("" = such a failure ends
  // the loop: Aborted normally, Unavailable as an error). A restart target
  // that fails so itself runs again (counted as a restart in a row).
  std::string restart_target;
  // Restarts in a row (no enqueue passing between) before the loop ends
  // with the last failure.
  int max_restarts = 20;
};

class QueueRunner {
 public:
  // The feeds of loop `loop`'s next step; OutOfRange ends that loop normally,
  // any other error ends it and is what Join returns. Null = no feeds.
  using FeedFn = std::function<Result<FeedMap>(int loop)>;

  // session: any kind (Session, ClusterSession). REQUIRES: it outlives the runner.
  QueueRunner(SessionInterface& session, std::vector<std::string> enqueue_targets, FeedFn feeds,
              QueueRunnerOptions options = {});
  // Stops and joins.
  ~QueueRunner();
  QueueRunner(const QueueRunner&) = delete;
  QueueRunner& operator=(const QueueRunner&) = delete;

  // Starts the loops; FailedPrecondition if already started.
  Status Start();
  // Asks every loop to end after its current step and runs cancel_target.
  void Stop();
  // Waits for every loop (and close_target) to finish; returns the first error
  // that was not the normal end of input (OK when none).
  Status Join();
  // Steps that succeeded so far.
  int64_t steps() const;
  // Times restart_target ran so far.
  int64_t restarts() const;

 private:
  void Next(int loop);
  // Runs restart_target after an enqueue of loop failed with why, then the loop's next step.
  void Restart(int loop, const Status& why);
  void EndLoop(const Status& s);

  SessionInterface& session_;
  const std::vector<std::string> targets_;
  const FeedFn feeds_;
  const QueueRunnerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;    // GUARDED_BY(mu_)
  bool stopping_ = false;   // GUARDED_BY(mu_)
  int running_ = 0;         // GUARDED_BY(mu_): loops plus the close step
  int64_t steps_ = 0;       // GUARDED_BY(mu_)
  int restarts_ = 0;        // GUARDED_BY(mu_): in a row
  int64_t restarted_ = 0;   // GUARDED_BY(mu_): in all
  bool closing_ = false;    // GUARDED_BY(mu_): close_target started
  Status error_;            // GUARDED_BY(mu_)
};

}  // namespace sf
