#include <catch2/catch.hpp>

#include <condition_variable>
#include <mutex>
#include <optional>

#include "runtime/executor.h"
#include "kernels/compute_pool.h"
#include "shardflow/control_flow.h"
#include "shardflow/ops.h"

using namespace sf;

namespace {

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
    auto ex = runtime::Executor::Create(g, spec, runtime::ExecutorEnv{nullptr, &pool});
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
    auto ex = runtime::Executor::Create(g, spec, runtime::ExecutorEnv{nullptr, &pool});
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
