#include "kernels/compute_pool.h"

#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/Tensor>

#include <atomic>
#include <thread>

namespace sf {

struct ComputePool::Impl {
  // allow_spinning = false: park idle threads instead of burning the core.
  explicit Impl(int n) : inter(n, /*allow_spinning=*/false), intra(n, false), device(&intra, n) {}
  Eigen::ThreadPool inter;
  Eigen::ThreadPool intra;
  Eigen::ThreadPoolDevice device;
};

ComputePool::ComputePool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (num_threads <= 0) num_threads = 1;
  num_threads_ = num_threads;
  impl_ = std::make_unique<Impl>(num_threads);
}

ComputePool::~ComputePool() = default;

void ComputePool::Schedule(std::function<void()> fn) { impl_->inter.Schedule(std::move(fn)); }

void ComputePool::ParallelFor(int64_t n, int64_t min_block,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (min_block < 1) min_block = 1;
  const int64_t blocks = std::min<int64_t>(num_threads_, (n + min_block - 1) / min_block);
  if (blocks <= 1) {
    fn(0, n);
    return;
  }
  const int64_t per = (n + blocks - 1) / blocks;
  // Blocks are claimed from a counter, so the caller does whatever the helpers
  // have not started: it never waits on work that is still queued.
  struct Shared {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex mu;
    std::condition_variable cv;
  };
  auto shared = std::make_shared<Shared>();
  auto work = [shared, blocks, per, n, &fn]() {
    for (;;) {
      const int64_t b = shared->next.fetch_add(1);
      if (b >= blocks) return;
      fn(b * per, std::min(n, (b + 1) * per));
      if (shared->done.fetch_add(1) + 1 == blocks) {
        std::lock_guard<std::mutex> l(shared->mu);
        shared->cv.notify_all();
      }
    }
  };
  for (int64_t b = 1; b < blocks; ++b) impl_->intra.Schedule(work);
  work();
  std::unique_lock<std::mutex> l(shared->mu);
  shared->cv.wait(l, [&] { return shared->done.load() == blocks; });
}

const Eigen::ThreadPoolDevice& ComputePool::eigen_device() const { return impl_->device; }

bool ComputePool::InPool() const { return impl_->inter.CurrentThreadId() != -1; }

}  // namespace sf
