#include "shardflow/queue_runner.h"

#include "shardflow/cluster.h"

namespace sf {

QueueRunner::QueueRunner(SessionInterface& session, std::vector<std::string> enqueue_targets, FeedFn feeds,
                         QueueRunnerOptions options)
    : session_(session), targets_(std::move(enqueue_targets)), feeds_(std::move(feeds)),
      options_(std::move(options)) {}

QueueRunner::~QueueRunner() {
  Stop();
  (void)Join();
}

Status QueueRunner::Start() {
  if (options_.parallel < 1)
    return InvalidArgument("QueueRunner needs parallel >= 1, got " + std::to_string(options_.parallel));
  if (targets_.empty()) return InvalidArgument("QueueRunner needs at least one enqueue target");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (started_) return FailedPrecondition("QueueRunner was already started");
    started_ = true;
    running_ = options_.parallel;
  }
  for (int i = 0; i < options_.parallel; ++i) Next(i);
  return Status::OK();
}

void QueueRunner::Next(int loop) {
  bool stop;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop = stopping_;
  }
  if (stop) return EndLoop(Status::OK());  // ended by Stop: not an error
  FeedMap feeds;
  if (feeds_) {
    Result<FeedMap> f = feeds_(loop);
    if (!f.ok()) return EndLoop(f.status());
    feeds = std::move(f).value();
  }
  session_.RunAsync(feeds, {}, targets_, [this, loop](Result<std::vector<Tensor>> r) {
    if (!r.ok()) {
      const Status& s = r.status();
      if (!options_.restart_target.empty() && (IsStaleShardMap(s) || s.code() == Code::kUnavailable))
        return Restart(loop, s);
      return EndLoop(s);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      ++steps_;
      restarts_ = 0;
    }
    Next(loop);
  });
}

void QueueRunner::Restart(int loop, const Status& why) {
  bool stop = false;
  int in_a_row = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop = stopping_;
    in_a_row = ++restarts_;
    if (!stop && in_a_row <= options_.max_restarts) ++restarted_;
  }
  if (stop) return EndLoop(Status::OK());  // ended by Stop: not an error
  if (in_a_row > options_.max_restarts)
    return EndLoop(Unavailable("QueueRunner: the enqueue failed " + std::to_string(in_a_row) +
                               " times in a row as the cluster moved or lost its parts, last with " +
                               why.ToString()));
  session_.RunAsync({}, {}, {options_.restart_target}, [this, loop, why](Result<std::vector<Tensor>> r) {
    if (r.ok()) return Next(loop);
    // The release may meet the same move (its part is refused at the old
    // holder): it runs again on the new map. Going on without it would leave
    // the worker's chunks leased to a reader that no longer reads them, held
    // from every other worker until their lease ends.
    if (IsStaleShardMap(r.status()) || r.status().code() == Code::kUnavailable) return Restart(loop, r.status());
    EndLoop(r.status().WithPrefix("QueueRunner restart target '" + options_.restart_target + "' after " +
                                  why.ToString()));
  });
}

void QueueRunner::EndLoop(const Status& s) {
  // The normal ends: input exhausted, or the queue closed (or its pending
  // enqueue cancelled) under the loop.
  const bool normal = s.ok() || s.code() == Code::kOutOfRange || s.code() == Code::kAborted;
  std::unique_lock<std::mutex> l(mu_);
  if (!normal && error_.ok()) error_ = s;
  if (--running_ > 0 || closing_ || options_.close_target.empty()) {
    cv_.notify_all();
    return;
  }
  closing_ = true;
  ++running_;
  l.unlock();
  session_.RunAsync({}, {}, {options_.close_target}, [this](Result<std::vector<Tensor>> r) {
    std::lock_guard<std::mutex> g(mu_);
    if (!r.ok() && r.status().code() != Code::kAborted && error_.ok())
      error_ = r.status().WithPrefix("QueueRunner close target '" + options_.close_target + "'");
    --running_;
    cv_.notify_all();
  });
}

void QueueRunner::Stop() {
  std::unique_lock<std::mutex> l(mu_);
  if (stopping_) return;
  stopping_ = true;
  if (!started_ || options_.cancel_target.empty() || running_ == 0) return;
  ++running_;
  l.unlock();
  session_.RunAsync({}, {}, {options_.cancel_target}, [this](Result<std::vector<Tensor>> r) {
    std::lock_guard<std::mutex> g(mu_);
    if (!r.ok() && r.status().code() != Code::kAborted && error_.ok())
      error_ = r.status().WithPrefix("QueueRunner cancel target '" + options_.cancel_target + "'");
    --running_;
    cv_.notify_all();
  });
}

Status QueueRunner::Join() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return running_ == 0; });
  return error_;
}

int64_t QueueRunner::restarts() const {
  std::lock_guard<std::mutex> l(mu_);
  return restarted_;
}

int64_t QueueRunner::steps() const {
  std::lock_guard<std::mutex> l(mu_);
  return steps_;
}

}  // namespace sf
