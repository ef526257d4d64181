// NewQueueService: ActorQueues with an actor system of its own, for
// benchmarks and tools (actors/queue_actors.h).
#include <caf/all.hpp>

#include "actors/caf_thread_logger.h"
#include "actors/queue_actors.h"

namespace sf {
namespace runtime {

namespace {

// ActorQueues plus the actor system it runs on.
class OwnedQueues : public QueueService {
 public:
  explicit OwnedQueues(int threads) {
    ForgetCafThreadLogger forget;  // made on the caller's thread, maybe destroyed on another
    cfg_.set("scheduler.policy", caf::atom("sharing"));
    cfg_.set("scheduler.max-threads", static_cast<size_t>(threads > 0 ? threads : 2));
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    q_ = std::make_unique<ActorQueues>(*sys_);
  }
  ~OwnedQueues() override {
    q_->Shutdown();
    q_->Stop();
    q_.reset();
    sys_.reset();
  }
  Result<int64_t> Resolve(const std::string& name, const QueueSpec& spec) override {
    return q_->Resolve(name, spec);
  }
  Result<QueueSpec> SpecOf(int64_t id) const override { return q_->SpecOf(id); }
  void Enqueue(int64_t id, QueueTuple t, int64_t timeout_ms, std::function<void(Status)> done,
               int64_t step_id = 0) override {
    q_->Enqueue(id, std::move(t), timeout_ms, std::move(done), step_id);
  }
  void EnqueueMany(int64_t id, QueueTuple batch, int64_t timeout_ms, std::function<void(Status)> done,
                   int64_t step_id = 0) override {
    q_->EnqueueMany(id, std::move(batch), timeout_ms, std::move(done), step_id);
  }
  void Dequeue(int64_t id, int64_t timeout_ms, std::function<void(Result<QueueTuple>)> done,
               int64_t step_id = 0) override {
    q_->Dequeue(id, timeout_ms, std::move(done), step_id);
  }
  void DequeueMany(int64_t id, int64_t n, int64_t timeout_ms, std::function<void(Result<QueueTuple>)> done,
                   int64_t step_id = 0) override {
    q_->DequeueMany(id, n, timeout_ms, std::move(done), step_id);
  }
  void DequeueUpTo(int64_t id, int64_t n, int64_t timeout_ms, std::function<void(Result<QueueTuple>)> done,
                   int64_t step_id = 0) override {
    q_->DequeueUpTo(id, n, timeout_ms, std::move(done), step_id);
  }
  void DequeueAvailable(int64_t id, int64_t n, int64_t timeout_ms, std::function<void(Result<QueueTuple>)> done,
                        int64_t step_id = 0) override {
    q_->DequeueAvailable(id, n, timeout_ms, std::move(done), step_id);
  }
  void CancelStep(int64_t step_id, const Status& why) override { q_->CancelStep(step_id, why); }
  ChunkQueueService* chunk_queues() override { return q_->chunk_queues(); }
  void Close(int64_t id, bool cancel_pending, std::function<void(Status)> done) override {
    q_->Close(id, cancel_pending, std::move(done));
  }
  void Size(int64_t id, std::function<void(Result<int64_t>)> done) override {
    q_->Size(id, std::move(done));
  }
  std::string NameOf(int64_t id) const override { return q_->NameOf(id); }
  Result<int64_t> IncarnationOf(int64_t id) const override { return q_->IncarnationOf(id); }

 private:
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::unique_ptr<ActorQueues> q_;
};

}  // namespace

std::unique_ptr<QueueService> NewQueueService(int scheduler_threads) {
  return std::make_unique<OwnedQueues>(scheduler_threads);
}

}  // namespace runtime
}  // namespace sf
