// Queues through sessions and through the QueueService.
//
// The tests that let a request wait pause for a fixed time (testing::PauseFor):
// a queue offers no query for its waiting requests (QueueService answers only
// Size), so "the dequeue is waiting" cannot be waited on. The pause gives the
// request time to reach the queue actor and, where a CHECK(!...Done())
// follows, is what that negative check is about: the request stays unanswered
// at least that long. Each test's assertions hold whichever request reaches
// the queue first; a request that is late only runs the path without a wait.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <limits>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "actors/queue_actors.h"
#include "shardflow/ops.h"
#include "shardflow/queue_ops.h"
#include "shardflow/session.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;

namespace {

bool Contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

// The result of one RunAsync, waited for by the test thread.
class Pending {
 public:
  std::function<void(Result<std::vector<Tensor>>)> Callback() {
    return [this](Result<std::vector<Tensor>> r) {
      std::lock_guard<std::mutex> l(mu_);
      result_.emplace(std::move(r));
      cv_.notify_all();
    };
  }
  bool Done() {
    std::lock_guard<std::mutex> l(mu_);
    return result_.has_value();
  }
  // Waits up to 10 s (a hang fails the test instead of the suite).
  Result<std::vector<Tensor>> Wait() {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, std::chrono::seconds(10), [&] { return result_.has_value(); }))
      return Internal("timed out waiting for the step");
    return *result_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Result<std::vector<Tensor>>> result_;
};

// A one-component float32 scalar queue with an enqueue of placeholder "x",
// a dequeue, a dequeue_many of 3, a size and closes.
struct ScalarQueue {
  Graph g;
  Output q, x, deq, size;
  std::vector<Output> deq3;
  Operation enq, close, cancel;
  explicit ScalarQueue(int64_t capacity = -1, int64_t dequeue_timeout_ms = 0) {
    ops::QueueOptions o;
    o.shapes = {PartialShape(Shape{})};
    o.capacity = capacity;
    q = ops::FIFOQueue(g, {DType::kFloat32}, o, "q");
    x = ops::Placeholder(g, DType::kFloat32, PartialShape(Shape{}), "x");
    enq = ops::QueueEnqueue(g, q, {x}, 0, "enq");
    deq = ops::QueueDequeue(g, q, dequeue_timeout_ms, "deq")[0];
    deq3 = ops::QueueDequeueMany(g, q, 3, dequeue_timeout_ms, "deq3");
    size = ops::QueueSize(g, q, "size");
    close = ops::QueueClose(g, q, false, "close");
    cancel = ops::QueueClose(g, q, true, "close_cancel");
  }
};

Status Enqueue(Session& s, float v) {
  return s.Run({{"x", Tensor::Scalar<float>(v)}}, std::vector<std::string>{}, {"enq"}).status();
}

Result<float> Dequeue(Session& s) {
  auto r = s.Run({}, std::vector<std::string>{"deq"});
  if (!r.ok()) return r.status();
  return (*r)[0].scalar_as<float>();
}

int Size(Session& s) {
  auto r = s.Run({}, std::vector<std::string>{"size"});
  REQUIRE(r.ok());
  return (*r)[0].scalar_as<int>();
}

// A padding queue "pad" of (float32 [-1], int32 scalar) elements, with an
// enqueue "enq" fed by placeholders "x" and "n"; the queue.
Output PaddingPairQueue(Graph& g) {
  ops::QueueOptions o;
  o.shapes = {PartialShape({-1}), PartialShape(Shape{})};
  auto q = ops::PaddingFIFOQueue(g, {DType::kFloat32, DType::kInt32}, o, "pad");
  auto x = ops::Placeholder(g, DType::kFloat32, PartialShape({-1}), "x");
  auto n = ops::Placeholder(g, DType::kInt32, PartialShape(Shape{}), "n");
  ops::QueueEnqueue(g, q, {x, n}, 0, "enq");
  return q;
}

}  // namespace

TEST_CASE("FIFOQueue keeps order through enqueue_many and dequeue_many", "[queue]") {
  ScalarQueue sq;
  REQUIRE(sq.g.status().ok());
  Session s(sq.g);
  for (float v : {1.f, 2.f, 3.f, 4.f}) REQUIRE(Enqueue(s, v).ok());
  CHECK(Size(s) == 4);
  CHECK(*Dequeue(s) == 1.f);
  auto three = s.Run({}, sq.deq3);
  REQUIRE(three.ok());
  CHECK((*three)[0].shape() == Shape{3});
  CHECK((*three)[0].ToVector<float>() == std::vector<float>{2, 3, 4});
  CHECK(Size(s) == 0);

  // Two components, a batch of three elements in one enqueue_many.
  Graph g;
  ops::QueueOptions o;
  o.shapes = {PartialShape({2}), PartialShape(Shape{})};
  auto q = ops::FIFOQueue(g, {DType::kFloat32, DType::kInt32}, o);
  Operation many = ops::QueueEnqueueMany(
      g, q, {ops::Const(g, std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}), ops::Const(g, std::vector<int32_t>{7, 8, 9})});
  auto one = ops::QueueDequeue(g, q);
  auto two = ops::QueueDequeueMany(g, q, 2);
  REQUIRE(g.status().ok());
  Session s2(g);
  REQUIRE(s2.Run({}, std::vector<Output>{}, {many}).ok());
  auto a = s2.Run({}, one);
  REQUIRE(a.ok());
  CHECK((*a)[0].ToVector<float>() == std::vector<float>{1, 2});
  CHECK((*a)[1].ToVector<int>() == std::vector<int>{7});
  auto b = s2.Run({}, two);
  REQUIRE(b.ok());
  CHECK((*b)[0].shape() == Shape{2, 2});
  CHECK((*b)[0].ToVector<float>() == std::vector<float>{3, 4, 5, 6});
  CHECK((*b)[1].ToVector<int>() == std::vector<int>{8, 9});
}

TEST_CASE("RandomShuffleQueue: seeded order is deterministic and keeps min_after_dequeue", "[queue]") {
  Graph g;
  ops::QueueOptions o;
  o.shapes = {PartialShape(Shape{})};
  auto q = ops::RandomShuffleQueue(g, {DType::kInt32}, 100, 5, 42, o, "shuffle");
  std::vector<int32_t> values(20);
  for (int i = 0; i < 20; ++i) values[i] = i;
  Operation fill = ops::QueueEnqueueMany(g, q, {ops::Const(g, values)});
  auto deq = ops::QueueDequeue(g, q)[0];
  auto deq_timeout = ops::QueueDequeue(g, q, 50)[0];
  Operation close = ops::QueueClose(g, q);
  REQUIRE(g.status().ok());

  auto first15 = [&](Session& s) {
    REQUIRE(s.Run({}, std::vector<Output>{}, {fill}).ok());
    std::vector<int> got;
    for (int i = 0; i < 15; ++i) {
      auto r = s.Run({}, std::vector<Output>{deq});
      REQUIRE(r.ok());
      got.push_back((*r)[0].scalar_as<int>());
    }
    return got;
  };
  Session s1(g), s2(g);
  std::vector<int> a = first15(s1), b = first15(s2);
  CHECK(a == b);
  std::vector<int> in_order(15);
  for (int i = 0; i < 15; ++i) in_order[i] = i;
  CHECK(a != in_order);
  // Five must stay to mix while the queue is open: the next dequeue waits.
  auto waited = s1.Run({}, std::vector<Output>{deq_timeout});
  REQUIRE(!waited.ok());
  CHECK(waited.status().code() == Code::kUnavailable);
  CHECK(Contains(waited.status(), "deadline exceeded"));
  // Closing releases them.
  REQUIRE(s1.Run({}, std::vector<Output>{}, {close}).ok());
  for (int i = 0; i < 5; ++i) {
    auto r = s1.Run({}, std::vector<Output>{deq});
    REQUIRE(r.ok());
    a.push_back((*r)[0].scalar_as<int>());
  }
  std::sort(a.begin(), a.end());
  std::vector<int> all(20);
  for (int i = 0; i < 20; ++i) all[i] = i;
  CHECK(a == all);
  auto after = s1.Run({}, std::vector<Output>{deq});
  CHECK(after.status().code() == Code::kOutOfRange);
}

TEST_CASE("PaddingFIFOQueue pads dequeue_many to the batch's largest shape", "[queue]") {
  Graph g;
  Output q = PaddingPairQueue(g);
  auto batch = ops::QueueDequeueMany(g, q, 3);
  auto single = ops::QueueDequeue(g, q);
  auto bx = ops::Placeholder(g, DType::kFloat32, PartialShape({-1, -1}), "bx");
  auto bn = ops::Placeholder(g, DType::kInt32, PartialShape({-1}), "bn");
  ops::QueueEnqueueMany(g, q, {bx, bn}, 0, "enq_many");
  REQUIRE(g.status().ok());
  CHECK(batch[0].shape() == PartialShape({3, -1}));
  Session s(g);
  auto enq = [&](std::vector<float> v) {
    const int32_t len = static_cast<int32_t>(v.size());
    return s.Run({{"x", Tensor::FromVector(v)}, {"n", Tensor::Scalar<int32_t>(len)}},
                 std::vector<std::string>{}, {"enq"}).status();
  };
  REQUIRE(enq({1}).ok());
  REQUIRE(enq({1, 2, 3}).ok());
  REQUIRE(enq({4, 5}).ok());
  REQUIRE(enq({6, 7}).ok());
  auto r = s.Run({}, batch);
  REQUIRE(r.ok());
  CHECK((*r)[0].shape() == Shape{3, 3});
  CHECK((*r)[0].ToVector<float>() == std::vector<float>{1, 0, 0, 1, 2, 3, 4, 5, 0});
  CHECK((*r)[1].ToVector<int>() == std::vector<int>{1, 3, 2});
  // A single dequeue is not padded.
  auto one = s.Run({}, single);
  REQUIRE(one.ok());
  CHECK((*one)[0].ToVector<float>() == std::vector<float>{6, 7});
  // Rows of an enqueue_many batch pad alongside whole elements.
  Session s2(g);
  REQUIRE(s2.Run({{"bx", Tensor::FromVector(std::vector<float>{1, 2, 3, 4}, {2, 2})},
                  {"bn", Tensor::FromVector(std::vector<int32_t>{2, 2})}},
                 std::vector<std::string>{}, {"enq_many"}).ok());
  REQUIRE(s2.Run({{"x", Tensor::FromVector(std::vector<float>{5, 6, 7})}, {"n", Tensor::Scalar<int32_t>(3)}},
                 std::vector<std::string>{}, {"enq"}).ok());
  auto mixed = s2.Run({}, batch);
  REQUIRE(mixed.ok());
  CHECK((*mixed)[0].shape() == Shape{3, 3});
  CHECK((*mixed)[0].ToVector<float>() == std::vector<float>{1, 2, 0, 3, 4, 0, 5, 6, 7});
  CHECK((*mixed)[1].ToVector<int>() == std::vector<int>{2, 2, 3});

  // A padding queue needs every rank.
  Graph bad;
  ops::PaddingFIFOQueue(bad, {DType::kFloat32}, ops::QueueOptions(), "nopad");
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK(Contains(bad.status(), "needs a shape per component"));
}

TEST_CASE("QueueIncarnation names the queue object: the same for its name in one session, another in the next",
          "[queue]") {
  auto build = [](Graph& g, const std::string& shared) {
    ops::QueueOptions o;
    o.shapes = {PartialShape(Shape{})};
    o.shared_name = shared;
    return ops::QueueIncarnation(g, ops::FIFOQueue(g, {DType::kFloat32}, o));
  };
  Graph g;
  const Output a = build(g, "a"), a_again = build(g, "a"), b = build(g, "b");
  REQUIRE(g.status().ok());
  CHECK(a.shape() == PartialShape(Shape{}));
  int64_t first = 0;
  {
    Session s(g);
    auto got = s.Run({}, std::vector<Output>{a, a_again, b});
    REQUIRE(got.ok());
    first = (*got)[0].scalar_as<int64_t>();
    CHECK(first != 0);
    CHECK((*got)[1].scalar_as<int64_t>() == first);  // one queue, one incarnation
    CHECK((*got)[2].scalar_as<int64_t>() != first);
    CHECK(s.Run({}, std::vector<Output>{a}).value()[0].scalar_as<int64_t>() == first);  // stable
  }
  Session next(g);  // a queue made afresh under the same name
  auto again = next.Run({}, std::vector<Output>{a});
  REQUIRE(again.ok());
  CHECK((*again)[0].scalar_as<int64_t>() != first);
}

TEST_CASE("dequeue_up_to waits for n while open and takes what is left once closed", "[queue]") {
  Graph g;
  Output q = PaddingPairQueue(g);
  auto up3 = ops::QueueDequeueUpTo(g, q, 3, 0, "up3");
  auto up3_timeout = ops::QueueDequeueUpTo(g, q, 3, 40, "up3_timeout");
  auto size = ops::QueueSize(g, q, "size");
  ops::QueueClose(g, q, false, "close");
  REQUIRE(g.status().ok());
  // Fewer than n may come back, so dimension 0 is unknown.
  CHECK(up3[0].shape() == PartialShape({-1, -1}));
  CHECK(up3[1].shape() == PartialShape({-1}));
  Session s(g);
  auto enq = [&](std::vector<float> v) {
    const int32_t len = static_cast<int32_t>(v.size());
    return s.Run({{"x", Tensor::FromVector(v)}, {"n", Tensor::Scalar<int32_t>(len)}},
                 std::vector<std::string>{}, {"enq"}).status();
  };
  for (auto v : {std::vector<float>{1}, {2, 3}, {4}, {5, 6, 7}, {8}}) REQUIRE(enq(v).ok());
  // Open: exactly n, padded like dequeue_many.
  auto full = s.Run({}, up3);
  REQUIRE(full.ok());
  CHECK((*full)[0].shape() == Shape{3, 2});
  CHECK((*full)[0].ToVector<float>() == std::vector<float>{1, 0, 2, 3, 4, 0});
  CHECK((*full)[1].ToVector<int>() == std::vector<int>{1, 2, 1});
  // Open with two left: it waits (here until its timeout), and takes nothing.
  auto waited = s.Run({}, up3_timeout);
  REQUIRE(!waited.ok());
  CHECK(waited.status().code() == Code::kUnavailable);
  CHECK(Contains(waited.status(), "deadline exceeded"));
  CHECK(s.Run({}, std::vector<Output>{size}).value()[0].scalar_as<int>() == 2);
  // A dequeue_up_to already waiting when the queue closes gets the remainder.
  Pending pending;
  s.RunAsync({}, {"up3:0", "up3:1"}, {}, pending.Callback());
  testing::PauseFor(20ms);  // lets it reach the queue before the close
  REQUIRE(s.Run({}, std::vector<std::string>{}, {"close"}).ok());
  auto rest = pending.Wait();
  REQUIRE(rest.ok());
  CHECK((*rest)[0].shape() == Shape{2, 3});
  CHECK((*rest)[0].ToVector<float>() == std::vector<float>{5, 6, 7, 8, 0, 0});
  CHECK((*rest)[1].ToVector<int>() == std::vector<int>{3, 1});
  // Closed and empty: OutOfRange, as dequeue_many.
  auto empty = s.Run({}, up3);
  REQUIRE(!empty.ok());
  CHECK(empty.status().code() == Code::kOutOfRange);
  CHECK(Contains(empty.status(), "is closed and has 0 element(s)"));
}

TEST_CASE("dequeue_up_to on a closed shuffle queue drains what min_after_dequeue kept back", "[queue]") {
  Graph g;
  ops::QueueOptions o;
  o.shapes = {PartialShape(Shape{})};
  auto q = ops::RandomShuffleQueue(g, {DType::kInt32}, 10, 4, 7, o, "shuffle");
  std::vector<int32_t> values{0, 1, 2, 3, 4, 5};
  Operation fill = ops::QueueEnqueueMany(g, q, {ops::Const(g, values)});
  auto up4 = ops::QueueDequeueUpTo(g, q, 4)[0];
  auto up4_timeout = ops::QueueDequeueUpTo(g, q, 4, 40)[0];
  Operation close = ops::QueueClose(g, q);
  REQUIRE(g.status().ok());
  Session s(g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {fill}).ok());
  // Open: 6 queued, 4 kept back to mix, so 4 cannot be taken yet.
  auto waited = s.Run({}, std::vector<Output>{up4_timeout});
  CHECK(waited.status().code() == Code::kUnavailable);
  REQUIRE(s.Run({}, std::vector<Output>{}, {close}).ok());
  std::vector<int> got;
  for (int expect : {4, 2}) {
    auto r = s.Run({}, std::vector<Output>{up4});
    REQUIRE(r.ok());
    CHECK((*r)[0].shape() == Shape{expect});
    for (int v : (*r)[0].ToVector<int>()) got.push_back(v);
  }
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<int>{0, 1, 2, 3, 4, 5});
  CHECK(s.Run({}, std::vector<Output>{up4}).status().code() == Code::kOutOfRange);
}

TEST_CASE("dequeue_up_to refuses a count it can never serve, naming it", "[queue]") {
  Graph g;
  ops::QueueOptions o;
  o.shapes = {PartialShape(Shape{})};
  o.capacity = 4;
  auto q = ops::FIFOQueue(g, {DType::kFloat32}, o, "q");
  auto n = ops::Placeholder(g, DType::kInt32, PartialShape(Shape{}), "n");
  auto up = ops::QueueDequeueUpTo(g, q, n, 0, "up");
  REQUIRE(g.status().ok());
  Session s(g);
  auto zero = s.Run({{"n", Tensor::Scalar<int32_t>(0)}}, up);
  CHECK(zero.status().code() == Code::kInvalidArgument);
  CHECK(Contains(zero.status(), "dequeue_up_to needs n >= 1, got 0"));
  auto big = s.Run({{"n", Tensor::Scalar<int32_t>(5)}}, up);
  CHECK(big.status().code() == Code::kInvalidArgument);
  CHECK(Contains(big.status(), "dequeue_up_to of 5 elements can never be served by a queue of capacity 4"));
  // A constant count is checked when the graph is built.
  Graph bad;
  auto q2 = ops::FIFOQueue(bad, {DType::kFloat32}, o, "q");
  ops::QueueDequeueUpTo(bad, q2, 0);
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK(Contains(bad.status(), "dequeue_up_to needs n >= 1, got 0"));
  Graph huge;
  auto q3 = ops::FIFOQueue(huge, {DType::kFloat32}, o, "q");
  CHECK(ops::QueueDequeueUpTo(huge, q3, int64_t{1} << 31).empty());
  CHECK(Contains(huge.status(), "n must be at most 2147483647"));
}

TEST_CASE("A waiting dequeue is a pending reply served by a later step", "[queue]") {
  ScalarQueue sq;
  REQUIRE(sq.g.status().ok());
  // One compute thread: if the waiting dequeue held it, the enqueue could
  // never run.
  SessionOptions opts;
  opts.compute_threads = 1;
  opts.scheduler_threads = 1;
  Session s(sq.g, opts);
  Pending deq, enq;
  s.RunAsync({}, {"deq"}, {}, deq.Callback());
  testing::PauseFor(50ms);  // the dequeue stays unanswered on an empty queue
  CHECK(!deq.Done());
  s.RunAsync({{"x", Tensor::Scalar<float>(7.f)}}, {}, {"enq"}, enq.Callback());
  REQUIRE(enq.Wait().ok());
  auto r = deq.Wait();
  REQUIRE(r.ok());
  CHECK((*r)[0].scalar_as<float>() == 7.f);
}

TEST_CASE("A full queue is back-pressure: an enqueue waits for a dequeue", "[queue]") {
  ScalarQueue sq(/*capacity=*/2);
  REQUIRE(sq.g.status().ok());
  Session s(sq.g);
  REQUIRE(Enqueue(s, 1.f).ok());
  REQUIRE(Enqueue(s, 2.f).ok());
  Pending third;
  s.RunAsync({{"x", Tensor::Scalar<float>(3.f)}}, {}, {"enq"}, third.Callback());
  testing::PauseFor(50ms);  // the enqueue stays unanswered on a full queue
  CHECK(!third.Done());
  CHECK(Size(s) == 2);
  CHECK(*Dequeue(s) == 1.f);
  REQUIRE(third.Wait().ok());
  CHECK(Size(s) == 2);
  CHECK(*Dequeue(s) == 2.f);
  CHECK(*Dequeue(s) == 3.f);
}

TEST_CASE("Closing a queue: OutOfRange for dequeues it cannot serve and nothing lost", "[queue]") {
  ScalarQueue sq;
  REQUIRE(sq.g.status().ok());
  Session s(sq.g);
  // A dequeue already waiting is woken by the close.
  Pending waiting;
  s.RunAsync({}, {"deq"}, {}, waiting.Callback());
  testing::PauseFor(20ms);  // lets the dequeue reach the queue before the enqueue
  REQUIRE(Enqueue(s, 1.f).ok());
  REQUIRE(waiting.Wait().ok());
  Pending woken;
  s.RunAsync({}, {"deq"}, {}, woken.Callback());
  testing::PauseFor(20ms);  // lets the dequeue reach the queue before the enqueues
  REQUIRE(Enqueue(s, 2.f).ok());
  REQUIRE(Enqueue(s, 3.f).ok());
  // woken took 2; 3 remains. Now a dequeue_many of 3 waits, then fails on close.
  REQUIRE(woken.Wait().ok());
  Pending many;
  s.RunAsync({}, {"deq3"}, {}, many.Callback());
  testing::PauseFor(20ms);  // the dequeue_many stays unanswered with one element queued
  CHECK(!many.Done());
  REQUIRE(s.Run({}, std::vector<std::string>{}, {"close"}).ok());
  auto m = many.Wait();
  REQUIRE(!m.ok());
  CHECK(m.status().code() == Code::kOutOfRange);
  CHECK(Contains(m.status(), "FIFOQueue 'q' is closed and has 1 element(s), dequeue asked for 3"));
  // Nothing was lost: the remaining element still dequeues.
  CHECK(Size(s) == 1);
  CHECK(*Dequeue(s) == 3.f);
  auto empty = Dequeue(s);
  CHECK(empty.status().code() == Code::kOutOfRange);
  auto late = Enqueue(s, 4.f);
  CHECK(late.code() == Code::kAborted);
  CHECK(Contains(late, "is closed"));
}

TEST_CASE("Close with cancel_pending_enqueues fails waiting enqueues and without it they finish", "[queue]") {
  // Through the service from one thread, so the requests reach the actor in
  // the order they are made: the second enqueue surely waits when the close
  // arrives.
  for (bool cancel : {true, false}) {
    auto svc = runtime::NewQueueService(2);
    QueueSpec spec;
    spec.component_types = {DType::kFloat32};
    spec.capacity = 1;
    auto id = svc->Resolve("c", spec);
    REQUIRE(id.ok());
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Status> enq(2);
    std::vector<Result<QueueTuple>> deq(3, Status(Code::kInternal, "not answered"));
    int answered = 0;
    auto note = [&] {
      std::lock_guard<std::mutex> l(mu);
      ++answered;
      cv.notify_all();
    };
    for (int i = 0; i < 2; ++i)
      svc->Enqueue(*id, {Tensor::Scalar<float>(static_cast<float>(i + 1))}, 0, [&, i](Status s) {
        enq[i] = s;
        note();
      });
    svc->Close(*id, cancel, [&](Status s) { note(); });
    for (int i = 0; i < 3; ++i)
      svc->Dequeue(*id, 0, [&, i](Result<QueueTuple> r) {
        deq[i] = std::move(r);
        note();
      });
    std::unique_lock<std::mutex> l(mu);
    REQUIRE(cv.wait_for(l, std::chrono::seconds(10), [&] { return answered == 6; }));
    CHECK(enq[0].ok());
    REQUIRE(deq[0].ok());
    CHECK((*deq[0])[0].scalar_as<float>() == 1.f);
    if (cancel) {
      CHECK(enq[1].code() == Code::kAborted);
      CHECK(Contains(enq[1], "FIFOQueue 'c' was closed; its pending enqueue was cancelled"));
      CHECK(deq[1].status().code() == Code::kOutOfRange);
    } else {
      CHECK(enq[1].ok());
      REQUIRE(deq[1].ok());
      CHECK((*deq[1])[0].scalar_as<float>() == 2.f);
    }
    CHECK(deq[2].status().code() == Code::kOutOfRange);
  }
}

TEST_CASE("Queue timeouts fail a wait with a deadline error", "[queue]") {
  ScalarQueue sq(/*capacity=*/1, /*dequeue_timeout_ms=*/40);
  Graph& g = sq.g;
  auto y = ops::Placeholder(g, DType::kFloat32, PartialShape(Shape{}), "y");
  ops::QueueEnqueue(g, sq.q, {y}, 40, "enq_timeout");
  REQUIRE(g.status().ok());
  Session s(g);
  auto t0 = std::chrono::steady_clock::now();
  auto r = Dequeue(s);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(!r.ok());
  CHECK(r.status().code() == Code::kUnavailable);
  CHECK(Contains(r.status(), "deadline exceeded: dequeue of 1 element(s) from FIFOQueue 'q' waited 40 ms"));
  CHECK(Contains(r.status(), "node 'deq' (op QueueDequeue)"));
  CHECK(ms >= 35);
  REQUIRE(Enqueue(s, 1.f).ok());
  auto full = s.Run({{"y", Tensor::Scalar<float>(2.f)}}, std::vector<std::string>{}, {"enq_timeout"});
  REQUIRE(!full.ok());
  CHECK(Contains(full.status(), "deadline exceeded: enqueue to FIFOQueue 'q'"));
  // The timed-out enqueue changed nothing.
  CHECK(Size(s) == 1);
  CHECK(*Dequeue(s) == 1.f);
}

TEST_CASE("Bad queue input gives clear errors and a rejected enqueue changes nothing", "[queue]") {
  // At build time, when the handle comes straight from the queue op.
  {
    Graph g;
    ops::QueueOptions o;
    o.shapes = {PartialShape({2})};
    auto q = ops::FIFOQueue(g, {DType::kFloat32}, o, "q");
    ops::QueueEnqueue(g, q, {ops::Const(g, 1)});
    CHECK(g.status().code() == Code::kInvalidArgument);
    CHECK(Contains(g.status(), "queue 'q' component 0 is float32, got int32"));
  }
  {
    Graph g;
    ops::QueueOptions o;
    o.shapes = {PartialShape({2})};
    auto q = ops::FIFOQueue(g, {DType::kFloat32}, o, "q");
    ops::QueueEnqueue(g, q, {ops::Const(g, std::vector<float>{1, 2, 3}, {3})});
    CHECK(Contains(g.status(), "queue 'q' component 0 has shape [2], got shape [3]"));
  }
  {
    Graph g;
    auto v = ops::VarHandle(g, "v", DType::kFloat32, PartialShape(Shape{}));
    ops::QueueEnqueue(g, v, {ops::Const(g, 1.f)});
    CHECK(Contains(g.status(), "not a queue"));
  }
  // At run time, when the graph cannot see the queue (handle through Identity).
  Graph g;
  ops::QueueOptions o;
  o.shapes = {PartialShape({2})};
  auto q = ops::FIFOQueue(g, {DType::kFloat32}, o, "q");
  auto h = ops::Identity(g, q);
  auto x = ops::Placeholder(g, DType::kFloat32, PartialShape(), "x");
  auto xd = ops::Placeholder(g, DType::kFloat64, PartialShape(), "xd");
  ops::QueueEnqueue(g, h, {x}, 0, "enq");
  ops::QueueEnqueue(g, h, {xd}, 0, "enq_double");
  ops::QueueEnqueue(g, h, {x, x}, 0, "enq_two");
  ops::QueueEnqueueMany(g, h, {x}, 0, "enq_many");
  auto size = ops::QueueSize(g, q);
  auto deq = ops::QueueDequeue(g, q)[0];
  REQUIRE(g.status().ok());
  Session s(g);
  auto run = [&](const char* target, Tensor v, const char* feed = "x") {
    return s.Run({{feed, v}}, std::vector<std::string>{}, {target}).status();
  };
  REQUIRE(run("enq", Tensor::FromVector(std::vector<float>{1, 2})).ok());
  Status wrong_shape = run("enq", Tensor::FromVector(std::vector<float>{1, 2, 3}));
  CHECK(wrong_shape.code() == Code::kInvalidArgument);
  CHECK(Contains(wrong_shape, "node 'enq' (op QueueEnqueue)"));
  CHECK(Contains(wrong_shape, "queue 'q' component 0 has shape [2], enqueue gave shape [3]"));
  Status wrong_type = run("enq_double", Tensor::FromVector(std::vector<double>{1, 2}), "xd");
  CHECK(Contains(wrong_type, "queue 'q' component 0 is float32, enqueue gave float64"));
  Status two = run("enq_two", Tensor::FromVector(std::vector<float>{1, 2}));
  CHECK(Contains(two, "queue 'q' has 1 components, enqueue gave 2"));
  Status scalar_batch = run("enq_many", Tensor::Scalar<float>(1));
  CHECK(Contains(scalar_batch, "enqueue_many needs a batch dimension"));
  Status batch_shape = run("enq_many", Tensor::FromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}));
  CHECK(Contains(batch_shape, "enqueue_many gave elements of shape [3]"));
  // Only the good element is there.
  auto n = s.Run({}, std::vector<Output>{size});
  REQUIRE(n.ok());
  CHECK((*n)[0].scalar_as<int>() == 1);
  auto got = s.Run({}, std::vector<Output>{deq});
  REQUIRE(got.ok());
  CHECK((*got)[0].ToVector<float>() == std::vector<float>{1, 2});

  // A FIFOQueue cannot batch elements of different shapes; the failed
  // dequeue_many puts them back.
  Graph g2;
  auto q2 = ops::FIFOQueue(g2, {DType::kFloat32}, ops::QueueOptions(), "ragged");
  auto y = ops::Placeholder(g2, DType::kFloat32, PartialShape(), "y");
  ops::QueueEnqueue(g2, q2, {y}, 0, "enq");
  auto batch = ops::QueueDequeueMany(g2, q2, 2);
  auto one = ops::QueueDequeue(g2, q2);
  REQUIRE(g2.status().ok());
  Session s2(g2);
  REQUIRE(s2.Run({{"y", Tensor::FromVector(std::vector<float>{1})}}, std::vector<std::string>{}, {"enq"}).ok());
  REQUIRE(s2.Run({{"y", Tensor::FromVector(std::vector<float>{2, 3})}}, std::vector<std::string>{}, {"enq"}).ok());
  auto b = s2.Run({}, batch);
  REQUIRE(!b.ok());
  CHECK(Contains(b.status(), "queue 'ragged' component 0: cannot batch elements of shapes [1] and [2]"));
  auto first = s2.Run({}, one);
  REQUIRE(first.ok());
  CHECK((*first)[0].ToVector<float>() == std::vector<float>{1});

  // Two queue ops sharing a name must agree.
  Graph g3;
  ops::QueueOptions a, c;
  a.shared_name = c.shared_name = "shared";
  c.capacity = 5;
  auto qa = ops::FIFOQueue(g3, {DType::kFloat32}, a);
  auto qc = ops::FIFOQueue(g3, {DType::kFloat32}, c);
  auto sa = ops::QueueSize(g3, qa);
  auto sc = ops::QueueSize(g3, qc);
  REQUIRE(g3.status().ok());
  Session s3(g3);
  REQUIRE(s3.Run({}, std::vector<Output>{sa}).ok());
  auto clash = s3.Run({}, std::vector<Output>{sc});
  CHECK(clash.status().code() == Code::kInvalidArgument);
  CHECK(Contains(clash.status(), "queue 'shared' already exists"));
}

TEST_CASE("A dequeue_many larger than the capacity is refused at once", "[queue]") {
  ScalarQueue sq(/*capacity=*/16);
  auto all = ops::QueueDequeueMany(sq.g, sq.q, 200)[0];
  REQUIRE(sq.g.status().ok());
  Session s(sq.g);
  auto r = s.Run({}, std::vector<Output>{all});
  REQUIRE(!r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(Contains(r.status(), "dequeue_many of 200 elements can never be served by a queue of capacity 16"));
}

TEST_CASE("Concurrent producers and a consumer through a small queue", "[queue]") {
  ScalarQueue sq(/*capacity=*/8);
  REQUIRE(sq.g.status().ok());
  Session s(sq.g);
  std::vector<std::thread> producers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i)
        if (!Enqueue(s, static_cast<float>(t * 1000 + i)).ok()) ++failures;
    });
  }
  std::vector<int> got;
  for (int i = 0; i < 200; ++i) {
    auto v = Dequeue(s);
    REQUIRE(v.ok());
    got.push_back(static_cast<int>(*v));
  }
  for (auto& p : producers) p.join();
  CHECK(failures.load() == 0);
  CHECK(Size(s) == 0);
  std::vector<int> last(4, -1);
  for (int v : got) {
    const int t = v / 1000, i = v % 1000;
    REQUIRE(t < 4);
    CHECK(i == last[t] + 1);
    last[t] = i;
  }
  CHECK(last == std::vector<int>{49, 49, 49, 49});
}

TEST_CASE("Destroying a session fails steps waiting on a queue instead of hanging", "[queue]") {
  ScalarQueue sq;
  ops::QueueDequeue(sq.g, sq.q, 600000, "deq_long");
  REQUIRE(sq.g.status().ok());
  Pending waiting, timed;
  const auto t0 = std::chrono::steady_clock::now();
  {
    Session s(sq.g);
    s.RunAsync({}, {"deq"}, {}, waiting.Callback());
    s.RunAsync({}, {"deq_long"}, {}, timed.Callback());
    testing::PauseFor(20ms);  // lets both dequeues reach the queue before the session goes
  }
  // Neither the waiter nor its pending ten-minute timer holds the session up.
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  for (Pending* p : {&waiting, &timed}) {
    auto r = p->Wait();
    REQUIRE(!r.ok());
    CHECK(r.status().code() == Code::kAborted);
    CHECK(Contains(r.status(), "shutting down"));
  }
}

TEST_CASE("QueueService used directly with callbacks only", "[queue]") {
  auto svc = runtime::NewQueueService(2);
  QueueSpec spec;
  spec.component_types = {DType::kFloat32};
  spec.capacity = 4;
  auto id = svc->Resolve("direct", spec);
  REQUIRE(id.ok());
  CHECK(svc->NameOf(*id) == "direct");
  std::mutex mu;
  std::condition_variable cv;
  std::vector<float> got;
  int enqueued = 0;
  for (int i = 0; i < 100; ++i) {
    svc->Dequeue(*id, 0, [&](Result<QueueTuple> r) {
      std::lock_guard<std::mutex> l(mu);
      got.push_back(r.ok() ? (*r)[0].scalar_as<float>() : -1.f);
      cv.notify_all();
    });
  }
  for (int i = 0; i < 100; ++i) {
    svc->Enqueue(*id, {Tensor::Scalar<float>(static_cast<float>(i))}, 0, [&](Status s) {
      std::lock_guard<std::mutex> l(mu);
      enqueued += s.ok();
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> l(mu);
  REQUIRE(cv.wait_for(l, std::chrono::seconds(10), [&] { return got.size() == 100 && enqueued == 100; }));
  for (int i = 0; i < 100; ++i) CHECK(got[i] == static_cast<float>(i));
  l.unlock();
  // An invalid spec is refused before any actor starts.
  spec.min_after_dequeue = 10;
  spec.kind = QueueSpec::Kind::kRandomShuffle;
  auto bad = svc->Resolve("bad", spec);
  CHECK(Contains(bad.status(), "min_after_dequeue (10) must be below capacity (4)"));
}

TEST_CASE("A token queue is a barrier: one consumer waits for N producers", "[queue]") {
  // The coordination pattern sync replication builds on: each of N workers
  // enqueues a token when its part is done; a dequeue_many of N returns once
  // all have.
  Graph g;
  ops::QueueOptions o;
  o.shapes = {PartialShape(Shape{})};
  auto tokens = ops::FIFOQueue(g, {DType::kInt32}, o, "tokens");
  auto worker = ops::Placeholder(g, DType::kInt32, PartialShape(Shape{}), "worker");
  ops::QueueEnqueue(g, tokens, {worker}, 0, "done");
  ops::QueueDequeueMany(g, tokens, 4, 0, "barrier");
  REQUIRE(g.status().ok());
  Session s(g);
  Pending barrier;
  s.RunAsync({}, {"barrier"}, {}, barrier.Callback());
  for (int w : {2, 0, 3}) {
    REQUIRE(s.Run({{"worker", Tensor::Scalar<int32_t>(w)}}, std::vector<std::string>{}, {"done"}).ok());
  }
  testing::PauseFor(30ms);  // three tokens of four: the barrier stays unanswered
  CHECK(!barrier.Done());
  Pending last;
  s.RunAsync({{"worker", Tensor::Scalar<int32_t>(1)}}, {}, {"done"}, last.Callback());
  REQUIRE(last.Wait().ok());
  auto r = barrier.Wait();
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<int>() == std::vector<int>{2, 0, 3, 1});
}

TEST_CASE("Every queue kind carries elements with a dimension of 0", "[queue][zero_size]") {
  for (const std::string kind : {"FIFO", "RandomShuffle", "PaddingFIFO"}) {
    INFO(kind);
    Graph g;
    ops::QueueOptions o;
    o.shapes = {PartialShape({2, kind == "PaddingFIFO" ? -1 : 0})};
    Output q = kind == "FIFO"            ? ops::FIFOQueue(g, {DType::kFloat32}, o)
               : kind == "PaddingFIFO" ? ops::PaddingFIFOQueue(g, {DType::kFloat32}, o)
                                       : ops::RandomShuffleQueue(g, {DType::kFloat32}, 10, 0, 1, o);
    Operation one = ops::QueueEnqueue(g, q, {ops::Zeros(g, DType::kFloat32, {2, 0})});
    Operation three = ops::QueueEnqueueMany(g, q, {ops::Zeros(g, DType::kFloat32, {3, 2, 0})});
    Operation none = ops::QueueEnqueueMany(g, q, {ops::Zeros(g, DType::kFloat32, {0, 2, 0})});
    Output size = ops::QueueSize(g, q);
    auto deq = ops::QueueDequeue(g, q), deq3 = ops::QueueDequeueMany(g, q, 3);
    Operation close = ops::QueueClose(g, q);
    INFO(g.status().ToString());
    REQUIRE(g.status().ok());
    Session s(g);
    Status st = s.Run({}, std::vector<Output>{}, {one, three, none}).status();
    INFO(st.ToString());
    REQUIRE(st.ok());
    auto n = s.Run({}, std::vector<Output>{size});
    REQUIRE(n.ok());
    CHECK((*n)[0].ToVector<int32_t>() == std::vector<int32_t>{4});
    for (auto [fetch, shape] : {std::pair{deq[0], Shape{2, 0}}, {deq3[0], Shape{3, 2, 0}}}) {
      auto r = s.Run({}, std::vector<Output>{fetch});
      INFO(r.status().ToString());
      REQUIRE(r.ok());
      CHECK((*r)[0].shape() == shape);
    }
    CHECK(s.Run({}, std::vector<Output>{}, {close}).ok());
  }
}

TEST_CASE("dequeue_many's n must fit int32: a bigger one is refused, not cut down", "[queue]") {
  Graph g;
  Output q = ops::FIFOQueue(g, {DType::kInt32}, {}, "q");
  CHECK(ops::QueueDequeueMany(g, q, int64_t{1} << 31).empty());
  REQUIRE_FALSE(g.status().ok());
  CHECK(g.status().message().find("2147483647") != std::string::npos);
  CHECK(g.status().message().find("2147483648") != std::string::npos);
  Graph ok;
  Output q2 = ops::FIFOQueue(ok, {DType::kInt32}, {}, "q");
  CHECK(ops::QueueDequeueMany(ok, q2, std::numeric_limits<int32_t>::max()).size() == 1);
  CHECK(ok.status().ok());
}

TEST_CASE("A failed step's waiting dequeue is cancelled: it ends the step and takes no later element", "[queue]") {
  ScalarQueue sq;
  // The step dequeues from an empty queue and reshapes a fed vector of 3 into [2, 2].
  auto p = ops::Placeholder(sq.g, DType::kFloat32, PartialShape({-1}), "p");
  auto bad = ops::Reshape(sq.g, p, std::vector<int64_t>{2, 2});
  REQUIRE(sq.g.status().ok());
  Session s(sq.g);
  Pending step;
  s.RunAsync({{p, Tensor::FromVector<float>({1, 2, 3})}}, std::vector<Output>{sq.deq, bad}, {}, step.Callback());
  // It fails by itself, with the reshape's error: its dequeue does not hold it open.
  auto r = step.Wait();
  REQUIRE_FALSE(r.ok());
  INFO(r.status().ToString());
  CHECK(r.status().code() == Code::kInvalidArgument);
  // An element enqueued afterwards is the next dequeue's, not the failed step's.
  REQUIRE(Enqueue(s, 5.f).ok());
  auto got = Dequeue(s);
  REQUIRE(got.ok());
  CHECK(*got == 5.f);
  CHECK(Size(s) == 0);
}

TEST_CASE("CancelWaits ends a step waiting on a queue in another thread, and later queue requests", "[queue]") {
  ScalarQueue sq;
  REQUIRE(sq.g.status().ok());
  Session s(sq.g);
  Pending waiting;
  s.RunAsync({}, std::vector<Output>{sq.deq}, {}, waiting.Callback());
  s.CancelWaits();
  auto r = waiting.Wait();
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kAborted);
  auto later = Dequeue(s);
  REQUIRE_FALSE(later.ok());
  CHECK(later.status().code() == Code::kAborted);
}
