// Queue builders: queues are state shared between steps (input pipelines,
// coordination), each one a queue actor of the session.
//
//   ops::QueueOptions o;  o.shapes = {{2}};  o.capacity = 100;
//   auto q = ops::FIFOQueue(g, {DType::kFloat32}, o);
//   auto enq = ops::QueueEnqueue(g, q, {x});
//   auto batch = ops::QueueDequeueMany(g, q, 32)[0];
//
// A dequeue on an empty queue (an enqueue on a full one) waits without
// holding a thread: its step simply finishes later. Closing a queue makes
// dequeues that can never be served fail with OutOfRange (the usual "input
// exhausted" signal). timeout_ms > 0 fails a wait that lasts longer with
// Unavailable ("deadline exceeded"). Builders record errors in the graph like
// every other builder (g.status()).
#pragma once

#include <string>
#include <vector>

#include "shardflow/graph.h"

namespace sf {
namespace ops {

struct QueueOptions {
  std::vector<PartialShape> shapes;  // per component; empty = any shape
  int64_t capacity = -1;             // -1 = unbounded
  std::string shared_name;           // "" = the node's unique name
};

// A first-in first-out queue of elements with one tensor per component type.
Output FIFOQueue(Graph& g, const std::vector<DType>& component_types, const QueueOptions& opts = {},
                 const std::string& name = "");
// A queue dequeuing in a random order (seeded: seed != 0 is deterministic);
// until closed it keeps at least min_after_dequeue elements to mix.
Output RandomShuffleQueue(Graph& g, const std::vector<DType>& component_types, int64_t capacity,
                          int64_t min_after_dequeue, int64_t seed, QueueOptions opts = {},
                          const std::string& name = "");
// A FIFO queue whose QueueDequeueMany pads every component with zeros to the
// largest shape in the batch (opts.shapes must give every rank; dims may be -1).
Output PaddingFIFOQueue(Graph& g, const std::vector<DType>& component_types, const QueueOptions& opts,
                        const std::string& name = "");

// Adds one element; returns the node id (a target), -1 on error.
Operation QueueEnqueue(Graph& g, Output queue, const std::vector<Output>& components, int64_t timeout_ms = 0,
                 const std::string& name = "");
// Adds dimension 0 of the components as that many elements; node id or -1.
Operation QueueEnqueueMany(Graph& g, Output queue, const std::vector<Output>& components,
                     int64_t timeout_ms = 0, const std::string& name = "");
// Removes one element: one output per component (empty on error).
std::vector<Output> QueueDequeue(Graph& g, Output queue, int64_t timeout_ms = 0,
                                 const std::string& name = "");
// Removes n elements stacked per component ([n, ...]); empty on error.
std::vector<Output> QueueDequeueMany(Graph& g, Output queue, Output n, int64_t timeout_ms = 0,
                                     const std::string& name = "");
std::vector<Output> QueueDequeueMany(Graph& g, Output queue, int64_t n, int64_t timeout_ms = 0,
                                     const std::string& name = "");
// As QueueDequeueMany, but once the queue is closed it gives the fewer than n
// elements left ([?, ...]; OutOfRange when none is left); empty on error.
std::vector<Output> QueueDequeueUpTo(Graph& g, Output queue, Output n, int64_t timeout_ms = 0,
                                     const std::string& name = "");
std::vector<Output> QueueDequeueUpTo(Graph& g, Output queue, int64_t n, int64_t timeout_ms = 0,
                                     const std::string& name = "");
// As QueueDequeueUpTo, but a run takes what the queue holds (up to n) as
// soon as it holds one element, rather than waiting for n: for consumers
// whose producers may hold back the rest (workers sharing an input,
// include/shardflow/chunk_queue_ops.h). Empty on error.
std::vector<Output> QueueDequeueAvailable(Graph& g, Output queue, int64_t n, int64_t timeout_ms = 0,
                                          const std::string& name = "");
// Closes the queue; returns the node id (a target), -1 on error.
Operation QueueClose(Graph& g, Output queue, bool cancel_pending_enqueues = false,
               const std::string& name = "");
// The number of elements in the queue (int32 scalar).
Output QueueSize(Graph& g, Output queue, const std::string& name = "");
// A non-zero int64 scalar naming the queue object that serves `queue` where
// it runs: a queue made afresh under the same name (its task moved to
// another node, the node restarted, the queue was dropped) has another.
// Invalid when queue is.
Output QueueIncarnation(Graph& g, Output queue, const std::string& name = "");

}  // namespace ops
}  // namespace sf
