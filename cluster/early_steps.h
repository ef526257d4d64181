// EarlySteps: the steps peers sent tensors or aborts for that run no
// partition on this node (yet: a peer's tensor may beat the session's
// RunPartition), and the steps whose session ended them here. What early
// steps hold is bounded (Limits: how many, how many bytes) and expires
// after Limits::ttl_ms, so a peer cannot fill a node with steps that never
// run; a tensor for an ended step (a late send of an aborted step, or a
// peer's junk) is refused, not held. A part of ClusterNode
// (cluster/node_impl.h) with one job and its own lock; time is passed in.
//
// Thread-safety: every method may be called from any thread. The lock is
// held for the method only and calls out to nothing; where the node's `mu`
// is held too it is taken first (mu, then this lock; never the reverse).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "shardflow/status.h"

namespace sf {
namespace cluster {

class EarlySteps {
 public:
  struct Limits {
    size_t max_steps = 4096;                  // early steps held at once
    int64_t max_bytes = int64_t{1} << 30;     // bytes their tensors hold, over all
    int64_t ttl_ms = 60000;                   // an early step never run is forgotten after this
    size_t max_ended = 65536;                 // ended steps remembered (the latest)
  };
  // node names the node in errors.
  EarlySteps(std::string node, Limits limits);

  // Admits `bytes` more for step, which runs nothing here now, at now_ms;
  // FailedPrecondition when the step has ended here, ResourceExhausted when
  // it is new and max_steps are held or the bytes would pass max_bytes.
  Status Admit(int64_t step, int64_t bytes, int64_t now_ms);
  // Forgets step's early state (it runs here now: its tensors are the step's).
  void Forget(int64_t step);
  // Forgets step's early state and remembers it as ended (the latest max_ended).
  void End(int64_t step);
  // Forgets the early steps admitted ttl_ms or more before now_ms; which they were.
  std::vector<int64_t> Expire(int64_t now_ms);

  // How many early steps are held, and the bytes they hold (tests, logs).
  size_t size() const;
  int64_t bytes() const;

 private:
  struct Early {
    int64_t first_ms = 0;
    int64_t bytes = 0;
  };
  void ForgetLocked(int64_t step);

  const std::string node_;
  const Limits limits_;
  mutable std::mutex mu_;
  std::map<int64_t, Early> early_;             // GUARDED_BY(mu_)
  int64_t bytes_ = 0;                          // GUARDED_BY(mu_)
  std::unordered_set<int64_t> ended_;          // GUARDED_BY(mu_)
  std::deque<int64_t> ended_order_;            // GUARDED_BY(mu_): oldest first
};

}  // namespace cluster
}  // namespace sf
