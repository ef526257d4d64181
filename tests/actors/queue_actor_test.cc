// The queue actor on CAF's deterministic test coordinator: every message is
// handled on the test's thread when the test says so, and timers fire when
// the test advances the clock, so waits, timeouts and wake-up order are
// checked without any time passing.
#include <catch2/catch.hpp>

#include <optional>

#include "actors/queue_actors.h"
#include "tests/support/deterministic.h"

using namespace sf;

namespace {

// The queues on a deterministic system; stopped before it.
struct Deterministic : testing::Deterministic {
  ~Deterministic() {
    queues.reset();
    Run();
  }
  std::unique_ptr<runtime::ActorQueues> queues = std::make_unique<runtime::ActorQueues>(sys);
};

QueueSpec FloatFifo(int64_t capacity) {
  QueueSpec s;
  s.component_types = {DType::kFloat32};
  s.shapes = {PartialShape({})};
  s.capacity = capacity;
  return s;
}

QueueTuple One(float v) { return {Tensor::Scalar<float>(v)}; }

}  // namespace

TEST_CASE("Queue actor: dequeues wait in order and wake in order", "[queue]") {
  Deterministic d;
  auto id = d.queues->Resolve("q", FloatFifo(-1));
  REQUIRE(id.ok());
  std::optional<Result<QueueTuple>> first, second;
  d.queues->Dequeue(*id, 0, [&](Result<QueueTuple> r) { first.emplace(std::move(r)); });
  d.queues->Dequeue(*id, 0, [&](Result<QueueTuple> r) { second.emplace(std::move(r)); });
  d.Run();
  CHECK(!first);
  CHECK(!second);
  std::optional<Status> enq;
  d.queues->EnqueueMany(*id, {Tensor::FromVector(std::vector<float>{7, 8}, {2})}, 0,
                        [&](Status s) { enq.emplace(s); });
  d.Run();
  REQUIRE(enq);
  CHECK(enq->ok());
  REQUIRE(first);
  REQUIRE(second);
  REQUIRE(first->ok());
  REQUIRE(second->ok());
  CHECK((**first)[0].scalar_as<float>() == 7);
  CHECK((**second)[0].scalar_as<float>() == 8);
}

TEST_CASE("Queue actor: a wait fails exactly at its timeout, and only its own", "[queue]") {
  Deterministic d;
  auto id = d.queues->Resolve("q", FloatFifo(1));
  REQUIRE(id.ok());
  std::optional<Result<QueueTuple>> timed, patient;
  d.queues->Dequeue(*id, 50, [&](Result<QueueTuple> r) { timed.emplace(std::move(r)); });
  d.queues->Dequeue(*id, 0, [&](Result<QueueTuple> r) { patient.emplace(std::move(r)); });
  d.Run();
  d.sched.advance_time(std::chrono::milliseconds(49));
  d.Run();
  CHECK(!timed);  // 49 ms in: still waiting
  d.sched.advance_time(std::chrono::milliseconds(1));
  d.Run();
  REQUIRE(timed);
  REQUIRE(!timed->ok());
  CHECK(timed->status().message().find("waited 50 ms") != std::string::npos);
  CHECK(!patient);  // no timeout: waits on
  // The element goes to the waiter still waiting, not the timed-out one.
  std::optional<Status> enq;
  d.queues->Enqueue(*id, One(3), 0, [&](Status s) { enq.emplace(s); });
  d.Run();
  REQUIRE(patient);
  REQUIRE(patient->ok());
  CHECK((**patient)[0].scalar_as<float>() == 3);
  // A full queue: an enqueue waits for room, then times out the same way.
  std::optional<Status> fill, blocked;
  d.queues->Enqueue(*id, One(4), 0, [&](Status s) { fill.emplace(s); });
  d.queues->Enqueue(*id, One(5), 20, [&](Status s) { blocked.emplace(s); });
  d.Run();
  REQUIRE(fill);
  CHECK(fill->ok());
  CHECK(!blocked);
  d.sched.advance_time(std::chrono::milliseconds(20));
  d.Run();
  REQUIRE(blocked);
  CHECK(!blocked->ok());
  std::optional<Result<int64_t>> size;
  d.queues->Size(*id, [&](Result<int64_t> r) { size.emplace(std::move(r)); });
  d.Run();
  REQUIRE(size);
  CHECK(**size == 1);  // the timed-out enqueue added nothing
}

TEST_CASE("Queue actor: close fails waiting dequeues; cancel_pending fails waiting enqueues; shutdown fails all",
          "[queue]") {
  Deterministic d;
  auto id = d.queues->Resolve("q", FloatFifo(1));
  REQUIRE(id.ok());
  std::optional<Status> a, b, closed;
  d.queues->Enqueue(*id, One(1), 0, [&](Status s) { a.emplace(s); });
  d.queues->Enqueue(*id, One(2), 0, [&](Status s) { b.emplace(s); });
  d.Run();
  REQUIRE(a);
  CHECK(!b);  // waits for room
  d.queues->Close(*id, /*cancel_pending=*/true, [&](Status s) { closed.emplace(s); });
  d.Run();
  REQUIRE(closed);
  CHECK(closed->ok());
  REQUIRE(b);
  CHECK(!b->ok());
  // What was in the queue before the close is still dequeued; then it is empty and closed.
  std::optional<Result<QueueTuple>> got, none;
  d.queues->Dequeue(*id, 0, [&](Result<QueueTuple> r) { got.emplace(std::move(r)); });
  d.queues->Dequeue(*id, 0, [&](Result<QueueTuple> r) { none.emplace(std::move(r)); });
  d.Run();
  REQUIRE(got);
  REQUIRE(got->ok());
  CHECK((**got)[0].scalar_as<float>() == 1);
  REQUIRE(none);
  CHECK(none->status().code() == Code::kOutOfRange);

  auto id2 = d.queues->Resolve("q2", FloatFifo(-1));
  REQUIRE(id2.ok());
  std::optional<Result<QueueTuple>> waiting;
  d.queues->Dequeue(*id2, 0, [&](Result<QueueTuple> r) { waiting.emplace(std::move(r)); });
  d.Run();
  CHECK(!waiting);
  d.queues->Shutdown();
  d.Run();
  REQUIRE(waiting);
  CHECK(waiting->status().code() == Code::kAborted);
}

TEST_CASE("Queue actor: a store holds at most kMaxQueues queues", "[queue]") {
  Deterministic d;
  size_t made = 0;
  for (size_t i = 0; i < runtime::ActorQueues::kMaxQueues; ++i)
    made += d.queues->Resolve("q" + std::to_string(i), FloatFifo(1)).ok();
  REQUIRE(made == runtime::ActorQueues::kMaxQueues);
  auto over = d.queues->Resolve("one-more", FloatFifo(1));
  REQUIRE_FALSE(over.ok());
  CHECK(over.status().code() == Code::kResourceExhausted);
  CHECK(over.status().message().find("'one-more'") != std::string::npos);
  CHECK(d.queues->Resolve("q7", FloatFifo(1)).ok());  // existing ones still resolve
}

TEST_CASE("Queue actor: a cancelled step's waits end, before or after they arrive, and others keep theirs",
          "[queue]") {
  Deterministic d;
  auto id = d.queues->Resolve("q", FloatFifo(1));
  REQUIRE(id.ok());
  // Step 7 waits to dequeue, step 8 too; step 9 fills the queue, step 10 waits for room.
  std::optional<Result<QueueTuple>> s7, s8;
  std::optional<Status> s9, s10;
  d.queues->Dequeue(*id, 0, [&](Result<QueueTuple> r) { s7.emplace(std::move(r)); }, 7);
  d.queues->Dequeue(*id, 0, [&](Result<QueueTuple> r) { s8.emplace(std::move(r)); }, 8);
  d.Run();
  d.queues->CancelStep(7, InvalidArgument("another op of step 7 failed"));
  d.Run();
  REQUIRE(s7);
  REQUIRE_FALSE(s7->ok());
  CHECK(s7->status().code() == Code::kAborted);
  CHECK(s7->status().message().find("another op of step 7 failed") != std::string::npos);
  CHECK(!s8);
  // The first element goes to step 8, not to cancelled step 7.
  d.queues->Enqueue(*id, One(1), 0, [&](Status s) { s9.emplace(s); }, 9);
  d.Run();
  REQUIRE(s8);
  REQUIRE(s8->ok());
  CHECK((**s8)[0].scalar_as<float>() == 1);
  // A cancel that arrives before the request it cancels still ends it.
  d.queues->Enqueue(*id, One(2), 0, [&](Status) {}, 11);  // fills the queue
  d.Run();
  d.queues->CancelStep(10, Aborted("step 10 failed"));
  d.queues->Enqueue(*id, One(3), 0, [&](Status s) { s10.emplace(s); }, 10);
  d.Run();
  REQUIRE(s10);
  CHECK(s10->code() == Code::kAborted);
  std::optional<Result<QueueTuple>> last;
  d.queues->Dequeue(*id, 0, [&](Result<QueueTuple> r) { last.emplace(std::move(r)); }, 12);
  d.Run();
  REQUIRE(last);
  REQUIRE(last->ok());
  CHECK((**last)[0].scalar_as<float>() == 2);  // step 10's element never went in
}

TEST_CASE("Queue actor: enqueue_many's row entries count against the allocation limit, even for empty rows",
          "[queue][bad_input]") {
  Deterministic d;
  QueueSpec spec;
  spec.component_types = {DType::kFloat32};
  auto id = d.queues->Resolve("rows", spec);
  REQUIRE(id.ok());
  AllocationLimitScope limit(int64_t{1} << 20);  // 1 MiB: about 43,000 row entries
  std::optional<Status> big, small;
  // 100,000 rows of nothing: no tensor bytes, but an entry each.
  d.queues->EnqueueMany(*id, {Tensor(DType::kFloat32, {100000, 0})}, 0, [&](Status s) { big.emplace(s); });
  d.queues->EnqueueMany(*id, {Tensor(DType::kFloat32, {1000, 0})}, 0, [&](Status s) { small.emplace(s); });
  d.Run();
  REQUIRE(big);
  CHECK(big->code() == Code::kResourceExhausted);
  CHECK(big->message().find("'rows'") != std::string::npos);
  REQUIRE(small);
  CHECK(small->ok());
  std::optional<Result<int64_t>> size;
  d.queues->Size(*id, [&](Result<int64_t> r) { size.emplace(r); });
  d.Run();
  REQUIRE(size);
  CHECK(**size == 1000);  // the refused batch added nothing
}
