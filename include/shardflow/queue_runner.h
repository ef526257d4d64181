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

 private:
  void Next(int loop);
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
  bool closing_ = false;    // GUARDED_BY(mu_): close_target started
  Status error_;            // GUARDED_BY(mu_)
};

}  // namespace sf
