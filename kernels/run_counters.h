// RunCounters: how many times each stateful node of a session has run, kept
// by whoever hosts the session's partitions, not by a kernel. A session
// builds new executors (new kernels) for every new set of feeds and fetches,
// so a seeded random op counting its runs in its kernel restarted its
// sequence for each one; TensorFlow shares such kernels across a session's
// executors for the same reason. SeedFromNodeName gives an unseeded node
// its own seed.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace sf {

// The seed of a random node whose seed attr is 0 (as a graph written by
// hand or by another front end may leave it): a stable hash (FNV-1a) of its
// name, so two such nodes draw different numbers, the same in every run.
inline uint64_t SeedFromNodeName(const std::string& node) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : node) h = (h ^ c) * 1099511628211ULL;
  return h == 0 ? 1 : h;
}

class RunCounters {
 public:
  // The run counter of the node named `node`, starting at 0; every call with
  // that name returns the same counter. Never fails.
  std::shared_ptr<std::atomic<uint64_t>> For(const std::string& node) {
    std::lock_guard<std::mutex> l(mu_);
    auto& c = counters_[node];
    if (!c) c = std::make_shared<std::atomic<uint64_t>>(0);
    return c;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<std::atomic<uint64_t>>> counters_;  // GUARDED_BY(mu_)
};

}  // namespace sf
