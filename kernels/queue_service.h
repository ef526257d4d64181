// QueueService: how kernels reach queues, which live elsewhere (one queue
// actor per queue inside a session). Kernels only see this interface, so
// kernels/ knows nothing of actors.
//
// Waiting is a pending reply, never a blocked thread: a dequeue on an empty
// queue (or an enqueue on a full one) returns at once and its callback runs
// later, when an enqueue (dequeue, close, timeout) lets it finish.
// Every call is asynchronous: the callback runs exactly once, on any thread.
// Thread-safety: implementations are safe to call from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardflow/attr.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

class ChunkQueueService;

// One queue element: one tensor per component.
using QueueTuple = std::vector<Tensor>;

// What a queue is; two Resolves of one shared name must agree on all of it.
struct QueueSpec {
  enum class Kind : uint8_t { kFIFO = 0, kRandomShuffle = 1, kPaddingFIFO = 2 };
  Kind kind = Kind::kFIFO;
  std::vector<DType> component_types;
  // Per component (empty: any shape). A PaddingFIFOQueue needs every rank.
  std::vector<PartialShape> shapes;
  int64_t capacity = -1;  // -1: unbounded
  int64_t min_after_dequeue = 0;  // RandomShuffleQueue only
  int64_t seed = 0;               // RandomShuffleQueue only; 0 = nondeterministic
};

// "FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue".
const char* QueueKindName(QueueSpec::Kind k);

// Checks a spec (types given, shapes count, capacity, padding ranks);
// InvalidArgument naming the queue otherwise.
Status ValidateQueueSpec(const std::string& name, const QueueSpec& spec);

// Checks that `t` is a valid element of the queue: component count, dtypes,
// shapes. InvalidArgument naming the queue and the component otherwise.
Status ValidateQueueTuple(const std::string& name, const QueueSpec& spec, const QueueTuple& t);

// One element held by a queue: a whole enqueued tuple (row < 0), or row
// `row` of every component of an enqueue_many batch. Rows share their batch,
// so enqueue_many neither copies nor allocates per element; the batch's
// memory lives until its last row is dequeued (a RandomShuffleQueue may so
// keep a few dozen partly drained batches alive).
struct QueueElement {
  std::shared_ptr<const QueueTuple> src;
  int64_t row = -1;
};

// Checks a batch (each component with the same leading dimension) and
// returns how many elements it holds; InvalidArgument naming the queue and
// the component on a bad batch.
Result<int64_t> ValidateQueueBatch(const std::string& name, const QueueSpec& spec,
                                   const QueueTuple& batch);

// The tensors of one element (a copy of its rows when it is a batch row).
QueueTuple MaterializeQueueElement(const QueueElement& e);

// Stacks elements into one batch per component, padding each component with
// zeros to the largest shape when `pad` (else every element must have the
// same shape: InvalidArgument naming the queue and the component).
Result<QueueTuple> StackQueueElements(const std::string& name, const std::vector<QueueElement>& elems,
                                      const std::vector<DType>& types, bool pad);

// The "shapes" attr of the queue ops: per component its rank (-1 unknown)
// then its dims; an empty list means "any shape".
std::vector<int64_t> EncodeQueueShapes(const std::vector<PartialShape>& shapes);
// The inverse; InvalidArgument on a malformed list.
Result<std::vector<PartialShape>> DecodeQueueShapes(const std::vector<int64_t>& v);
// The spec a queue op (FIFOQueue, RandomShuffleQueue, PaddingFIFOQueue)
// describes with its attrs; the error names the attr.
Result<QueueSpec> QueueSpecFromAttrs(const std::string& op, const AttrMap& attrs);

class QueueService {
 public:
  virtual ~QueueService() = default;
  // Resolves (creating on first use) the queue `name`; returns its id, or
  // InvalidArgument when the spec is bad or the queue exists with another one.
  virtual Result<int64_t> Resolve(const std::string& name, const QueueSpec& spec) = 0;
  // The spec of queue id; NotFound otherwise.
  virtual Result<QueueSpec> SpecOf(int64_t id) const = 0;
  // Adds one element, waiting while the queue is full. timeout_ms > 0 fails
  // a wait that lasts longer with Unavailable ("deadline exceeded"). A bad
  // element fails with InvalidArgument and changes nothing; a closed queue
  // fails with Aborted. step_id names the step waiting (CancelStep).
  virtual void Enqueue(int64_t id, QueueTuple t, int64_t timeout_ms,
                       std::function<void(Status)> done, int64_t step_id = 0) = 0;
  // Adds every element of a batch (dimension 0 of each component), in order,
  // as room frees up. A bad batch changes nothing; a timeout, a cancelling
  // close or a cancelled step leaves the elements already added in the queue.
  virtual void EnqueueMany(int64_t id, QueueTuple batch, int64_t timeout_ms,
                           std::function<void(Status)> done, int64_t step_id = 0) = 0;
  // Removes one element, waiting while there is none. OutOfRange when the
  // queue is closed and empty.
  virtual void Dequeue(int64_t id, int64_t timeout_ms,
                       std::function<void(Result<QueueTuple>)> done, int64_t step_id = 0) = 0;
  // Removes n elements at once, stacked per component (a PaddingFIFOQueue pads
  // them to the batch's largest shape). OutOfRange when the queue is closed
  // and holds fewer than n; nothing is removed then.
  virtual void DequeueMany(int64_t id, int64_t n, int64_t timeout_ms,
                           std::function<void(Result<QueueTuple>)> done, int64_t step_id = 0) = 0;
  // As DequeueMany, but once the queue is closed it takes the fewer than n
  // elements left (at least one); OutOfRange only when closed and empty.
  virtual void DequeueUpTo(int64_t id, int64_t n, int64_t timeout_ms,
                           std::function<void(Result<QueueTuple>)> done, int64_t step_id = 0) = 0;
  // As DequeueUpTo, but served as soon as the queue holds one element: it
  // takes what is there, up to n (a consumer that must not wait for a whole
  // batch its producers may never complete); OutOfRange when closed and empty.
  virtual void DequeueAvailable(int64_t id, int64_t n, int64_t timeout_ms,
                                std::function<void(Result<QueueTuple>)> done, int64_t step_id = 0) = 0;
  // Fails, with why, every request of step step_id (non-zero) still waiting
  // in any queue: a failed step's dequeue takes no element a later one
  // enqueues, and its enqueue adds no more. Requests that finished stay done.
  virtual void CancelStep(int64_t step_id, const Status& why) = 0;
  // Closes the queue: later enqueues fail, waiting dequeues that can never be
  // served fail with OutOfRange; cancel_pending also fails waiting enqueues.
  virtual void Close(int64_t id, bool cancel_pending, std::function<void(Status)> done) = 0;
  // The number of elements in the queue.
  virtual void Size(int64_t id, std::function<void(Result<int64_t>)> done) = 0;
  // The name given to Resolve, for error messages ("" when unknown).
  virtual std::string NameOf(int64_t id) const = 0;
  // A non-zero number for the queue object of id that no other queue object
  // of its name (made afresh after a drop, on another node, or in another
  // process) has, but with chance 2^-31; NotFound for an unknown id.
  virtual Result<int64_t> IncarnationOf(int64_t id) const = 0;
  // The chunk queues that live beside these queues (kernels/chunk_queue_service.h),
  // owned by this service; null where there are none (the ChunkQueue ops then
  // fail with FailedPrecondition).
  virtual ChunkQueueService* chunk_queues() { return nullptr; }
};

}  // namespace sf
