// The in-process rendezvous: one table per step of the tensors partitions of
// that step send each other (see kernels/rendezvous_service.h).
// Thread-safety: all methods may be called from many threads at once.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/rendezvous_service.h"

namespace sf {
namespace runtime {

class LocalRendezvous : public RendezvousService {
 public:
  // As RendezvousService::Send.
  Status Send(const RendezvousKey& key, Tensor value, bool is_dead) override;
  // As RendezvousService::RecvAsync.
  void RecvAsync(const RendezvousKey& key, std::function<void(Status, Tensor, bool)> done) override;
  // As RendezvousService::Abort.
  void Abort(int64_t step_id, const Status& status) override;
  // Forgets the step (call once all its partitions finished).
  void Cleanup(int64_t step_id);

 private:
  using Callback = std::function<void(Status, Tensor, bool)>;
  struct Entry {
    bool sent = false;
    Tensor value;
    bool is_dead = false;
    std::vector<Callback> waiters;
  };
  struct StepTable {
    Status aborted;
    std::map<std::tuple<std::string, std::string, int64_t>, Entry> entries;
  };
  std::mutex mu_;
  std::unordered_map<int64_t, StepTable> steps_;  // GUARDED_BY(mu_)
};

}  // namespace runtime
}  // namespace sf
