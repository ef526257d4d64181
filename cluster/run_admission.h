// RunAdmission: a node's partition runs going, and whether it may start
// another. A run is a step's partition run for a client, placed by a shard
// map epoch on a slot (or on none: slot -1). A slot's fence (the slot moved
// away at that epoch) refuses runs placed by an older map; a client has at
// most a given number of runs going. A fence waits for its slot's older runs
// (WaitOlderRuns), Stop for every run (WaitIdle). A part of ClusterNode
// (cluster/node_impl.h) with one job and its own lock.
//
// Thread-safety: every method may be called from any thread. The lock is
// held for the method only and calls out to nothing; where the node's `mu`
// is held too it is taken first (mu, then this lock; never the reverse).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sf {
namespace net {
class Connection;
}  // namespace net
namespace cluster {

class RunAdmission {
 public:
  // (slot, map epoch that placed the run); slot -1: placed by no map.
  using Slot = std::pair<int, int64_t>;
  enum class Verdict { kAdmitted, kStale, kFull, kClosed };
  struct Outcome {
    Verdict verdict = Verdict::kAdmitted;
    int64_t fence = 0;  // kStale: the slot's fence the run is below
  };

  // Starts client's run of step on slot and notes slot's epoch as served;
  // refused, in this order, kStale (with the fence) when the epoch is below
  // the slot's fence, kFull when client has max_per_client runs going,
  // kClosed after Close.
  Outcome Admit(int64_t step, const net::Connection* client, Slot slot, size_t max_per_client);
  // Ends a run Admit started; whether no run is left (a run never admitted
  // changes nothing).
  bool End(int64_t step, const net::Connection* client, Slot slot);

  // Raises slot's fence to epoch (a lower epoch leaves it as it is).
  void Fence(int slot, int64_t epoch);
  // slot's fence; 0 when it was never fenced.
  int64_t FenceOf(int slot) const;
  // The steps of slot's runs placed by an epoch below its fence; empty when none.
  std::vector<int64_t> OlderRuns(int slot) const;
  // Waits until slot has no run below its fence, or Close; false when the
  // deadline came first.
  bool WaitOlderRuns(int slot, std::chrono::steady_clock::time_point deadline);
  // The newest epoch that placed a run of slot here; 0 when none did.
  int64_t ServedEpoch(int slot) const;

  // How many runs of step are going; 0 when none.
  size_t Runs(int64_t step) const;
  // Whether step has a run going for a client other than `client`.
  bool RunsForOther(int64_t step, const net::Connection* client) const;
  // The steps with a run going; empty when none.
  std::set<int64_t> RunningSteps() const;
  // The steps with a run going for client; empty when none.
  std::set<int64_t> StepsOf(const net::Connection* client) const;
  // Whether no run is going.
  bool Idle() const;

  // Refuses every later Admit (kClosed) and ends every WaitOlderRuns; the
  // runs going go on until End.
  void Close();
  // Waits until no run is going (what runs use dies with the node).
  void WaitIdle();
  // How many threads wait in WaitOlderRuns or WaitIdle now (tests, logs).
  int Waiters() const;

 private:
  std::vector<int64_t> OlderRunsLocked(int slot) const;  // REQUIRES: mu_ held

  mutable std::mutex mu_;
  // Woken as runs end while someone waits (a run's end wakes nobody
  // otherwise), and by Close.
  std::condition_variable cv_;
  int waiters_ = 0;                                                      // GUARDED_BY(mu_)
  bool closed_ = false;                                                  // GUARDED_BY(mu_)
  std::multimap<int64_t, const net::Connection*> running_;               // GUARDED_BY(mu_): step -> client
  std::unordered_map<const net::Connection*, size_t> running_per_client_;  // GUARDED_BY(mu_)
  std::multimap<Slot, int64_t> running_slots_;                          // GUARDED_BY(mu_): slot -> step
  std::map<int, int64_t> fences_;                                        // GUARDED_BY(mu_)
  // Slot -> the newest epoch that placed a run here (only grows): a backup
  // refuses a holder's replication round when it served the slot by a
  // newer map than the one naming that holder.
  std::map<int, int64_t> served_epochs_;                                 // GUARDED_BY(mu_)
};

}  // namespace cluster
}  // namespace sf
