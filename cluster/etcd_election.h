// EtcdElection: one candidate in a leader election under a key prefix,
// after etcd's own recipe (clientv3/concurrency's Election): a candidate
// writes PREFIX/LEASEHEX (or PREFIX/NAME for a named candidate, whose key
// etcd's roles can then give it alone) under its lease; the key with the lowest
// create_revision under PREFIX/ is the leader; every other candidate waits
// for the deletion of the key created just before its own. A leader whose
// lease ends (its process died, it lost etcd for a TTL: see
// EtcdClient::KeepAlive) loses its key, and the next candidate leads.
// Leadership is a key, not a promise: act as leader only while the lease is
// kept, and fence writes with a compare on the leader key's create_revision.
// Thread-safety: Campaign, Resign and Leader from one thread at a time;
// Cancel from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "cluster/etcd_client.h"

namespace sf {
namespace cluster {

class EtcdElection {
 public:
  // A candidate under prefix: its key is prefix + "/" + candidate, or the
  // lease in hex when candidate is "". REQUIRES: client outlives the election.
  EtcdElection(EtcdClient* client, std::string prefix, std::string candidate = "");
  // Does not resign: the lease's end (or Resign) removes the key.
  ~EtcdElection() = default;

  // Enters the election with value under lease and blocks until this
  // candidate leads; OK then. DeadlineExceeded after timeout, Aborted after
  // Cancel or when its own key vanished (the lease ended) while it waited,
  // both after withdrawing its key; or the errors of the calls it makes.
  // Campaigning again with the same lease keeps its place (and updates value).
  Status Campaign(const std::string& value, int64_t lease, std::chrono::milliseconds timeout);
  // Withdraws: deletes its key if it still is the one it created; OK when
  // there is none, the call's error otherwise.
  Status Resign();
  // Ends a Campaign in progress (from another thread) and every later one with Aborted.
  void Cancel();
  // The leader's key and value now, or nullopt when no one campaigns; the call's error otherwise.
  Result<std::optional<EtcdKeyValue>> Leader() const;
  // The leader under prefix; what Leader() returns, for a process that does not campaign.
  static Result<std::optional<EtcdKeyValue>> Leader(EtcdClient& client, const std::string& prefix);

  // Whether the last Campaign won (and no Resign since): it may have lost the lease since.
  bool leading() const { return leading_; }
  // Its key in etcd ("" before Campaign), and that key's create_revision (the fencing token).
  const std::string& key() const { return key_; }
  int64_t revision() const { return revision_; }

 private:
  // Blocks until the key pred (as of revision rev) is deleted, or deadline / Cancel.
  Status WaitForDeletion(const std::string& pred, int64_t rev, std::chrono::steady_clock::time_point deadline);
  Status Withdraw(Status why);

  EtcdClient* const client_;
  const std::string prefix_;  // with the trailing '/'
  const std::string candidate_;
  std::string key_;
  int64_t revision_ = 0;
  bool leading_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  bool canceled_ = false;  // GUARDED_BY(mu_)
};

}  // namespace cluster
}  // namespace sf
