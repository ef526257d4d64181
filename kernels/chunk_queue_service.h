// ChunkQueueService: how kernels reach chunk queues, the shared queues that
// hand the chunks of an input out to workers with leases (kernels/chunk_leases.h
// says what a lease is and what "every example once per epoch" rests on).
// Each chunk queue is one actor of the session or node that holds it
// (actors/chunk_queue_actor.h); workers in other sessions reach it through
// the ChunkQueue* ops placed on its task, like any queue.
//
// Every call is asynchronous: the callback runs exactly once, on any thread.
// A Take with no free chunk waits as a pending reply, never a thread.
// Thread-safety: implementations are safe to call from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/chunk_leases.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

// A ticket handed out by a chunk queue carries the queue's incarnation (a
// random number drawn when the queue is made) above ChunkLeases' ticket
// (its index and hand-out number, kernels/chunk_leases.h), from bit
// kChunkIncarnationShift: a report of a ticket from an earlier queue of the
// same name (its task moved to another node, which made the queue afresh) is
// refused, rather than the new queue handing out again what the old one had
// trained. ChunkTicketIndex gives the ticket's index.
constexpr int kChunkIncarnationShift = kChunkTicketBits + kChunkHandoutBits;
constexpr int64_t kMaxChunkIncarnation = (int64_t{1} << (63 - kChunkIncarnationShift)) - 1;

// A chunk queue's state as a node stores it (actors/chunk_queue_actor.h: a
// variable of the queue's slot, so that moves, backups and node checkpoints
// carry it): an int64 vector of kChunkQueueStateMagic, the queue's
// incarnation, the writer (a random id of the queue object that wrote it),
// then ChunkLeases::Serialize. Its length changes with the state.
constexpr int64_t kChunkQueueStateMagic = 0x5346434851535431;  // "SFCHQST1"
constexpr size_t kChunkQueueStateHeader = 3;
// The suffix of the variable holding chunk queue Q's state: "Q" + this.
constexpr const char* kChunkQueueStateSuffix = "/chunk_leases";

// Whether t looks like a chunk queue's state (its first word; Restore checks the rest).
inline bool IsChunkQueueState(const Tensor& t) {
  return t.valid() && t.dtype() == DType::kInt64 && t.rank() == 1 &&
         t.num_elements() >= static_cast<int64_t>(kChunkQueueStateHeader) && t.data<int64_t>()[0] == kChunkQueueStateMagic;
}

class ChunkQueueService {
 public:
  virtual ~ChunkQueueService() = default;
  // Resolves (creating on first use) the chunk queue `name`; its id.
  // InvalidArgument for bad options or when it exists with other ones.
  virtual Result<int64_t> Resolve(const std::string& name, const ChunkLeaseOptions& options) = 0;
  // Hands worker a chunk (ChunkLeases::Take, reader included: 0 names
  // none; its ticket with the queue's incarnation, above), waiting while
  // every chunk left is held by another worker that may still give it back;
  // OutOfRange naming the queue once every chunk of every epoch is done.
  // step_id: CancelStep.
  virtual void Take(int64_t id, int64_t worker, int64_t reader, int64_t step_id,
                    std::function<void(Result<ChunkTicket>)> done) = 0;
  // Rows of tickets[i] trained up to line pos[i], all or none
  // (ChunkLeases::TrainedAll: the first refusal, naming the queue and the
  // chunk), or with read, tickets[i] read to its end at line pos[i]
  // (ChunkLeases::Read; a chunk the worker lost is no error there: its new
  // holder reads it again). FailedPrecondition for a ticket of an earlier
  // queue of this name, and nothing recorded.
  virtual void Report(int64_t id, int64_t worker, std::vector<int64_t> tickets, std::vector<int64_t> pos, bool read,
                      std::function<void(Status)> done) = 0;
  // The worker is gone: its chunks go to others. How many it held.
  virtual void Release(int64_t id, int64_t worker, std::function<void(Result<int64_t>)> done) = 0;
  // Takes back the chunks of workers whose leases ended by now (the queue's
  // clock); done once the queue has checked.
  virtual void CheckLeases(int64_t id, std::function<void(Result<ChunkLeaseStats>)> done) = 0;
  // Fails the waiting Takes of step step_id (non-zero) with why.
  virtual void CancelStep(int64_t step_id, const Status& why) = 0;
  // The name given to Resolve ("" when unknown).
  virtual std::string NameOf(int64_t id) const = 0;
};

}  // namespace sf
