// The rendezvous of one cluster session on one node: a _Send whose receiving
// device is on this node goes to the node's local rendezvous; one for
// another task becomes a SendTensor message to that task's node, whose
// connection handler puts it into its local rendezvous. Receives are always
// local. (Actor-private header: include only from actors/.)
// Thread-safety: all methods may be called from many threads.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/rendezvous.h"
#include "net/messages.h"

namespace sf {
namespace runtime {

class ClusterRendezvous : public RendezvousService {
 public:
  // Sends a message to the node at an address; Unavailable naming it when it
  // cannot.
  using SendFn = std::function<Status(const std::string& address, const net::Message&)>;
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

 private:
  // The address of the node hosting the receiving device of edge key
  // "...->DEVICE"; InvalidArgument otherwise.
  Result<std::string> Destination(const std::string& edge);

  LocalRendezvous* local_;
  const std::string self_;
  const std::vector<std::string> tasks_;
  const uint64_t session_id_;
  SendFn send_;
  std::mutex mu_;
  std::unordered_map<std::string, std::string> device_address_;  // GUARDED_BY(mu_)
};

}  // namespace runtime
}  // namespace sf
