// The session's QueueService: each queue is one queue actor (see
// actors/queue_protocol.h). This header is CAF-free so benchmarks and tools
// can use NewQueueService without the actor library's headers.
//
// The service validates elements on the caller's thread (a rejected enqueue
// never reaches the queue, so it changes nothing) and sends one message per
// request; the actor answers when the request can finish.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/namespace_quotas.h"
#include "kernels/queue_service.h"

namespace caf {
class actor_system;
}

namespace sf {
namespace runtime {

class CancelledSteps;
class ActorChunkQueues;

class ActorQueues : public QueueService {
 public:
  // Queues one store holds at most; Resolve refuses more with ResourceExhausted.
  static constexpr size_t kMaxQueues = size_t{1} << 16;
  // chunk_clock_ms: the chunk queues' lease clock (ActorChunkQueues); null: the steady clock.
  explicit ActorQueues(caf::actor_system& sys, std::function<int64_t()> chunk_clock_ms = nullptr);
  ~ActorQueues() override;

  Result<int64_t> Resolve(const std::string& name, const QueueSpec& spec) override;
  Result<QueueSpec> SpecOf(int64_t id) const override;
  void Enqueue(int64_t id, QueueTuple t, int64_t timeout_ms, std::function<void(Status)> done,
               int64_t step_id = 0) override;
  void EnqueueMany(int64_t id, QueueTuple batch, int64_t timeout_ms, std::function<void(Status)> done,
                   int64_t step_id = 0) override;
  void Dequeue(int64_t id, int64_t timeout_ms, std::function<void(Result<QueueTuple>)> done,
               int64_t step_id = 0) override;
  void DequeueMany(int64_t id, int64_t n, int64_t timeout_ms, std::function<void(Result<QueueTuple>)> done,
                   int64_t step_id = 0) override;
  void DequeueUpTo(int64_t id, int64_t n, int64_t timeout_ms, std::function<void(Result<QueueTuple>)> done,
                   int64_t step_id = 0) override;
  void DequeueAvailable(int64_t id, int64_t n, int64_t timeout_ms, std::function<void(Result<QueueTuple>)> done,
                        int64_t step_id = 0) override;
  // Tells every queue (a failure is rare: no index of which queues a step used).
  void CancelStep(int64_t step_id, const Status& why) override;
  void Close(int64_t id, bool cancel_pending, std::function<void(Status)> done) override;
  void Size(int64_t id, std::function<void(Result<int64_t>)> done) override;
  std::string NameOf(int64_t id) const override;
  Result<int64_t> IncarnationOf(int64_t id) const override;
  // The chunk queues of this store (one actor each, on the same actor system).
  ChunkQueueService* chunk_queues() override;
  // The same, as the actors that hold them (a node sets their store).
  ActorChunkQueues& chunk_actors() { return *chunks_; }

  // Fails every waiting request with Aborted and every later one at once, so
  // no step waits on a queue forever; the actors stay up until Stop.
  void Shutdown();
  // Stops every queue actor. REQUIRES: Shutdown was called and no request is
  // in flight.
  void Stop();
  // Counts each new queue against its namespace's quota (a node's), refusing
  // one past it. REQUIRES: called before the first Resolve.
  void SetQuotas(std::shared_ptr<NamespaceQuotas> quotas) { quotas_ = std::move(quotas); }
  // The queue names that keep(name) selects.
  std::vector<std::string> NamesWhere(const std::function<bool(const std::string&)>& keep) const;
  // Forgets every queue whose name drop(name) selects: later requests for
  // its id fail with NotFound, and its actor and elements go once requests
  // in flight are done. How many were dropped.
  int64_t DropWhere(const std::function<bool(const std::string&)>& drop);

 private:
  struct Entry;
  // The queue of id, or null after telling the caller why (through *error).
  std::shared_ptr<const Entry> Find(int64_t id, Status* error) const;
  // DequeueMany (up_to false) and DequeueUpTo: checks n, then asks the queue.
  void DequeueBatch(int64_t id, int64_t n, bool up_to, int64_t timeout_ms,
                    std::function<void(Result<QueueTuple>)> done, int64_t step_id, bool any = false);

  caf::actor_system& sys_;
  mutable std::mutex mu_;
  // GUARDED_BY(mu_); a dropped queue's entry becomes null (its id is never reused).
  std::vector<std::shared_ptr<Entry>> queues_;
  std::unordered_map<std::string, int64_t> ids_;  // GUARDED_BY(mu_)
  // Drawn once: the high bits of every queue's incarnation (its id the low ones).
  const int64_t salt_;
  bool shut_down_ = false;                         // GUARDED_BY(mu_)
  // Shared with every queue actor of the store: one bounded record of the
  // cancelled steps, not one per queue.
  std::shared_ptr<CancelledSteps> cancelled_;
  std::unique_ptr<ActorChunkQueues> chunks_;
  std::shared_ptr<NamespaceQuotas> quotas_;  // null: nothing counted
};

// A queue service with its own actor system of `scheduler_threads` threads
// (benchmarks, tools). Destroying it fails waiting requests and stops it.
std::unique_ptr<QueueService> NewQueueService(int scheduler_threads);

}  // namespace runtime
}  // namespace sf
