#include <catch2/catch.hpp>

#include <atomic>
#include <set>

#include "shardflow/cluster.h"
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

namespace {

// A session whose enqueue runs fail as on a cluster that moved a part of
// them (a stale shard map) or lost its node (Unavailable), `fail` deciding
// by the run's number; every other run goes to `inner`.
class MovingSession : public SessionInterface {
 public:
  // fail: the status of enqueue run `run`; fail_release: of restart run `run` (none fail when null).
  MovingSession(Session& inner, std::function<Status(int run)> fail,
                std::function<Status(int run)> fail_release = nullptr)
      : inner_(inner), fail_(std::move(fail)), fail_release_(std::move(fail_release)) {}
  const Graph& graph() const override { return inner_.graph(); }
  Result<int64_t> SaveCheckpoint(const std::string&, int64_t, int) override { return Unimplemented("no"); }
  Result<int64_t> SaveIncrementalCheckpoint(const std::string&, int64_t, int) override { return Unimplemented("no"); }
  Status RestoreCheckpoint(const std::string&, int64_t, int64_t*) override { return Unimplemented("no"); }
  std::atomic<int> restarts{0};  // restart runs
  std::atomic<int> releases{0};  // restart runs that succeeded

 protected:
  void StartRun(const RunOptions& options, NamedFeeds feeds, std::vector<std::string> fetches,
                std::vector<std::string> targets, std::function<void(Result<std::vector<Tensor>>)> done) override {
    if (targets == std::vector<std::string>{"restarted"}) {
      const int run = restarts++;
      if (fail_release_)
        if (Status s = fail_release_(run); !s.ok()) return done(s);
      ++releases;
      return done(std::vector<Tensor>{});
    }
    if (targets == std::vector<std::string>{"enq"}) {
      Status s = fail_(enqueues_++);
      if (!s.ok()) return done(s);
    }
    FeedMap f;
    for (auto& kv : feeds) f.emplace_back(kv.first, std::move(kv.second));
    inner_.RunAsync(f, Fetches(fetches), Targets(targets), options, std::move(done));
  }

 private:
  Session& inner_;
  std::function<Status(int)> fail_;
  std::function<Status(int)> fail_release_;
  std::atomic<int> enqueues_{0};
};

const Status kMoved = Aborted(std::string("node n1: slot 0 ") + kStaleShardMap + " 3 (it moves at epoch 4)");

// A QueueRunner on s enqueueing the values 0..n-1 ("enq"; "close" at the
// end, "restarted" after a move), and how many values the test dequeued
// from inner ("deq") until the queue closed.
struct RestartingRun {
  std::atomic<int> next{0};
  QueueRunner runner;
  int got = 0;
  RestartingRun(Session& inner, SessionInterface& s, int n)
      : runner(s, {"enq"}, [this, n](int) -> Result<FeedMap> {
          const int v = next.fetch_add(1);
          if (v >= n) return OutOfRange("input exhausted");
          return FeedMap{{"x", Tensor::Scalar<float>(static_cast<float>(v))}};
        }, Options()) {
    REQUIRE(runner.Start().ok());
    while (inner.Run({}, std::vector<std::string>{"deq"}).ok()) ++got;
  }
  static QueueRunnerOptions Options() {
    QueueRunnerOptions o;
    o.close_target = "close";
    o.restart_target = "restarted";
    return o;
  }
};

}  // namespace

TEST_CASE("QueueRunner runs its restart target when the cluster moves an enqueue, and goes on", "[queue_runner]") {
  RunnerGraph rg(/*capacity=*/64);
  REQUIRE(rg.g.status().ok());
  Session inner(rg.g);
  // Runs 3, 4 and 9 fail: two in a row (a move), then a lost node.
  MovingSession s(inner, [](int run) {
    if (run == 3 || run == 4) return kMoved;
    if (run == 9) return Unavailable("node n1 is gone");
    return Status::OK();
  });
  RestartingRun run(inner, s, 20);
  CHECK(run.runner.Join().ok());
  CHECK(s.restarts.load() == 3);
  CHECK(run.runner.restarts() == 3);
  CHECK(run.got == 17);  // the three failed runs' values are the input's loss to make good (the release's job)
  CHECK(run.runner.steps() == 17);
}

TEST_CASE("QueueRunner runs its restart target again when the target itself meets the move", "[queue_runner]") {
  RunnerGraph rg(/*capacity=*/64);
  REQUIRE(rg.g.status().ok());
  Session inner(rg.g);
  // Enqueue run 2 is moved; the release after it is refused at the old
  // holder once, then passes on the new map.
  MovingSession s(
      inner, [](int run) { return run == 2 ? kMoved : Status::OK(); },
      [](int run) { return run == 0 ? kMoved : Status::OK(); });
  RestartingRun run(inner, s, 10);
  CHECK(run.runner.Join().ok());
  CHECK(s.restarts.load() == 2);  // the refused release ran again
  CHECK(s.releases.load() == 1);  // and passed before the loop went on
  CHECK(run.runner.restarts() == 2);
  CHECK(run.got == 9);
}

TEST_CASE("QueueRunner gives up after max_restarts moves in a row, and without a restart target at once",
          "[queue_runner]") {
  RunnerGraph rg(/*capacity=*/64);
  REQUIRE(rg.g.status().ok());
  Session inner(rg.g);
  MovingSession s(inner, [](int) { return kMoved; });
  auto feed = [](int) -> Result<FeedMap> { return FeedMap{{"x", Tensor::Scalar<float>(1)}}; };
  QueueRunnerOptions o;
  o.restart_target = "restarted";
  o.max_restarts = 4;
  QueueRunner runner(s, {"enq"}, feed, o);
  REQUIRE(runner.Start().ok());
  Status st = runner.Join();
  CHECK(st.code() == Code::kUnavailable);
  CHECK(st.message().find("5 times in a row") != std::string::npos);
  CHECK(s.restarts.load() == 4);
  // Without one, a stale-map abort ends the loop as an Aborted enqueue always did.
  QueueRunner plain(s, {"enq"}, feed, QueueRunnerOptions{});
  REQUIRE(plain.Start().ok());
  CHECK(plain.Join().ok());
  CHECK(s.restarts.load() == 4);
}
