// MemberAddresses: the addresses a node may dial, from etcd's member lists:
// every address listed during the node's life (the latest max_known, so a
// member that just died still counts and a step sending to it fails as a
// send to a down node, not an unknown one) and every address listed now.
// Registrations wait a little for a member that just joined (WaitKnown). A
// part of ClusterNode (cluster/node_impl.h) with one job and its own lock.
//
// Thread-safety: every method may be called from any thread. The lock is
// held for the method only (a wait releases it) and calls out to nothing;
// where the node's `mu` is held too it is taken first.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "cluster/member_table.h"

namespace sf {
namespace cluster {

class MemberAddresses {
 public:
  explicit MemberAddresses(size_t max_known = 4096) : max_known_(max_known) {}

  // Takes etcd's latest list; ends the waits for the addresses it lists.
  void Update(const std::vector<MemberRecord>& records);
  // etcd's latest list; empty before the first.
  std::vector<MemberRecord> Latest() const;
  // Whether address is listed now or was during the node's life (the latest max_known).
  bool Knows(const std::string& address) const;
  // Waits until Knows(address), Close or the deadline; whether it knows it.
  bool WaitKnown(const std::string& address, std::chrono::steady_clock::time_point deadline);
  // Ends every wait (the node stops); later waits return at once.
  void Close();

 private:
  bool KnowsLocked(const std::string& address) const;

  const size_t max_known_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<MemberRecord> latest_;           // GUARDED_BY(mu_)
  std::unordered_set<std::string> known_;      // GUARDED_BY(mu_)
  std::deque<std::string> known_order_;        // GUARDED_BY(mu_): oldest first
  bool closed_ = false;                        // GUARDED_BY(mu_)
};

}  // namespace cluster
}  // namespace sf
