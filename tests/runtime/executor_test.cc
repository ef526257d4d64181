#include <catch2/catch.hpp>

#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "graph/partition.h"
#include "runtime/executor.h"
#include "runtime/rendezvous.h"
#include "kernels/compute_pool.h"
#include "shardflow/control_flow.h"
#include "shardflow/ops.h"

using namespace sf;

namespace {

// An executor environment with a pool and no services.
runtime::ExecutorEnv PoolOnly(ComputePool* pool) {
  runtime::ExecutorEnv env;
  env.pool = pool;
  return env;
}

// Runs one step and waits for its answer.
Result<std::vector<Tensor>> RunOnce(runtime::Executor& ex, std::vector<Tensor> feeds) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<std::vector<Tensor>>> result;
  ex.RunStep(1, std::move(feeds), [&](Status s, std::vector<Tensor> out) {
    std::lock_guard<std::mutex> l(mu);
    if (s.ok()) result.emplace(std::move(out));
    else result.emplace(s);
    cv.notify_all();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return result.has_value(); });
  return std::move(*result);
}

}  // namespace

TEST_CASE("Executor refuses a step whose feed count differs from its plan", "[executor]") {
  ComputePool pool(2);
  Tensor xv = Tensor::FromVector(std::vector<float>{1, 2}, {2});
  SECTION("plain partition") {
    Graph g;
    auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
    auto y = ops::Identity(g, x, "y");
    REQUIRE(g.status().ok());
    runtime::ExecutorSpec spec{{x.node, y.node}, {x}, {y}};
    auto ex = runtime::Executor::Create(g, spec, PoolOnly(&pool));
    REQUIRE(ex.ok());
    auto none = RunOnce(**ex, {});
    REQUIRE(!none.ok());
    CHECK(none.status().code() == Code::kInvalidArgument);
    CHECK(none.status().message().find("0 feed value(s), the partition expects 1") != std::string::npos);
    CHECK(!RunOnce(**ex, {xv, xv}).ok());
    auto good = RunOnce(**ex, {xv});
    REQUIRE(good.ok());
    CHECK((*good)[0].ToVector<float>() == std::vector<float>{1, 2});
  }
  SECTION("control-flow partition") {
    Graph g;
    auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
    auto p = ops::Placeholder(g, DType::kBool, {}, "p");
    auto sw = ops::Switch(g, x, p, "sw");
    auto y = ops::Identity(g, sw[1], "y");
    REQUIRE(g.status().ok());
    runtime::ExecutorSpec spec{{x.node, p.node, sw[0].node, y.node}, {x, p}, {y}};
    auto ex = runtime::Executor::Create(g, spec, PoolOnly(&pool));
    REQUIRE(ex.ok());
    auto short_feeds = RunOnce(**ex, {xv});
    REQUIRE(!short_feeds.ok());
    CHECK(short_feeds.status().code() == Code::kInvalidArgument);
    CHECK(short_feeds.status().message().find("1 feed value(s), the partition expects 2") !=
          std::string::npos);
    auto good = RunOnce(**ex, {xv, Tensor::Scalar<bool>(true)});
    REQUIRE(good.ok());
    CHECK((*good)[0].ToVector<float>() == std::vector<float>{1, 2});
  }
}

TEST_CASE("A failed step drops what its loop-gradient stacks hold", "[executor]") {
  // The step pushes x onto its stacks and then pops at a fed index. Once the
  // failed step has answered, nothing of it (stacks, values) still holds x.
  ComputePool pool(2);
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  auto i = ops::Placeholder(g, DType::kInt32, PartialShape(), "i");
  auto zero = ops::Const(g, int32_t{0});
  const int push = ops::StackPush(g, x, zero, "s");
  auto pop = ops::StackPop(g, i, "s", DType::kFloat32, PartialShape({2}));
  REQUIRE(g.AddControlInput(pop.node, push).ok());
  auto y = ops::Identity(g, pop, "y");
  REQUIRE(g.status().ok());
  runtime::ExecutorSpec spec{{x.node, i.node, zero.node, push, pop.node, y.node}, {x, i}, {y}};
  auto ex = runtime::Executor::Create(g, spec, PoolOnly(&pool));
  REQUIRE(ex.ok());
  Tensor xv = Tensor::FromVector(std::vector<float>{1, 2}, {2});
  SECTION("a kernel error in the middle of the step") {
    // A matrix index fails StackPop while x is on the stacks.
    for (int step = 0; step < 3; ++step) {
      auto r = RunOnce(**ex, {xv, Tensor::FromVector(std::vector<int32_t>{1, 1}, {1, 2})});
      REQUIRE(!r.ok());
      CHECK(r.status().message().find("stack index must be an int32 scalar or a vector") != std::string::npos);
      CHECK(xv.BufferIsUnique());
    }
  }
  SECTION("a dead fetch at the end of the step") {
    // Nothing was pushed under index 1: the popped value is dead, and so is
    // the fetch, which fails the step after all its ops ran.
    for (int step = 0; step < 3; ++step) {
      auto r = RunOnce(**ex, {xv, Tensor::Scalar<int32_t>(1)});
      REQUIRE(!r.ok());
      CHECK(r.status().message().find("is dead") != std::string::npos);
      CHECK(xv.BufferIsUnique());
    }
  }
  SECTION("a good step pops what it pushed") {
    auto r = RunOnce(**ex, {xv, Tensor::Scalar<int32_t>(0)});
    REQUIRE(r.ok());
    CHECK((*r)[0].ToVector<float>() == std::vector<float>{1, 2});
  }
}

TEST_CASE("Stack indices of nested loops: one value per index vector", "[executor]") {
  // A loop nested in a loop indexes its stacks by [outer, inner]: [1, 2] and
  // [2, 1] are different slots, and a scalar 1 is not [1].
  ComputePool pool(2);
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  auto i = ops::Placeholder(g, DType::kInt32, PartialShape(), "i");
  auto at = ops::Const(g, Tensor::FromVector(std::vector<int32_t>{1, 2}, {2}));
  const int push = ops::StackPush(g, x, at, "s");
  auto pop = ops::StackPop(g, i, "s", DType::kFloat32, PartialShape({2}));
  REQUIRE(g.AddControlInput(pop.node, push).ok());
  auto y = ops::Identity(g, pop, "y");
  REQUIRE(g.status().ok());
  runtime::ExecutorSpec spec{{x.node, i.node, at.node, push, pop.node, y.node}, {x, i}, {y}};
  auto ex = runtime::Executor::Create(g, spec, PoolOnly(&pool));
  REQUIRE(ex.ok());
  Tensor xv = Tensor::FromVector(std::vector<float>{3, 4}, {2});
  auto same = RunOnce(**ex, {xv, Tensor::FromVector(std::vector<int32_t>{1, 2}, {2})});
  REQUIRE(same.ok());
  CHECK((*same)[0].ToVector<float>() == std::vector<float>{3, 4});
  for (const Tensor& other : {Tensor::FromVector(std::vector<int32_t>{2, 1}, {2}), Tensor::Scalar<int32_t>(1),
                              Tensor::FromVector(std::vector<int32_t>{1, 2, 0}, {3})}) {
    auto r = RunOnce(**ex, {xv, other});
    REQUIRE(!r.ok());
    CHECK(r.status().message().find("is dead") != std::string::npos);
  }
  // A loaded graph cannot make a key of any length: deeper than 64 loops is refused.
  auto deep = RunOnce(**ex, {xv, Tensor::FromVector(std::vector<int32_t>(65, 0), {65})});
  REQUIRE(!deep.ok());
  CHECK(deep.status().message().find("vector of 1 to 64 int32s") != std::string::npos);
}

namespace {

// A LocalRendezvous that tells when a receive has started waiting.
class WatchedRendezvous : public RendezvousService {
 public:
  Status Send(const RendezvousKey& key, Tensor value, bool is_dead) override {
    return local.Send(key, std::move(value), is_dead);
  }
  void RecvAsync(const RendezvousKey& key, std::function<void(Status, Tensor, bool)> done) override {
    local.RecvAsync(key, std::move(done));
    std::lock_guard<std::mutex> l(mu);
    ++receives;
    cv.notify_all();
  }
  void Abort(int64_t step_id, const Status& status) override { local.Abort(step_id, status); }
  // Waits up to 30 s for the first receive; false if none came.
  bool WaitForReceive() {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(30), [&] { return receives > 0; });
  }
  runtime::LocalRendezvous local;

 private:
  std::mutex mu;
  std::condition_variable cv;
  int receives = 0;
};

// Where a step that waits on a _Recv ends: the thread its done ran on.
struct RecvStep {
  explicit RecvStep(int64_t elements) {
    auto x = ops::Recv(g, DType::kFloat32, PartialShape({elements}), "x:0->here", "there", "here", "x");
    auto y = ops::Mul(g, x, x);
    spec = runtime::ExecutorSpec{{x.node, y.node}, {}, {y}};
    value = Tensor::FromVector(std::vector<float>(static_cast<size_t>(elements), 2.0f), {elements});
  }
  // Starts step 7, hands x over on this thread (holding InlineCheapOps when
  // asked) and returns the thread done ran on, with y's first element.
  std::pair<std::thread::id, float> Run(bool inline_cheap) {
    ComputePool pool(1);
    WatchedRendezvous rdv;
    runtime::ExecutorEnv env = PoolOnly(&pool);
    env.rendezvous = &rdv;
    auto ex = runtime::Executor::Create(g, spec, env);
    REQUIRE(ex.ok());
    std::mutex mu;
    std::condition_variable cv;
    std::optional<std::pair<std::thread::id, float>> result;
    (*ex)->RunStep(7, {}, [&](Status s, std::vector<Tensor> out) {
      REQUIRE(s.ok());
      std::lock_guard<std::mutex> l(mu);
      result.emplace(std::this_thread::get_id(), out[0].data<float>()[0]);
      cv.notify_all();
    });
    // The tensor must find the receive waiting: otherwise the _Recv takes
    // it on its own (pool) thread.
    REQUIRE(rdv.WaitForReceive());
    // And the pool thread that started it must have left the step: a receive
    // answered before its starter returned from ComputeAsync goes on in the
    // starter's thread. With one pool thread, a task behind it shows that.
    std::promise<void> left;
    pool.Schedule([&] { left.set_value(); });
    REQUIRE(left.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    {
      std::optional<runtime::InlineCheapOps> cheap;
      if (inline_cheap) cheap.emplace();
      REQUIRE(rdv.Send({7, "x:0->here", "", 0}, value, false).ok());
    }
    std::unique_lock<std::mutex> l(mu);
    REQUIRE(cv.wait_for(l, std::chrono::seconds(30), [&] { return result.has_value(); }));
    return *result;
  }
  Graph g;
  runtime::ExecutorSpec spec;
  Tensor value;
};

}  // namespace

TEST_CASE("Executor: under InlineCheapOps a received tensor's cheap ops run on the handing thread", "[executor]") {
  const std::thread::id self = std::this_thread::get_id();
  SECTION("small: the Mul and the step's end run here") {
    RecvStep step(16);
    auto [where, y] = step.Run(/*inline_cheap=*/true);
    CHECK(where == self);
    CHECK(y == 4.0f);
  }
  SECTION("over kInlineCheapElements: the Mul goes to the pool") {
    RecvStep step(runtime::kInlineCheapElements + 1);
    auto [where, y] = step.Run(true);
    CHECK(where != self);
    CHECK(y == 4.0f);
  }
  SECTION("without it: the pool, as before") {
    RecvStep step(16);
    auto [where, y] = step.Run(false);
    CHECK(where != self);
    CHECK(y == 4.0f);
  }
}
