// ActorChunkQueues: the ChunkQueueService of a session or node; each chunk
// queue is one actor owning a ChunkLeases (kernels/chunk_leases.h) and its
// waiting Takes. CAF-free header, as actors/queue_actors.h.
//
// Time comes from the clock given (milliseconds, any origin): leases are
// checked against it at every request, and a queue with waiting Takes
// checks again when the earliest lease would end (a timer of the actor, in
// real milliseconds). Tests pass a clock they move by hand and call
// CheckLeases instead of waiting.
//
// On a cluster node a queue's state outlives the node (ChunkQueueStore):
// after every change the queue's actor writes its state to the store and
// answers the request that made it only once it is written, so a step that
// changed the queue is acknowledged with its state (its slot's replication
// round carries it); a queue made, or resolved again, where the store holds
// a state another queue object wrote (its slot moved here or failed over
// here, or came back) goes on from it, tickets included.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/chunk_queue_service.h"
#include "shardflow/tensor.h"

namespace caf {
class actor_system;
}

namespace sf {
namespace runtime {

// Where a node keeps its chunk queues' states (IsChunkQueueState); none in one process.
struct ChunkQueueStore {
  // Writes the state of queue `name`; done once it is written (any thread).
  // Called by the queue's actor after its changes, one call at a time, in order.
  std::function<void(const std::string& name, Tensor state, std::function<void(Status)> done)> persist;
  // The state stored for queue `name`, invalid when none. Called by
  // Resolve, on any thread (an actor's): it must not block.
  std::function<Tensor(const std::string& name)> load;
};

class ActorChunkQueues : public ChunkQueueService {
 public:
  using Clock = std::function<int64_t()>;
  // Chunk queues one store holds at most; Resolve refuses more with ResourceExhausted.
  static constexpr size_t kMaxQueues = 1024;
  // clock: null = the steady clock.
  explicit ActorChunkQueues(caf::actor_system& sys, Clock clock = nullptr);
  ~ActorChunkQueues() override;

  // Keeps the queues' states in store. REQUIRES: before the first Resolve.
  void SetStore(ChunkQueueStore store);

  // Starts the queue from the stored state (load) when it is new, or when
  // the stored state was written by another queue object; InvalidArgument
  // naming the queue for a stored state that is no state of these options.
  Result<int64_t> Resolve(const std::string& name, const ChunkLeaseOptions& options) override;
  void Take(int64_t id, int64_t worker, int64_t reader, int64_t step_id,
            std::function<void(Result<ChunkTicket>)> done) override;
  void Report(int64_t id, int64_t worker, std::vector<int64_t> tickets, std::vector<int64_t> pos, bool read,
              std::function<void(Status)> done) override;
  void Release(int64_t id, int64_t worker, std::function<void(Result<int64_t>)> done) override;
  void CheckLeases(int64_t id, std::function<void(Result<ChunkLeaseStats>)> done) override;
  void CancelStep(int64_t step_id, const Status& why) override;
  std::string NameOf(int64_t id) const override;

  // Fails every waiting Take and every later request with Aborted.
  void Shutdown();
  // Stops the actors. REQUIRES: Shutdown was called and no request is in flight.
  void Stop();

 private:
  struct Entry;
  const Entry* Find(int64_t id, Status* error) const;

  caf::actor_system& sys_;
  Clock clock_;
  std::shared_ptr<const ChunkQueueStore> store_;  // null: none
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> queues_;     // GUARDED_BY(mu_); entries never move
  std::unordered_map<std::string, int64_t> ids_;  // GUARDED_BY(mu_)
  bool shut_down_ = false;                         // GUARDED_BY(mu_)
};

}  // namespace runtime
}  // namespace sf
