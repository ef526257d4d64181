// RunCounters: how many times each stateful node of a session has run, kept
// by whoever hosts the session's partitions, not by a kernel. A session
// builds new executors (new kernels) for every new set of feeds and fetches,
// so a seeded random op counting its runs in its kernel restarted its
// sequence for each one; TensorFlow shares such kernels across a session's
// executors for the same reason. NodeNameSeed gives an unseeded node
// its own seed. A stateful node whose state is more than a count (a reader's
// threads and position) keeps it here too (NodeState).
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace sf {

// The seed a random node named `node` gets when none is given: a stable
// hash (FNV-1a) of the name, positive and never 0, so distinct nodes draw
// different numbers, the same in every run. The graph builders use it
// (SeedFromNodeName), and the kernels for a node whose seed attr is 0 (a
// graph written by hand or by another front end).
inline int64_t NodeNameSeed(const std::string& node) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : node) h = (h ^ c) * 1099511628211ULL;
  return static_cast<int64_t>(h >> 1) | 1;
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

  // The state of the node named `node` that every kernel of it in the
  // session shares: made by make() (a std::shared_ptr<T>) on first use, the
  // same object after. REQUIRES: one T per node name. Never fails.
  template <typename T, typename Make>
  std::shared_ptr<T> NodeState(const std::string& node, Make make) {
    std::lock_guard<std::mutex> l(mu_);
    auto& s = states_[node];
    if (!s) s = make();
    return std::static_pointer_cast<T>(s);
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<std::atomic<uint64_t>>> counters_;  // GUARDED_BY(mu_)
  std::unordered_map<std::string, std::shared_ptr<void>> states_;                     // GUARDED_BY(mu_)
};

}  // namespace sf
