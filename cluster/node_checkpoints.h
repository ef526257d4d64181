// NodeCheckpoints: a node's part in node checkpoints, where every node
// writes and reads the variables of its own tasks under its
// --checkpoint-dir, so a model's values never pass through a client
// (ClusterSession::SaveOnNodes, RestoreFromNodes, and Recover with
// ClusterOptions::node_checkpoint_dir).
//
// On disk, under ROOT/DIR (DIR relative, as the in-graph checkpoint ops'):
//   pieces-TOKEN/task-T   one checkpoint store per task: the task's variables, whole
//   index                 a checkpoint store of records: one per committed
//                         checkpoint (its id), holding the token and task count
// A checkpoint exists once its record is committed; pieces of a save that
// never committed are never read. A restore onto another node than the
// writer needs ROOT on storage both see (one machine, or a shared file system).
//
// Thread-safety: Post may be called from any thread; requests run one at a
// time, in order, on the object's own thread (disk work never holds a
// connection's handler thread).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net/messages.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {
namespace cluster {

class NodeCheckpoints {
 public:
  using Values = std::vector<std::pair<std::string, Tensor>>;
  struct Hooks {
    std::string root;       // the node's --checkpoint-dir; "" refuses every request
    std::string node_name;  // for errors
    // The initialised variables among names, to done (any thread).
    std::function<void(const std::vector<std::string>& names, std::function<void(Values)> done)> read;
    // Assigns values (defining new variables), then done(first error).
    std::function<void(Values values, std::function<void(Status)> done)> assign;
  };

  explicit NodeCheckpoints(Hooks hooks);
  // Stop().
  ~NodeCheckpoints();

  // What a queued request's caller gets, on this object's thread.
  using Done = std::function<void(Result<net::ShardsDone>)>;
  // Queue a request (run as Save, Commit or Restore); done gets its
  // ShardsDone or the error. ResourceExhausted when kMaxQueued requests
  // wait already; Unavailable after Stop.
  Status Post(net::SaveShards r, Done done);
  Status Post(net::CommitShards r, Done done);
  Status Post(net::RestoreShards r, Done done);
  // Answers what waits with Unavailable and joins the thread; idempotent.
  void Stop();

  // The requests themselves, on the caller's thread (Post runs these).
  Result<net::ShardsDone> Save(const net::SaveShards& r);
  Result<net::ShardsDone> Commit(const net::CommitShards& r);
  Result<net::ShardsDone> Restore(const net::RestoreShards& r);

  static constexpr size_t kMaxQueued = 16;

 private:
  struct Job {
    std::function<Result<net::ShardsDone>()> work;
    Done done;
  };
  Status Queue(Job job);
  void Loop();
  // ROOT/dir, checked; FailedPrecondition without a root.
  Result<std::string> Dir(const std::string& dir) const;
  // One variable read through the hook (absent: not initialised here).
  std::optional<Tensor> ReadOne(const std::string& name);

  const Hooks hooks_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;    // GUARDED_BY(mu_)
  std::deque<Job> jobs_;    // GUARDED_BY(mu_)
  std::thread thread_;      // started by the first Post
};

// The directory of piece `task` of checkpoint `token` in dir ("" root-relative).
std::string PiecePath(const std::string& dir, uint64_t token, int task);

}  // namespace cluster
}  // namespace sf
