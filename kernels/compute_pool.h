// ComputePool: the process's compute threads, shared by every partition of a
// session: ready ops run here, and kernels split big work here through Eigen.
//
// Two sets of threads, each sized to the cores: inter-op threads run ready
// ops (Schedule), intra-op threads split one big op (ParallelFor, the Eigen
// device). They are separate because an op blocks while its intra-op work
// runs; sharing one set deadlocks when every thread waits on its own split
// (TensorFlow splits its pools for the same reason). Idle threads park (block
// on a condition variable), never spin: on the target VMs a spinning pool
// stalls for milliseconds at a time.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <functional>
#include <memory>

namespace Eigen {
struct ThreadPoolDevice;
}

namespace sf {

class ComputePool {
 public:
  // num_threads <= 0 means "one per core".
  explicit ComputePool(int num_threads = 0);
  ~ComputePool();
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  int num_threads() const { return num_threads_; }
  // Runs fn on an inter-op thread.
  void Schedule(std::function<void()> fn);
  // Splits [0, n) into blocks of at least min_block and runs fn(begin, end) on
  // them in parallel on the intra-op threads and the caller; returns when all
  // are done. Runs inline for small n. Safe to call from any thread.
  void ParallelFor(int64_t n, int64_t min_block, const std::function<void(int64_t, int64_t)>& fn);
  // The Eigen device that parallelises tensor expressions over this pool.
  const Eigen::ThreadPoolDevice& eigen_device() const;
  // True when called from one of the inter-op threads.
  bool InPool() const;

 private:
  struct Impl;
  int num_threads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sf
