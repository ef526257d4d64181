// The queue actor's protocol (actor-private: includes CAF; include it only
// from actors/). One queue actor owns one queue: its elements, its waiting
// enqueues and dequeues (pending replies: stored callbacks answered when an
// enqueue, dequeue, close or timeout lets them finish) and its timers.
//
// One C++ type per message. The requesters are compute-pool threads
// (kernels), not actors, so each request carries its reply as one typed
// callback, `done`. In-process only: callbacks and tensors by reference
// (refcounted buffers, no copy), so each message is allowed as an unsafe
// message type below, one by one.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <caf/all.hpp>

#include "kernels/queue_service.h"

namespace sf {
namespace runtime {

// Enqueues validated elements, in order; answers once all are in the queue.
struct EnqueueElements {
  std::vector<QueueElement> elems;
  int64_t timeout_ms = 0;  // 0: wait forever for room
  std::function<void(Status)> done;
  int64_t step_id = 0;  // the step waiting (CancelQueueStep)
};
// Dequeues n elements (stacked when many: DequeueMany; up_to: DequeueUpTo,
// which takes what is left, fewer than n, once the queue is closed).
struct DequeueElements {
  int64_t n = 1;
  bool many = false;
  bool up_to = false;  // only with many
  int64_t timeout_ms = 0;  // 0: wait forever
  std::function<void(Result<QueueTuple>)> done;
  int64_t step_id = 0;  // the step waiting (CancelQueueStep)
  bool any = false;     // with many: served as soon as one element is there (up to n)
};
// Closes the queue (cancel_pending: fails the waiting enqueues).
struct CloseQueue {
  bool cancel_pending = false;
  std::function<void(Status)> done;
};
// The number of elements in the queue.
struct QueueSize {
  std::function<void(Result<int64_t>)> done;
};
// Sent by the queue to itself timeout_ms after a waiting request: fails that
// waiter (if still waiting) with Unavailable. No reply.
struct QueueWaitTimeout {
  int64_t waiter = 0;
  int64_t timeout_ms = 0;
};
// The session is shutting down: fails every waiter, and every later request,
// with Aborted. No reply.
struct ShutdownQueue {};
// Step step_id failed: fails its waiting requests with why. No reply.
struct CancelQueueStep {
  int64_t step_id = 0;
  Status why;
};

}  // namespace runtime
}  // namespace sf

// In-process only (see the top of this file).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::EnqueueElements)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::DequeueElements)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::CloseQueue)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::QueueSize)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::QueueWaitTimeout)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ShutdownQueue)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::CancelQueueStep)

namespace sf {
namespace runtime {

using QueueActor = caf::typed_actor<caf::reacts_to<EnqueueElements>, caf::reacts_to<DequeueElements>,
                                    caf::reacts_to<CloseQueue>, caf::reacts_to<QueueSize>,
                                    caf::reacts_to<QueueWaitTimeout>, caf::reacts_to<ShutdownQueue>,
                                    caf::reacts_to<CancelQueueStep>>;

}  // namespace runtime
}  // namespace sf
