// The queue actor's protocol (actor-private: includes CAF; include it only
// from actors/). One queue actor owns one queue: its elements, its waiting
// enqueues and dequeues (pending replies: stored callbacks answered when an
// enqueue, dequeue, close or timeout lets them finish) and its timers.
//
// In-process only for now: the message carries callbacks and tensors by
// reference (refcounted buffers, no copy).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <caf/all.hpp>

#include "kernels/queue_service.h"

namespace sf {
namespace runtime {

// One request to a queue actor; the matching callback answers it.
struct QueueMsg {
  enum Kind { kEnqueue, kDequeue, kClose, kSize, kTimeout, kShutdown } kind = kEnqueue;
  std::vector<QueueElement> elems;  // kEnqueue: validated elements, in order
  int64_t n = 1;                  // kDequeue: elements asked for
  bool many = false;              // kDequeue: stack them (DequeueMany)
  int64_t timeout_ms = 0;         // kEnqueue, kDequeue: 0 = wait forever
  bool cancel_pending = false;    // kClose
  int64_t waiter = 0;             // kTimeout: the waiter whose deadline passed
  std::function<void(Status)> status_done;              // kEnqueue, kClose
  std::function<void(Result<QueueTuple>)> tuple_done;   // kDequeue
  std::function<void(Result<int64_t>)> size_done;       // kSize
};
using QueueMsgPtr = std::shared_ptr<QueueMsg>;

}  // namespace runtime
}  // namespace sf

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::QueueMsgPtr)

namespace sf {
namespace runtime {

using QueueActor = caf::typed_actor<caf::reacts_to<QueueMsgPtr>>;

}  // namespace runtime
}  // namespace sf
