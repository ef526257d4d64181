// The rendezvous of one cluster session on one node: a _Send whose receiving
// device is on this node goes to the node's local rendezvous; one for
// another task becomes a SendTensor message to that task's node, whose
// connection handler puts it into its local rendezvous. Receives are always
// local. (Private to the cluster's node code.)
//
// Send never blocks: to a node not connected yet the message waits for the
// node's dialer thread, and the step's partition reports its result only
// after Flush, so a dial that fails still fails the step that sent.
// Thread-safety: all methods may be called from many threads.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/rendezvous.h"
#include "net/messages.h"

namespace sf {
namespace runtime {

class ClusterRendezvous : public RendezvousService,
                          public std::enable_shared_from_this<ClusterRendezvous> {
 public:
  // Sends a message to the node at an address without waiting for a dial:
  // false when it went (over a live connection), true when it waits for one
  // to be dialed, after which `later` gets whether it went; Unavailable or
  // ResourceExhausted naming the node when it cannot go at all (`later` is
  // then never called).
  using SendFn = std::function<Result<bool>(const std::string& address, net::SendTensor t,
                                            std::function<void(Status)> later)>;
  // tasks[i] is the address of task i; self is this node's address; the
  // tensors it sends name session_id.
  ClusterRendezvous(LocalRendezvous* local, std::string self, std::vector<std::string> tasks, uint64_t session_id,
                    SendFn send);

  // Local, or SendTensor to the receiving device's node; InvalidArgument
  // when the key's device names no task of the session.
  Status Send(const RendezvousKey& key, Tensor value, bool is_dead) override;
  // Always local: remote senders deliver here.
  void RecvAsync(const RendezvousKey& key, std::function<void(Status, Tensor, bool)> done) override;
  // Aborts the step locally (the session tells the other nodes).
  void Abort(int64_t step_id, const Status& status) override;
  // Calls done once the step's sends waiting for a dial have gone, with the
  // first failure among them (the step is aborted here too when one fails).
  void Flush(int64_t step_id, std::function<void(Status)> done) override;

 private:
  // The address of the node hosting the receiving device of edge key
  // "...->DEVICE"; InvalidArgument otherwise.
  Result<std::string> Destination(const std::string& edge);
  // A send of step_id waiting for a dial has gone (or failed with s).
  void Sent(int64_t step_id, const Status& s);
  // One send of step_id is over (s: its failure, if any): when it was the
  // step's last, the partitions' Flush callbacks waiting for it run.
  void Release(int64_t step_id, const Status& s);

  // A step's sends waiting for dials: how many, the first failure, and the
  // Flush waiting for them.
  struct Waiting {
    int64_t count = 0;
    Status failed;
    // One per partition of the step on this node that called Flush.
    std::vector<std::function<void(Status)>> flushed;
  };

  LocalRendezvous* local_;
  const std::string self_;
  const std::vector<std::string> tasks_;
  const uint64_t session_id_;
  SendFn send_;
  std::mutex mu_;
  std::unordered_map<std::string, std::string> device_address_;  // GUARDED_BY(mu_)
  std::unordered_map<int64_t, Waiting> waiting_;                // GUARDED_BY(mu_)
};

}  // namespace runtime
}  // namespace sf
