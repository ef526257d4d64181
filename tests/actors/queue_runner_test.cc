#include <catch2/catch.hpp>

#include <atomic>
#include <set>

#include "shardflow/ops.h"
#include "shardflow/queue_ops.h"
#include "shardflow/queue_runner.h"
#include "shardflow/session.h"

using namespace sf;

namespace {

// A float32 scalar queue of `capacity` fed from placeholder "x" by "enq",
// read by "deq", closed by "close" and "cancel".
struct RunnerGraph {
  Graph g;
  explicit RunnerGraph(int64_t capacity) {
    ops::QueueOptions o;
    o.shapes = {PartialShape(Shape{})};
    o.capacity = capacity;
    auto q = ops::FIFOQueue(g, {DType::kFloat32}, o, "q");
    auto x = ops::Placeholder(g, DType::kFloat32, PartialShape(Shape{}), "x");
    ops::QueueEnqueue(g, q, {x}, 0, "enq");
    ops::QueueDequeue(g, q, 0, "deq");
    ops::QueueClose(g, q, false, "close");
    ops::QueueClose(g, q, true, "cancel");
  }
};

}  // namespace

TEST_CASE("QueueRunner feeds a queue from several loops and closes it at the end of input", "[queue_runner]") {
  RunnerGraph rg(/*capacity=*/8);
  REQUIRE(rg.g.status().ok());
  Session s(rg.g);
  std::atomic<int> next{0};
  QueueRunnerOptions o;
  o.parallel = 3;
  o.close_target = "close";
  QueueRunner runner(s, {"enq"}, [&](int) -> Result<FeedMap> {
    const int v = next.fetch_add(1);
    if (v >= 300) return OutOfRange("input exhausted");
    return FeedMap{{"x", Tensor::Scalar<float>(static_cast<float>(v))}};
  }, o);
  REQUIRE(runner.Start().ok());
  CHECK(runner.Start().code() == Code::kFailedPrecondition);
  std::set<int> got;
  for (;;) {
    auto r = s.Run({}, std::vector<std::string>{"deq"});
    if (!r.ok()) {
      CHECK(r.status().code() == Code::kOutOfRange);
      break;
    }
    got.insert((*r)[0].scalar_as<int>());
  }
  CHECK(runner.Join().ok());
  CHECK(got.size() == 300);
  CHECK(*got.begin() == 0);
  CHECK(*got.rbegin() == 299);
  CHECK(runner.steps() == 300);
}

TEST_CASE("QueueRunner Stop cancels enqueues waiting on a full queue", "[queue_runner]") {
  RunnerGraph rg(/*capacity=*/4);
  REQUIRE(rg.g.status().ok());
  Session s(rg.g);
  QueueRunnerOptions o;
  o.parallel = 2;
  o.cancel_target = "cancel";
  QueueRunner runner(s, {"enq"}, [](int loop) -> Result<FeedMap> {
    return FeedMap{{"x", Tensor::Scalar<float>(static_cast<float>(loop))}};
  }, o);
  REQUIRE(runner.Start().ok());
  for (int i = 0; i < 10; ++i) REQUIRE(s.Run({}, std::vector<std::string>{"deq"}).ok());
  runner.Stop();
  CHECK(runner.Join().ok());
  CHECK(runner.steps() >= 10);
}

TEST_CASE("QueueRunner reports a real step error", "[queue_runner]") {
  RunnerGraph rg(/*capacity=*/4);
  REQUIRE(rg.g.status().ok());
  Session s(rg.g);
  QueueRunnerOptions o;
  o.close_target = "close";
  // A wrongly shaped feed: the enqueue step fails with InvalidArgument.
  QueueRunner runner(s, {"enq"}, [](int) -> Result<FeedMap> {
    return FeedMap{{"x", Tensor::FromVector(std::vector<float>{1, 2})}};
  }, o);
  REQUIRE(runner.Start().ok());
  Status st = runner.Join();
  CHECK(st.code() == Code::kInvalidArgument);
  // The close target still ran: consumers are not left waiting.
  auto r = s.Run({}, std::vector<std::string>{"deq"});
  CHECK(r.status().code() == Code::kOutOfRange);
  QueueRunner bad(s, {}, nullptr);
  CHECK(bad.Start().code() == Code::kInvalidArgument);
}
